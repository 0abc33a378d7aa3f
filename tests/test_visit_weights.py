"""PPO's ``visit_weight_power``: per-row weights ``c^-p`` from counts of equal observations (against a hand count),
the weighted policy and magnet terms (against a hand-written loss, gradients included), off by default, and its
settings refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning import keys
from rl_lightning.algos import PPO
from rl_lightning.algos.ppo_update import visit_weights
from rl_lightning.errors import ConfigError
from tests.game_match_toys import HighCard
from tests.helpers import tiny_ppo, trainer


@pytest.mark.parametrize("power", [0.5, 1.0])
def test_weights_are_inverse_powers_of_hand_counted_duplicates(power: float) -> None:
    gen = torch.Generator().manual_seed(0)
    distinct = torch.randn(5, 3, generator=gen)
    obs = distinct[torch.tensor([0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4, 0, 1])]
    counts = {}
    for row in obs.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    raw = torch.tensor([counts[tuple(row)] ** -power for row in obs.tolist()])
    torch.testing.assert_close(visit_weights(obs, power), raw / raw.mean())
    # one visit of a state weighs as much as all c visits of another (power 1): each state's total is the same
    if power == 1.0:
        weights = visit_weights(obs, power)
        totals = {tuple(row): 0.0 for row in obs.tolist()}
        for row, weight in zip(obs.tolist(), weights.tolist()):
            totals[tuple(row)] += weight
        assert max(totals.values()) == pytest.approx(min(totals.values()))


def _naive_loss(module: PPO, mb: dict[str, torch.Tensor], weight: torch.Tensor, coef: float) -> torch.Tensor:
    """PPO's clipped surrogate plus coef · KL(π ‖ uniform over the legal actions), each row weighted, plus the
    unweighted value loss: written out row by row."""
    total = torch.zeros(())
    rows = len(weight)
    for i in range(rows):
        features = module.encoder(mb[keys.OBS][i : i + 1])
        logits = module.actor(features)[0]
        legal = [a for a in range(logits.shape[0]) if mb[keys.ACTION_MASK][i, a]]
        log_z = torch.logsumexp(logits[legal], 0)
        ratio = torch.exp(logits[mb[keys.ACTION][i]] - log_z - mb[keys.LOGPROB][i])
        advantage = mb[keys.ADVANTAGE][i]
        surrogate = torch.max(-advantage * ratio, -advantage * ratio.clamp(0.8, 1.2))
        kl = sum(torch.exp(logits[a] - log_z) * (logits[a] - log_z + torch.log(torch.tensor(len(legal) * 1.0)))
                 for a in legal)  # fmt: skip
        value = module.critic(features)[0, 0]
        value_loss = 0.5 * (value - mb[keys.RETURN][i]) ** 2
        total = total + (weight[i] * (surrogate + coef * kl) + 0.5 * value_loss) / rows
    return total


def test_the_weighted_policy_and_magnet_terms_match_a_hand_written_loss() -> None:
    env = HighCard(seats=2)
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), norm_adv=False, magnet={"kind": "uniform", "coef": 0.7},
                 visit_weight_power=1.0)  # fmt: skip
    gen = torch.Generator().manual_seed(2)
    n = 10
    distinct = torch.randn(3, *env.spec.obs_shape, generator=gen)
    obs = distinct[torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 2])]
    mask = torch.rand(n, env.spec.num_actions, generator=gen) < 0.7
    mask[:, 0] = True
    action = torch.zeros(n, dtype=torch.long)
    weight = visit_weights(obs, 1.0)
    mb = {keys.OBS: obs, keys.ACTION_MASK: mask, keys.ACTION: action, keys.VALUE: torch.zeros(n),
          keys.LOGPROB: torch.full((n,), -0.9), keys.ADVANTAGE: torch.randn(n, generator=gen),
          keys.RETURN: torch.randn(n, generator=gen), keys.VISIT_WEIGHT: weight}  # fmt: skip
    module.magnet.before_update(module)
    params = [p for p in module.parameters() if p.requires_grad]
    ours = module.minibatch_loss(mb)[0]
    naive = _naive_loss(module, mb, weight, 0.7)
    torch.testing.assert_close(ours, naive)
    for a, b in zip(torch.autograd.grad(ours, params), torch.autograd.grad(naive, params)):
        torch.testing.assert_close(a, b)
    # and the weights matter: unweighted, the loss is another one
    unweighted = module.minibatch_loss({k: v for k, v in mb.items() if k != keys.VISIT_WEIGHT})[0]
    assert not torch.allclose(unweighted, ours)


@pytest.mark.parametrize("power", [0.0, 1.0])
def test_minibatches_carry_weights_only_when_the_power_is_set(tmp_path: Path, power: float) -> None:
    from rl_lightning.data import OnPolicyDataModule

    env = HighCard(seats=2)
    datamodule = OnPolicyDataModule(env, num_envs=4, num_steps=8, total_env_steps=64, seats={0: "self", 1: "self"})
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=2, magnet="uniform",
                 visit_weight_power=power)  # fmt: skip
    seen: list[torch.Tensor | None] = []
    loss = module.minibatch_loss

    def spy(mb: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(mb.get(keys.VISIT_WEIGHT))
        return loss(mb)

    module.minibatch_loss = spy  # type: ignore[method-assign]

    class Finite(Callback):
        def on_train_batch_end(self, trainer: object, *args: object) -> None:
            assert torch.isfinite(trainer.callback_metrics["train/loss"])  # type: ignore[attr-defined]

    trainer(tmp_path, [Finite()]).fit(module, datamodule)
    assert seen
    if power == 0.0:
        assert all(weight is None for weight in seen)
    else:  # HighCard has few distinct observations: repeated ones weigh less than 1, the rare ones more
        assert all(weight is not None and weight.min() < 1 < weight.max() for weight in seen)


def test_bad_settings_are_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="model.visit_weight_power") as err:
        tiny_ppo(visit_weight_power=-1.0)
    assert "\n" not in str(err.value)
    from rl_lightning.envs import ClassSpec, GymnasiumEnv

    env = GymnasiumEnv(env_class=ClassSpec("tests.space_envs.TwoKeyDict"))
    with pytest.raises(ConfigError, match="model.visit_weight_power counts rows .* Dict") as err:
        PPO(env_spec=env.spec, visit_weight_power=1.0)
    assert "\n" not in str(err.value)
