"""PPO's ``all_actions``: the all-actions surrogate (against a hand-written loop and as the expectation of PPO's
sampled surrogate), the Q head's columns and loss (against a hand computation, gradients included), a self-play fit,
and its refusal for non-Discrete actions."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from rl_lightning import keys
from rl_lightning.algos import PPO
from rl_lightning.errors import ConfigError
from rl_lightning.objectives.ppo import all_actions_policy_loss, ppo_loss
from tests.game_match_toys import HighCard
from tests.helpers import tiny_ppo, trainer


def _case(seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(5, 4, generator=gen) < 0.7
    mask[:, 1] = True
    mask[2] = torch.tensor([False, True, False, False])  # a single legal action
    behaviour = torch.softmax(torch.randn(5, 4, generator=gen, dtype=torch.float64).masked_fill(~mask, -1e300), -1)
    advantage = torch.randn(5, 4, generator=gen, dtype=torch.float64).masked_fill(~mask, 0.0)
    weight = torch.rand(5, generator=gen, dtype=torch.float64) + 0.5
    return logits, behaviour, advantage, mask, weight


def _naive(logits: torch.Tensor, behaviour: torch.Tensor, advantage: torch.Tensor, mask: torch.Tensor,
           clip: float, weight: torch.Tensor) -> torch.Tensor:  # fmt: skip
    total = logits.new_zeros(())
    for i in range(len(logits)):
        legal = [a for a in range(logits.shape[1]) if mask[i, a]]
        z = sum(torch.exp(logits[i, a]) for a in legal)
        row = logits.new_zeros(())
        for a in legal:
            ratio = torch.exp(logits[i, a]) / z / behaviour[i, a]
            clipped = min(max(ratio, 1 - clip), 1 + clip)
            row = row + behaviour[i, a] * max(-advantage[i, a] * ratio, -advantage[i, a] * clipped)
        total = total + weight[i] * row
    return total / len(logits)


@pytest.mark.parametrize("clip", [0.2, 0.05])
def test_the_surrogate_and_its_gradient_match_a_hand_written_loop(clip: float) -> None:
    logits, behaviour, advantage, mask, weight = _case()
    ours = all_actions_policy_loss(logits, behaviour, advantage, mask, clip, weight)
    naive = _naive(logits, behaviour, advantage, mask, clip, weight)
    torch.testing.assert_close(ours, naive)
    (grad,) = torch.autograd.grad(ours, logits)
    (naive_grad,) = torch.autograd.grad(naive, logits)
    torch.testing.assert_close(grad, naive_grad)
    assert torch.all(grad[~mask] == 0)
    assert torch.all(grad[2] == 0)


def test_it_is_the_expectation_of_ppos_sampled_surrogate_over_the_behaviour_policy() -> None:
    """Enumerating every action a with probability π_b(a) and feeding PPO's one-action loss gives the same value."""
    logits, behaviour, advantage, mask, _ = _case(1)
    logits = logits.detach() + 0.3  # a shift changes nothing; the ratios are away from 1 through the behaviour
    expected = torch.zeros((), dtype=torch.float64)
    for a in range(logits.shape[1]):
        legal = mask[:, a]
        log_pi = torch.log_softmax(logits.masked_fill(~mask, -1e300), -1)[:, a]
        rows = ppo_loss(log_pi, behaviour[:, a].clamp_min(1e-300).log(), advantage[:, a], torch.zeros(5),
                        torch.zeros(5), torch.zeros(5), torch.zeros(5), 0.2, False, 0.0, 0.0)  # fmt: skip
        # ppo_loss averages its rows; re-weight each row by π_b(a) (0 where a is illegal)
        per_row = torch.max(
            -advantage[:, a] * (log_pi - behaviour[:, a].clamp_min(1e-300).log()).exp(),
            -advantage[:, a] * (log_pi - behaviour[:, a].clamp_min(1e-300).log()).exp().clamp(0.8, 1.2),
        )
        assert rows["loss_policy"] == pytest.approx(float(per_row.mean()))
        expected = expected + torch.where(legal, behaviour[:, a] * per_row, 0.0).mean()  # fmt: skip
    torch.testing.assert_close(all_actions_policy_loss(logits, behaviour, advantage, mask, 0.2), expected)


def _module(**kwargs: object) -> tuple[PPO, HighCard]:
    env = HighCard(seats=2)
    return PPO(env_spec=env.spec, hidden_sizes=(8,), all_actions=True, **kwargs), env


def test_the_columns_are_the_starting_policy_and_q_minus_its_expectation() -> None:
    module, env = _module()
    gen = torch.Generator().manual_seed(3)
    obs = torch.randn(6, *env.spec.obs_shape, generator=gen)
    mask = torch.rand(6, env.spec.num_actions, generator=gen) < 0.7
    mask[:, 0] = True
    columns = module.all_actions_columns({keys.OBS: obs, keys.ACTION_MASK: mask})
    features = module.encoder(obs)
    for i in range(6):
        legal = [a for a in range(env.spec.num_actions) if mask[i, a]]
        pi = torch.softmax(module.actor(features[i])[legal], -1)
        q = module.q_critic(features[i])[legal]
        torch.testing.assert_close(columns[keys.BEHAVIOUR_PROBS][i, legal], pi.detach())
        torch.testing.assert_close(columns[keys.ACTION_ADVANTAGE][i, legal], (q - (pi * q).sum()).detach())
    assert torch.all(columns[keys.BEHAVIOUR_PROBS][~mask] == 0)
    assert torch.all(columns[keys.ACTION_ADVANTAGE][~mask] == 0)


@pytest.mark.parametrize("norm_adv", [False, True])
def test_the_minibatch_loss_matches_a_hand_computation(norm_adv: bool) -> None:
    """Policy term from the frozen action advantages (scaled by the sampled advantages' std with ``norm_adv``), value
    and Q losses on the λ-return, the magnet on top: value and every parameter's gradient."""
    module, env = _module(norm_adv=norm_adv, vf_coef=0.7, ent_coef=0.01, magnet={"kind": "uniform", "coef": 0.3})
    module.magnet.before_update(module)
    gen = torch.Generator().manual_seed(4)
    n, width = 8, env.spec.num_actions
    obs = torch.randn(n, *env.spec.obs_shape, generator=gen)
    mask = torch.ones(n, width, dtype=torch.bool)
    action = torch.randint(0, width, (n,), generator=gen)
    mb = {keys.OBS: obs, keys.ACTION_MASK: mask, keys.ACTION: action, keys.LOGPROB: torch.full((n,), -1.0),
          keys.VALUE: torch.zeros(n), keys.ADVANTAGE: torch.randn(n, generator=gen) * 3,
          keys.RETURN: torch.randn(n, generator=gen)}  # fmt: skip
    with torch.no_grad():  # move the weights so the update's starting policy differs from the current one
        for param in module.actor.parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=gen))
    mb.update(module.all_actions_columns(mb))
    with torch.no_grad():
        for param in module.actor.parameters():
            param.add_(0.2 * torch.randn(param.shape, generator=gen))
    params = [p for p in module.parameters() if p.requires_grad]
    ours = module.minibatch_loss(mb)[0]

    features = module.encoder(obs)
    logits = module.actor(features)
    scale = mb[keys.ADVANTAGE].std() + 1e-8 if norm_adv else 1.0
    policy = all_actions_policy_loss(logits, mb[keys.BEHAVIOUR_PROBS], mb[keys.ACTION_ADVANTAGE] / scale, mask, 0.2)
    value = module.critic(features).squeeze(-1)
    q_taken = module.q_critic(features)[torch.arange(n), action]
    log_p = torch.log_softmax(logits, -1)
    entropy = -(log_p.exp() * log_p).sum(-1).mean()
    kl = (log_p.exp() * (log_p + torch.log(torch.tensor(float(width))))).sum(-1).mean()
    value_loss = 0.5 * ((value - mb[keys.RETURN]) ** 2).mean() + 0.5 * ((q_taken - mb[keys.RETURN]) ** 2).mean()
    by_hand = policy + 0.7 * value_loss - 0.01 * entropy + 0.3 * kl
    torch.testing.assert_close(ours, by_hand)
    ours_grad = torch.autograd.grad(ours, params, allow_unused=True)
    for a, b in zip(ours_grad, torch.autograd.grad(by_hand, params, allow_unused=True)):
        torch.testing.assert_close(a, b)


def test_a_self_play_fit_trains_the_q_head(tmp_path: Path) -> None:
    from rl_lightning.data import OnPolicyDataModule

    env = HighCard(seats=2)
    datamodule = OnPolicyDataModule(env, num_envs=4, num_steps=8, total_env_steps=96, seats={0: "self", 1: "self"})
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=2, num_minibatches=2, all_actions=True,
                 magnet="uniform")  # fmt: skip
    start = [p.detach().clone() for p in module.q_critic.parameters()]
    losses: list[float] = []

    class Record(Callback):
        def on_train_batch_end(self, trainer: object, *args: object) -> None:
            losses.append(float(trainer.callback_metrics["train/loss_policy"]))  # type: ignore[attr-defined]

    trainer(tmp_path, [Record()]).fit(module, datamodule)
    assert len(losses) == 3
    assert all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(a, b) for a, b in zip(start, module.q_critic.parameters()))


def test_off_by_default_and_refused_for_other_action_kinds() -> None:
    module, _ = tiny_ppo()
    assert module.q_critic is None
    from rl_lightning.envs import Pendulum

    with pytest.raises(ConfigError, match="model.all_actions=true .* this env's actions are box") as err:
        tiny_ppo(env=Pendulum(), all_actions=True)
    assert "\n" not in str(err.value)
