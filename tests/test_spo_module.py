"""SPO LightningModule and ReplayDataModule inside real fits: metrics, targets, routing, lifecycle, resume, errors."""

from __future__ import annotations

import copy

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning import keys
from rl_lightning.callbacks import Evaluation, FailFast, RLCheckpoint, SoftTargetUpdate
from rl_lightning.callbacks.fail_fast import reproduce
from rl_lightning.envs import CartPole, GymnasiumEnv, Pendulum, TicTacToe
from rl_lightning.errors import ConfigError
from tests.helpers import tiny_spo, trainer
from tests.test_callbacks import NaNRewardCartPole

EXPECTED_METRICS = (
    "train/loss_policy", "train/loss_kl", "train/loss_alpha", "train/loss_temperature", "train/loss_critic",
    "search/ess", "search/kl_nonparametric", "search/temperature", "search/particles_alive", "replay/size",
    "replay/ratio_actual", "policy/lag", "rollout/episode_return", "perf/collect_sps",
)  # fmt: skip


class _Rows(Callback):
    def __init__(self):
        self.rows = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        m = pl_module.last_metrics
        self.rows.append({k: float(v) for k, v in m.items() if k.startswith(("train/", "search/", "policy/"))})


def test_fit_logs_every_metric_and_fills_replay(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_spo(total_env_steps=32 * 3)
    rows = _Rows()
    trainer(tmp_path, callbacks=[rows]).fit(module, dm)
    assert module.updates == 3
    assert dm.env_steps == 96
    assert len(dm.replay) == 96
    for key in EXPECTED_METRICS:
        assert key in module.last_metrics, key
        assert torch.isfinite(torch.as_tensor(module.last_metrics[key])), key
    assert "search/alpha" in module.last_metrics
    assert rows.rows[0]["policy/lag"] == 0.0  # the first batch was collected by version 0
    assert module.last_metrics["replay/ratio_actual"] == pytest.approx(2 * 3 / 96)
    stored = dm.replay.sample(8, torch.Generator().manual_seed(0))
    assert stored[keys.SAMPLED_ACTIONS].shape == (8, 4)
    torch.testing.assert_close(stored[keys.SAMPLED_WEIGHTS].sum(-1), torch.ones(8))
    assert "search_ess" not in stored.keys()  # noqa: SIM118 - TensorDict has no `in`; diagnostics are not replayed


def test_same_seed_same_run(tmp_path):
    def run(tmp):
        pl.seed_everything(3)
        module, dm = tiny_spo(total_env_steps=64)
        rows = _Rows()
        trainer(tmp, callbacks=[rows]).fit(module, dm)
        return rows.rows

    a, b = run(tmp_path / "a"), run(tmp_path / "b")
    assert a == b


def test_soft_target_update_runs_after_every_gradient_step(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_spo(total_env_steps=32 * 2, tau=0.5)
    start = copy.deepcopy(module.target_actor.state_dict())
    t = trainer(tmp_path)
    t.fit(module, dm)
    (callback,) = [cb for cb in t.callbacks if isinstance(cb, SoftTargetUpdate)]  # attached by configure_callbacks
    assert callback.tau == 0.5
    assert callback.steps == 2 * 2  # 2 updates × 2 gradient steps
    for name, value in module.target_actor.state_dict().items():
        assert not torch.equal(value, start[name])
        assert not torch.equal(value, module.actor.state_dict()[name])
    assert not any(p.requires_grad for p in module.target_actor.parameters())


def test_gradient_routing_through_the_module():
    pl.seed_everything(0)
    module, dm = tiny_spo()
    dm.setup("fit")
    batch = _replay_batch(module, dm)
    terms = module.losses(batch)
    groups = {
        "actor": list(module.actor.parameters()),
        "critic": list(module.critic.parameters()),
        "temperature": [module.log_temperature],
        "alpha": [module.log_alpha],
        "targets": [*module.target_actor.parameters(), *module.target_critic.parameters()],
    }
    expected = {
        "loss_policy": {"actor"},
        "loss_kl": {"actor"},
        "loss_alpha": {"alpha"},
        "loss_temperature": {"temperature"},
        "loss_critic": {"critic"},
    }
    for term, receivers in expected.items():
        module.zero_grad(set_to_none=True)
        module.losses(batch)[term].backward()
        got = {g for g, ps in groups.items() if any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in ps)}
        assert got == receivers, term
    assert set(expected) <= set(terms.keys())


def _replay_batch(module, dm):
    """Collect one real rollout with search and return a [L, B] replay sample."""
    env = dm.collector.env
    env.reset()
    obs = env.env.observe(env.state)
    rows = []
    policy = module.acting_policy(env, training=True)
    for _ in range(6):
        acted = policy(obs, torch.Generator().manual_seed(len(rows)))
        out = env.step(acted[keys.ACTION])
        row = {**obs.to_dict(), **acted.to_dict(), **{k: out[k] for k in (keys.REWARD, keys.TERMINATED,
               keys.TRUNCATED, keys.FINAL_OBS)}}  # fmt: skip
        rows.append(row)
        obs = out.select(keys.OBS)
    from tensordict import TensorDict

    batch = TensorDict({k: torch.stack([r[k] for r in rows]) for k in rows[0]}, batch_size=[6, 4])
    return module.process_rollout(batch)


def test_critic_targets_come_from_the_target_critic():
    """Only the target critic is moved (its output shifted by +3): the critic's regression targets follow it,
    y = GAE(V_target) + V_target, while the online critic only supplies the prediction."""
    pl.seed_everything(0)
    module, dm = tiny_spo()
    dm.setup("fit")
    batch = _replay_batch(module, dm)
    with torch.no_grad():
        list(module.target_critic.parameters())[-1].add_(3.0)  # the output bias
    loss = module.losses(batch)["loss_critic"]
    from rl_lightning.objectives.gae import generalized_advantage_estimate

    def values(net, key):
        return net(batch[key].reshape(*batch.batch_size, -1).float()).squeeze(-1).detach()

    target_v, target_next = values(module.target_critic, keys.OBS), values(module.target_critic, keys.FINAL_OBS)
    online_v = values(module.critic, keys.OBS)
    assert float((target_v - online_v).abs().min()) > 2.0  # the two critics really differ
    _, targets = generalized_advantage_estimate(
        batch[keys.REWARD], target_v, target_next, batch[keys.TERMINATED], batch[keys.TRUNCATED], 0.99, 0.95
    )
    assert float(loss.detach()) == pytest.approx(float(0.5 * (online_v - targets).square().mean()), rel=1e-5)


def test_gymnasium_snapshots_never_leak(tmp_path):
    env = GymnasiumEnv("CartPole-v1")
    live = []

    class Live(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            live.append(env.live_count)

    pl.seed_everything(0)
    module, dm = tiny_spo(env=env, num_envs=2, rollout_length=4, total_env_steps=16, sequence_length=2)
    evaluation = Evaluation(every_n_updates=1, num_episodes=2, env=copy.deepcopy(env), max_steps=20)
    trainer(tmp_path, callbacks=[Live(), evaluation]).fit(module, dm)
    assert live == [2, 2]  # only the collector's two envs are alive between updates
    assert env.live_count == 0  # teardown closes the pool
    assert evaluation.env.live_count == 0  # each evaluation episode's search roots and leaves were released
    # Double release is harmless; closing releases everything.
    state = env.reset_state(3, torch.Generator().manual_seed(0))
    snap = env.snapshot(state)
    env.release(snap)
    env.release(snap)
    assert env.live_count == 3
    env.close()
    assert env.live_count == 0


def test_search_releases_snapshots_when_it_fails():
    from rl_lightning.algos.spo.search import SearchConfig, smc_search

    env = GymnasiumEnv("CartPole-v1")
    state = env.reset_state(2, torch.Generator().manual_seed(0))
    module, _ = tiny_spo(env=env)
    calls = []

    class Boom(type(module.prior)):
        def value(self, obs):
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("boom")
            return super().value(obs)

    prior = Boom(module.actor, module.critic, env.spec)
    with pytest.raises(RuntimeError, match="boom"):
        smc_search(env, state, env.observe(state), prior, SearchConfig(num_particles=4, depth=4), torch.tensor(1.0),
                   torch.Generator().manual_seed(0))  # fmt: skip
    assert env.live_count == 2
    env.close()


def test_tictactoe_search_never_plays_an_illegal_move(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_spo(env=TicTacToe(), total_env_steps=96, check_env=True, search_depth=3, resample_period=1,
                          root_noise_fraction=0.5, dirichlet_alpha=0.3)  # fmt: skip
    trainer(tmp_path).fit(module, dm)  # check_env raises on any masked action reaching the real env
    sample = dm.replay.sample(64, torch.Generator().manual_seed(0))
    legal = sample[keys.ACTION_MASK].gather(-1, sample[keys.SAMPLED_ACTIONS])
    assert bool(legal.all())  # the stored target's support is legal too


def test_continuous_fit_has_per_dimension_duals(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_spo(env=Pendulum(), total_env_steps=64, init_log_temperature=10.0, epsilon=0.2)
    trainer(tmp_path).fit(module, dm)
    assert module.log_alpha_mean.shape == (1,)
    for key in ("search/alpha_mean", "search/alpha_std", "train/kl_mean", "train/kl_std", "train/loss_policy"):
        assert torch.isfinite(torch.as_tensor(module.last_metrics[key])), key
    sample = dm.replay.sample(16, torch.Generator().manual_seed(0))
    assert sample[keys.SAMPLED_ACTIONS].shape == (16, 4, 1)
    assert bool((sample[keys.SAMPLED_ACTIONS].abs() <= 2.0).all())


def test_eval_samples_from_the_target_by_default_and_greedy_on_request(tmp_path, monkeypatch):
    """Evaluation searches without root noise and draws from q̂ (published SPO), or takes its argmax with
    ``eval_greedy``; training acting always explores and draws."""
    import rl_lightning.algos.spo.module as spo_module

    calls: list[tuple[bool, bool]] = []
    search = spo_module.smc_search

    def spy(*args, explore, greedy, **kwargs):
        calls.append((explore, greedy))
        return search(*args, explore=explore, greedy=greedy, **kwargs)

    monkeypatch.setattr(spo_module, "smc_search", spy)
    for eval_greedy in (False, True):
        pl.seed_everything(0)
        module, dm = tiny_spo(total_env_steps=32, eval_greedy=eval_greedy)
        assert module.eval_deterministic is eval_greedy
        evaluation = Evaluation(every_n_updates=1, num_episodes=3)
        calls.clear()
        trainer(tmp_path, callbacks=[evaluation]).fit(module, dm)
        assert set(calls) == {(True, False), (False, eval_greedy)}  # training acting, evaluation acting
        record = evaluation.history[0]
        assert record["eval/episode_return"] == record["eval/episode_length"]  # CartPole pays 1 per step


def test_fixed_temperature_is_not_learned(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_spo(total_env_steps=64, adaptive_temperature=False, fixed_temperature=1e9)
    trainer(tmp_path).fit(module, dm)
    assert float(module.search_temperature()) == pytest.approx(1e9)
    assert module.last_metrics["train/loss_temperature"] == 0


def test_fail_fast_bundle_replays_an_spo_update(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_spo(env=NaNRewardCartPole(), total_env_steps=32 * 8, search_depth=0)  # NaN from rollout 6
    dm.check_finite = False  # let the NaN reward reach the loss: FailFast is under test here, not the env check
    with pytest.raises(FloatingPointError, match="non-finite"):
        trainer(tmp_path, callbacks=[FailFast(bundle_dir=str(tmp_path))]).fit(module, dm)
    assert any(name.startswith("train/loss_critic") for name in reproduce(tmp_path / "failfast_bundle_rank0.pt"))


def _fit(tmp_path, budget_updates, ckpt_path=None):
    pl.seed_everything(7)
    module, dm = tiny_spo(total_env_steps=32 * budget_updates, save_replay=True)
    rows = _Rows()
    checkpoint = RLCheckpoint(every_n_updates=1, dirpath=str(tmp_path / "ckpt"), save_last=True)
    trainer(tmp_path, callbacks=[rows, checkpoint], enable_checkpointing=True).fit(module, dm, ckpt_path=ckpt_path)
    return module, dm, rows.rows


def test_resume_with_saved_replay_is_exact(tmp_path):
    straight, straight_dm, straight_rows = _fit(tmp_path / "a", 4)
    _, _, first_rows = _fit(tmp_path / "b", 2)
    last = str(tmp_path / "b" / "ckpt" / "last.ckpt")
    with pytest.warns(UserWarning, match="exists and is not empty"):  # resumes into its own checkpoint dir
        resumed, resumed_dm, resumed_rows = _fit(tmp_path / "b", 4, ckpt_path=last)
    assert resumed.updates == 4
    assert resumed_dm.env_steps == straight_dm.env_steps == 128
    assert first_rows + resumed_rows == straight_rows
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)  # online, targets and duals


BAD_DATA = [
    ({"buffer_size": 16}, "data.buffer_size=16 holds fewer than one rollout"),
    ({"sequence_length": 80}, "data.sequence_length=80 exceeds"),
    ({"sequence_length": 40, "buffer_size": 512}, "no batch could ever be sampled"),
    ({"learning_starts": 64}, "training would never start"),
]


class _CountingCartPole(CartPole):
    built = 0

    def reset_state(self, num, generator):
        type(self).built += 1
        return super().reset_state(num, generator)


@pytest.mark.parametrize(("kwargs", "message"), BAD_DATA, ids=[m.split()[0] for _, m in BAD_DATA])
def test_configs_that_can_never_optimise_fail_at_setup(tmp_path, kwargs, message):
    module, dm = tiny_spo(env=_CountingCartPole(), total_env_steps=64, **kwargs)
    with pytest.raises(ConfigError, match=message):
        trainer(tmp_path).fit(module, dm)
    assert _CountingCartPole.built == 0  # failed before any env was built


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"num_particles": 0}, "num_particles"), ({"resample_mode": "never"}, "resample_mode"), ({"tau": 0.0}, "tau")],
)
def test_bad_model_arguments_name_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=rf"model\.{field}="):
        tiny_spo(**kwargs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_spo_fits_on_cuda_with_everything_on_the_gpu(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_spo(env=TicTacToe(), total_env_steps=96, root_noise_fraction=0.25, resample_mode="ess")
    evaluation = Evaluation(every_n_updates=1, num_episodes=4)
    trainer(tmp_path, callbacks=[evaluation], accelerator="gpu", devices=1).fit(module, dm)
    assert module.updates == 3
    assert dm.replay.device.type == "cuda"
    sample = dm.replay.sample(8, torch.Generator(device="cuda").manual_seed(0))
    assert sample[keys.SAMPLED_WEIGHTS].is_cuda
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in module.last_metrics.values())


def test_resume_without_saved_replay_refills_the_ring(tmp_path):
    pl.seed_everything(7)
    module, dm = tiny_spo(total_env_steps=64)
    checkpoint = RLCheckpoint(every_n_updates=1, dirpath=str(tmp_path / "ckpt"), save_last=True)
    trainer(tmp_path, callbacks=[checkpoint], enable_checkpointing=True).fit(module, dm)
    assert len(dm.replay) == 64
    resumed, resumed_dm = tiny_spo(total_env_steps=128)
    last = str(tmp_path / "ckpt" / "last.ckpt")
    with pytest.warns(UserWarning, match="callbacks used to create the checkpoint"):  # resumed without RLCheckpoint
        trainer(tmp_path, enable_checkpointing=True).fit(resumed, resumed_dm, ckpt_path=last)
    assert resumed.updates == 4
    assert resumed_dm.env_steps == 128
    assert len(resumed_dm.replay) == 64  # restarted empty, refilled by the two new rollouts only
    assert resumed_dm.replay.total_added == 32  # rows ever written: 16 before the checkpoint, 16 after
