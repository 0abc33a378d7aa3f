"""The magnet term (``objectives/magnet.py``) against a hand-written KL with legal-action masks, its schedules, its
settings refused in one line, and its wiring into PPO (``model.magnet``: logged, EMA and initial magnets, off by
default, checkpointed)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning.algos import PPO
from rl_lightning.algos.magnet import Magnet, magnet_settings
from rl_lightning.errors import ConfigError
from rl_lightning.objectives.magnet import magnet_kl, magnet_weight
from tests.game_match_toys import HighCard
from tests.helpers import tiny_ppo, trainer


def _naive_kl(logits: torch.Tensor, magnet: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor:
    """KL(π ‖ ρ) row by row over the legal actions only, written out with Python loops."""
    rows = []
    for row in range(len(logits)):
        legal = [a for a in range(logits.shape[1]) if mask[row, a]]
        z = sum(torch.exp(logits[row, a]) for a in legal)
        zq = None if magnet is None else sum(torch.exp(magnet[row, a]) for a in legal)
        total = logits.new_zeros(())
        for a in legal:
            p = torch.exp(logits[row, a]) / z
            q = 1.0 / len(legal) if magnet is None else torch.exp(magnet[row, a]) / zq
            total = total + p * (torch.log(p) - torch.log(torch.as_tensor(q, dtype=logits.dtype)))
        rows.append(total)
    return torch.stack(rows)


@pytest.mark.parametrize("uniform", [True, False])
def test_value_and_gradient_match_a_hand_written_masked_kl(uniform: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    magnet = None if uniform else torch.randn(6, 5, generator=gen, dtype=torch.float64)
    mask = torch.rand(6, 5, generator=gen) < 0.6
    mask[:, 0] = True  # every row has a legal action
    mask[1] = torch.tensor([True, False, False, False, False])  # a single legal action: KL 0
    weights = torch.rand(6, generator=gen, dtype=torch.float64)  # a weighted sum tests every row's gradient
    ours = magnet_kl(logits, magnet, mask)
    naive = _naive_kl(logits, magnet, mask)
    torch.testing.assert_close(ours, naive)
    (grad,) = torch.autograd.grad((ours * weights).sum(), logits)
    (naive_grad,) = torch.autograd.grad((naive * weights).sum(), logits)
    torch.testing.assert_close(grad, naive_grad)
    assert ours[1] == 0
    assert torch.all(grad[~mask] == 0)  # illegal actions get no gradient


def test_uniform_magnet_is_log_legal_minus_entropy_and_the_magnet_gets_no_gradient() -> None:
    logits = torch.tensor([[0.3, -1.0, 2.0, 0.0]])
    mask = torch.tensor([[True, True, False, True]])
    p = torch.softmax(logits.masked_fill(~mask, -math.inf), -1)
    entropy = -(p[mask] * p[mask].log()).sum()
    assert magnet_kl(logits, None, mask).item() == pytest.approx(math.log(3) - entropy.item(), abs=1e-6)
    magnet = torch.zeros(1, 4, requires_grad=True)
    magnet_kl(logits.requires_grad_(), magnet, mask).sum().backward()
    assert magnet.grad is None


def test_schedules() -> None:
    assert magnet_weight("constant", 0.2, 0.0, 0.7) == 0.2
    assert magnet_weight("linear", 0.2, 0.0, 0.5) == pytest.approx(0.1)
    assert magnet_weight("linear", 0.2, 0.0, 3.0) == 0.0  # held at the end
    assert magnet_weight("exponential", 0.1, 0.001, 0.5) == pytest.approx(0.01)
    assert magnet_weight("exponential", 0.1, 0.001, 1.0) == pytest.approx(0.001)
    assert magnet_weight("exponential", 0.1, 0.001, 0.0) == pytest.approx(0.1)


@pytest.mark.parametrize(("spec", "message"), [
    ({"kind": "ema", "tau": 0.1}, r"model.magnet.tau: not a magnet setting; the settings are \["),
    ("average", r"model.magnet.kind='average': choose one of \['uniform', 'ema', 'initial'\]"),
    ({"schedule": "cosine"}, r"model.magnet.schedule='cosine': choose one of"),
    ({"schedule": "exponential", "final_coef": 0.0}, r"final_coef=0.0: an exponential decay needs coef and final"),
    ({"coef": -1.0}, r"model.magnet.coef=-1.0: use a weight >= 0"),
    ({"coef": "big"}, r"model.magnet.coef='big': expected a float"),
    ({"kind": "ema", "ema_tau": 0.0}, r"ema_tau=0.0: use a rate in \(0, 1\]"),
    ({"ema_start_env_steps": 100}, r"model.magnet.ema_start_env_steps=100: a late start needs kind: ema; drop it"),
    ({"kind": "ema", "ema_start_env_steps": -1}, r"ema_start_env_steps=-1: use a number of env steps >= 0"),
    ({"kind": "ema", "ema_start_env_steps": 1.5}, r"ema_start_env_steps=1.5: expected a int"),
    ({"kind": "initial", "ema_coef": 0.5}, r"model.magnet.ema_coef=0.5: ema_coef needs kind: ema"),
    ({"kind": "ema", "ema_coef": -0.1}, r"model.magnet.ema_coef=-0.1: use a weight >= 0, or null"),
    ({"ema_final_tau": 0.01}, r"model.magnet.ema_final_tau=0.01: a decaying EMA rate needs kind: ema"),
    ({"lr_follows_below": 0.0}, r"model.magnet.lr_follows_below=0.0: use a positive weight, or null"),
    ({"kind": "ema", "ema_final_tau": 0.0}, r"ema_final_tau=0.0: use a rate in \(0, 1\], or null"),
    ({"reset_env_steps": 10}, r"model.magnet.reset_env_steps=10: a magnet reset needs kind: ema; drop it"),
    ({"kind": "ema", "reset_env_steps": 0}, r"reset_env_steps=0: use a positive number of env steps, or null"),
])  # fmt: skip
def test_bad_settings_are_refused_in_one_line(spec: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        magnet_settings(spec)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_magnet_is_off_by_default_and_refused_with_compile_or_continuous_actions() -> None:
    module, _ = tiny_ppo()
    assert module.magnet is None
    with pytest.raises(ConfigError, match="compile_update=true"):
        tiny_ppo(magnet="uniform", compile_update=True)
    from rl_lightning.envs import Pendulum

    with pytest.raises(ConfigError, match="categorical policy; this env's actions are box"):
        tiny_ppo(env=Pendulum(), magnet="uniform")


def _selfplay(magnet: object, **kwargs: object) -> tuple[PPO, object]:
    from rl_lightning.data import OnPolicyDataModule

    env = HighCard(seats=2)
    datamodule = OnPolicyDataModule(env, num_envs=4, num_steps=8, total_env_steps=96, seats={0: "self", 1: "self"})
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=2, magnet=magnet, **kwargs)
    return module, datamodule


def test_fit_logs_the_kl_and_the_scheduled_weight(tmp_path: Path) -> None:
    module, datamodule = _selfplay({"kind": "uniform", "coef": 0.4, "schedule": "linear", "final_coef": 0.0})
    seen: list[dict[str, float]] = []

    class Record(Callback):  # reads each update's published metrics
        def on_train_batch_end(self, trainer: object, *args: object) -> None:
            metrics = trainer.callback_metrics  # type: ignore[attr-defined]
            seen.append({k: float(metrics[k]) for k in ("train/magnet_kl", "train/magnet_coef")})

    trainer(tmp_path, [Record()]).fit(module, datamodule)
    # each update's weight is set from the env steps collected so far, its own rollout included: 32, 64, 96 of 96
    coefs = [entry["train/magnet_coef"] for entry in seen]
    assert coefs == pytest.approx([0.4 * (1 - steps / 96) for steps in (32, 64, 96)], abs=1e-6)
    assert all(0 <= entry["train/magnet_kl"] <= math.log(3) + 1e-6 for entry in seen)


@pytest.mark.parametrize("anneal_lr", [False, True])
def test_lr_follows_the_weight_below_the_threshold(tmp_path: Path, anneal_lr: bool) -> None:
    """``lr_follows_below``: each update's lr is ``lr · min(1, weight / threshold)``, on top of ``anneal_lr``."""
    spec = {"kind": "uniform", "coef": 0.4, "schedule": "linear", "final_coef": 0.1, "lr_follows_below": 0.3}
    module, datamodule = _selfplay(spec, lr=0.01, anneal_lr=anneal_lr)
    seen: list[tuple[float, float]] = []

    class Record(Callback):
        def on_train_batch_end(self, trainer: object, *args: object) -> None:
            metrics = trainer.callback_metrics  # type: ignore[attr-defined]
            seen.append((float(metrics["train/magnet_coef"]), float(metrics["train/lr"])))

    trainer(tmp_path, [Record()]).fit(module, datamodule)
    coefs = [0.4 - 0.3 * steps / 96 for steps in (32, 64, 96)]  # 0.3, 0.2, 0.1: at, then below, the threshold
    annealed = [1 - before / 96 if anneal_lr else 1.0 for before in (0, 32, 64)]  # lr anneals on steps before it
    assert [c for c, _ in seen] == pytest.approx(coefs, abs=1e-6)
    assert [lr for _, lr in seen] == pytest.approx([0.01 * a * min(1.0, c / 0.3) for c, a in zip(coefs, annealed)])
    assert seen[-1][1] < seen[0][1] / 2  # the threshold bites: 0.1 / 0.3 of the lr at the last update


def test_ema_magnet_trails_the_weights_and_initial_stays_put(tmp_path: Path) -> None:
    ema, datamodule = _selfplay({"kind": "ema", "ema_tau": 0.5})
    start = {k: v.clone() for k, v in ema.magnet.state_dict().items()}
    assert all(torch.equal(start[f"actor__{name.replace('.', '__')}"], p) for name, p in ema.actor.named_parameters())
    trainer(tmp_path, []).fit(ema, datamodule)
    # after the last update the magnet is the EMA up to the weights before it: between the start and the weights now
    for name, param in ema.actor.named_parameters():
        buffer = ema.magnet.state_dict()[f"actor__{name.replace('.', '__')}"]
        assert not torch.equal(buffer, start[f"actor__{name.replace('.', '__')}"])
        assert not torch.equal(buffer, param.detach())
    frozen, datamodule = _selfplay({"kind": "initial", "coef": 1.0})
    start = {k: v.clone() for k, v in frozen.magnet.state_dict().items()}
    trainer(tmp_path, []).fit(frozen, datamodule)
    assert all(torch.equal(v, start[k]) for k, v in frozen.magnet.state_dict().items())
    assert any(not torch.equal(p, start[f"actor__{n.replace('.', '__')}"]) for n, p in frozen.actor.named_parameters())


def test_magnet_weights_are_checkpointed_buffers_never_optimised() -> None:
    module, _ = _selfplay("ema")
    names = [name for name, _ in module.named_parameters()]
    assert not any(name.startswith("magnet") for name in names)
    assert any(key.startswith("magnet.actor__") for key in module.state_dict())
    twin, _ = _selfplay("ema")
    twin.load_state_dict(module.state_dict())
    restored, saved = twin.magnet.state_dict(), module.magnet.state_dict()
    assert all(torch.equal(restored[key], saved[key]) for key in saved)


def test_the_term_pulls_the_policy_toward_the_magnet() -> None:
    """One minibatch's loss gradient with the magnet term is the PPO loss's plus coef × the KL's gradient."""
    module, datamodule = _selfplay({"kind": "initial", "coef": 0.7})
    plain, _ = _selfplay(None)
    plain.load_state_dict({k: v for k, v in module.state_dict().items() if not k.startswith("magnet")})
    with torch.no_grad():  # move the policy away from its initial weights so the KL is not 0
        for param in module.actor.parameters():
            param.add_(0.3 * torch.randn_like(param))
        for mine, other in zip(module.actor.parameters(), plain.actor.parameters()):
            other.copy_(mine)
    gen = torch.Generator().manual_seed(1)
    obs = torch.randn(8, *module.env_spec.obs_shape, generator=gen)
    mask = torch.ones(8, module.env_spec.num_actions, dtype=torch.bool)
    mb = {"obs": obs, "action_mask": mask, "action": torch.zeros(8, dtype=torch.long), "logprob": torch.zeros(8),
          "value": torch.zeros(8), "advantage": torch.randn(8, generator=gen), "return": torch.zeros(8)}  # fmt: skip
    with_magnet = torch.autograd.grad(module.minibatch_loss(mb)[0], list(module.actor.parameters()))
    without = torch.autograd.grad(plain.minibatch_loss(mb)[0], list(plain.actor.parameters()))
    kl = magnet_kl(module.actor(obs), module.magnet.magnet_logits(module, obs), mask).mean()
    kl_grad = torch.autograd.grad(kl, list(module.actor.parameters()))
    for a, b, c in zip(with_magnet, without, kl_grad):
        torch.testing.assert_close(a, b + 0.7 * c)
    assert isinstance(module.magnet, Magnet)
    assert kl.item() > 0


@pytest.mark.parametrize("magnet", [None, {"kind": "initial", "coef": 1.0}, "ema"])
def test_a_magnet_runs_checkpoint_starts_a_run_with_or_without_a_magnet(tmp_path: Path, magnet: object) -> None:
    """``init_weights`` from a run trained with an EMA magnet: the policy's weights load, the old magnet's buffers do
    not (they were refused as extra keys); a new magnet starts from the loaded weights."""
    module, datamodule = _selfplay("ema")
    fit = trainer(tmp_path, [])
    fit.fit(module, datamodule)
    path = tmp_path / "magnet.ckpt"
    fit.save_checkpoint(path)
    started = PPO(env_spec=module.env_spec, hidden_sizes=(8,), magnet=magnet, init_weights=str(path))
    for name, param in module.actor.named_parameters():
        assert torch.equal(dict(started.actor.named_parameters())[name], param)
        if magnet is not None:  # the new magnet copied the loaded weights, not the old run's EMA
            assert torch.equal(started.magnet.state_dict()[f"actor__{name.replace('.', '__')}"], param.detach())


def _late(start: int, tau: float, coef_after: float | None) -> PPO:
    spec = {"kind": "ema", "coef": 1.0, "schedule": "linear", "final_coef": 0.0, "decay_env_steps": 100,
            "ema_tau": tau, "ema_start_env_steps": start, "ema_coef": coef_after}  # fmt: skip
    return _selfplay(spec)[0]


def _at(module: PPO, env_steps: int) -> SimpleNamespace:
    """What ``before_update`` reads of a module: its nets and the env steps so far."""
    return SimpleNamespace(encoder=module.encoder, actor=module.actor, env_steps=env_steps, total_env_steps=100)


def _nudge(module: PPO, gen: torch.Generator) -> None:
    """An optimiser step's stand-in: move every policy weight a little."""
    with torch.no_grad():
        for param in [*module.encoder.parameters(), *module.actor.parameters()]:
            param.add_(0.1 * torch.randn(param.shape, generator=gen))


def test_a_late_ema_magnet_is_uniform_then_copies_the_policy_then_follows_a_hand_written_ema() -> None:
    module = _late(start=40, tau=0.25, coef_after=0.3)
    magnet, gen = module.magnet, torch.Generator().manual_seed(0)
    obs = torch.randn(5, *module.env_spec.obs_shape, generator=gen)
    start = {k: v.clone() for k, v in magnet.state_dict().items() if k != "ema_started"}
    reference: dict[str, torch.Tensor] = {}
    for env_steps in (20, 30, 40, 50, 60):
        _nudge(module, gen)
        magnet.before_update(_at(module, env_steps))
        weights = {f"{net}__{n.replace('.', '__')}": p.detach().clone()
                   for net in ("encoder", "actor") for n, p in getattr(module, net).named_parameters()}  # fmt: skip
        if env_steps < 40:  # uniform on the schedule: untouched buffers, no magnet logits
            assert all(torch.equal(magnet.state_dict()[k], v) for k, v in start.items())
            assert magnet.magnet_logits(module, obs) is None
            assert not bool(magnet.ema_started)
            assert magnet.coef == pytest.approx(1.0 - env_steps / 100)
            continue
        # from the start on: the first update copies the weights, then θ_ρ ← θ_ρ + τ (θ − θ_ρ), weight ema_coef
        reference = weights if not reference else {k: r + 0.25 * (weights[k] - r) for k, r in reference.items()}
        for key, value in reference.items():
            torch.testing.assert_close(magnet.state_dict()[key], value)
        assert bool(magnet.ema_started)
        assert magnet.coef == 0.3
        assert magnet.magnet_logits(module, obs) is not None


def test_a_late_ema_magnets_state_is_checkpointed_and_a_resume_continues_it() -> None:
    """A twin loaded from the state dict after the start moves its magnet as the original does (an EMA step, not a
    second copy of the weights); one loaded before the start stays uniform."""
    module, gen = _late(start=40, tau=0.25, coef_after=None), torch.Generator().manual_seed(1)
    before = _late(start=40, tau=0.25, coef_after=None)
    before.load_state_dict(module.state_dict())
    for env_steps in (40, 50):
        _nudge(module, gen)
        module.magnet.before_update(_at(module, env_steps))
    assert "magnet.ema_started" in module.state_dict()
    twin = _late(start=40, tau=0.25, coef_after=None)
    twin.load_state_dict(module.state_dict())
    _nudge(module, gen)
    twin.load_state_dict({k: v for k, v in module.state_dict().items() if not k.startswith("magnet.")}, strict=False)
    module.magnet.before_update(_at(module, 60))
    twin.magnet.before_update(_at(twin, 60))
    for key, value in module.magnet.state_dict().items():
        torch.testing.assert_close(twin.magnet.state_dict()[key], value)
    before.magnet.before_update(_at(before, 30))
    assert before.magnet.magnet_logits(before, torch.zeros(1, *before.env_spec.obs_shape)) is None


def test_a_late_ema_magnet_runs_in_a_fit(tmp_path: Path) -> None:
    module, datamodule = _selfplay({"kind": "ema", "ema_tau": 0.5, "ema_start_env_steps": 64, "ema_coef": 0.2})
    trainer(tmp_path, []).fit(module, datamodule)  # updates at 32, 64, 96 env steps: the EMA starts at the second
    assert bool(module.magnet.ema_started)
    assert module.magnet.coef == 0.2


def test_a_decaying_ema_rate_follows_a_hand_written_geometric_rate() -> None:
    """``ema_tau`` 0.5 -> ``ema_final_tau`` 0.05 over 100 env steps: the rate at s env steps is 0.5 · 0.1^(s/100),
    held at 0.05 after; an EMA from the start (no copy)."""
    module = _selfplay({"kind": "ema", "ema_tau": 0.5, "ema_final_tau": 0.05, "decay_env_steps": 100})[0]
    gen = torch.Generator().manual_seed(2)
    reference = {k: v.clone() for k, v in module.magnet.state_dict().items()}
    for env_steps in (25, 50, 100, 150):
        _nudge(module, gen)
        module.magnet.before_update(_at(module, env_steps))
        rate = 0.5 * 0.1 ** (min(env_steps, 100) / 100)
        weights = {f"{net}__{n.replace('.', '__')}": p.detach()
                   for net in ("encoder", "actor") for n, p in getattr(module, net).named_parameters()}  # fmt: skip
        reference = {k: r + rate * (weights[k] - r) for k, r in reference.items()}
        for key, value in reference.items():
            torch.testing.assert_close(module.magnet.state_dict()[key], value)
    assert module.magnet.coef == 0.05  # the weight is the default constant one
    module, _ = _selfplay({"kind": "ema", "ema_final_tau": 0.05})
    with pytest.raises(ConfigError, match="model.magnet.ema_final_tau decays over"):
        module.magnet.before_update(SimpleNamespace(encoder=module.encoder, actor=module.actor, env_steps=1,
                                                    total_env_steps=None))  # fmt: skip


def _weights_now(module: PPO) -> dict[str, torch.Tensor]:
    return {f"{net}__{n.replace('.', '__')}": p.detach().clone()
            for net in ("encoder", "actor") for n, p in getattr(module, net).named_parameters()}  # fmt: skip


def test_a_reset_magnet_is_a_frozen_copy_recopied_every_reset_env_steps_and_resumes() -> None:
    """``reset_env_steps`` 40: copies at 40 and 80 env steps (the first update 40 or more past the last copy), frozen
    between; a twin loaded from the state dict at 60 re-copies at 80, not at 60."""
    module, gen = _selfplay({"kind": "ema", "reset_env_steps": 40})[0], torch.Generator().manual_seed(3)
    reference = {k: v.clone() for k, v in module.magnet.state_dict().items() if k != "reset_at"}
    twin = None
    for env_steps in (20, 40, 60, 70, 80, 100):
        _nudge(module, gen)
        if env_steps == 60:
            twin = _selfplay({"kind": "ema", "reset_env_steps": 40})[0]
            twin.load_state_dict(module.state_dict())
        module.magnet.before_update(_at(module, env_steps))
        if env_steps in (40, 80):
            reference = _weights_now(module)
        for key, value in reference.items():
            assert torch.equal(module.magnet.state_dict()[key], value), (env_steps, key)
    assert twin is not None
    twin.load_state_dict({k: v for k, v in module.state_dict().items() if not k.startswith("magnet.")}, strict=False)
    twin.magnet.before_update(_at(twin, 70))  # 30 past its saved copy at 40: stays frozen
    assert not torch.equal(twin.magnet.state_dict()["actor__0__weight"], module.actor[0].weight.detach())


@pytest.mark.parametrize("decay", [40, None])
def test_the_weight_and_the_ema_rate_decay_over_decay_env_steps_else_over_the_budget(decay: int | None) -> None:
    """A budget of 100 env steps: the weight 1 -> 0 (linear) and the EMA rate 0.5 -> 0.05 (geometric) reach their
    ends at ``decay_env_steps`` (40), or at the budget when it is null; hand-written, held after the end."""
    spec = {"kind": "ema", "coef": 1.0, "schedule": "linear", "final_coef": 0.0, "decay_env_steps": decay,
            "ema_tau": 0.5, "ema_final_tau": 0.05}  # fmt: skip
    module = _selfplay(spec)[0]
    gen = torch.Generator().manual_seed(3)
    reference = {k: v.clone() for k, v in module.magnet.state_dict().items()}
    span = decay or 100
    for env_steps in (10, 30, 50, 80, 120):
        _nudge(module, gen)
        module.magnet.before_update(_at(module, env_steps))  # total_env_steps=100
        progress = min(env_steps / span, 1.0)
        assert module.magnet.coef == pytest.approx(1.0 - progress)
        rate = 0.5 * 0.1**progress
        weights = {f"{net}__{n.replace('.', '__')}": p.detach()
                   for net in ("encoder", "actor") for n, p in getattr(module, net).named_parameters()}  # fmt: skip
        reference = {k: r + rate * (weights[k] - r) for k, r in reference.items()}
        for key, value in reference.items():
            torch.testing.assert_close(module.magnet.state_dict()[key], value)
