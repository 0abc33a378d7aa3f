"""PPO loss against a hand computation, and gradient isolation between actor and critic terms."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.objectives import ppo_loss
from tests.helpers import tiny_ppo


def test_ppo_loss_matches_hand_computation():
    new_lp = torch.tensor([math.log(0.5), math.log(0.9)])
    old_lp = torch.tensor([math.log(0.25), math.log(1.0)])  # ratios 2.0 and 0.9
    adv = torch.tensor([1.0, -2.0])
    new_v, old_v, target = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 2.5]), torch.tensor([2.0, 0.0])
    entropy = torch.tensor([0.3, 0.5])
    out = ppo_loss(new_lp, old_lp, adv, new_v, old_v, target, entropy, 0.2, False, 0.5, 0.01)
    # sample 0: ratio 2 → clipped 1.2: max(-2, -1.2) = -1.2 ; sample 1: ratio .9: max(1.8, 1.8) = 1.8
    assert out["loss_policy"].item() == pytest.approx((-1.2 + 1.8) / 2)
    assert out["loss_value"].item() == pytest.approx(0.5 * ((1 - 2) ** 2 + (2 - 0) ** 2) / 2)
    assert out["loss_entropy"].item() == pytest.approx(-0.4)
    expected = 0.3 + 0.5 * 1.25 + 0.01 * -0.4
    assert out["loss"].item() == pytest.approx(expected)
    assert out["clip_fraction"].item() == pytest.approx(0.5)
    ratio = torch.tensor([2.0, 0.9])
    assert out["approx_kl"].item() == pytest.approx(((ratio - 1) - ratio.log()).mean().item(), rel=1e-5)


def test_value_clipping_takes_the_larger_error():
    zero = torch.zeros(1)
    out = ppo_loss(
        zero, zero, zero, torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([1.0]), zero, 0.2, True, 1.0, 0.0
    )
    # unclipped (2-1)^2 = 1, clipped (0.2-1)^2 = 0.64 → max 1 → 0.5
    assert out["loss_value"].item() == pytest.approx(0.5)
    out = ppo_loss(
        zero, zero, zero, torch.tensor([1.1]), torch.tensor([0.0]), torch.tensor([2.0]), zero, 0.2, True, 1.0, 0.0
    )
    assert out["loss_value"].item() == pytest.approx(0.5 * (0.2 - 2.0) ** 2)


def _batch(module, n=32):
    g = torch.Generator().manual_seed(0)
    obs = torch.randn(n, 4, generator=g)
    td = TensorDict({keys.OBS: obs}, [n])
    acted = module.act(td, g)
    return TensorDict(
        {
            **td.to_dict(),
            **acted.to_dict(),
            keys.VALUE: torch.randn(n, generator=g),  # the rollout's values (PPO computes them in process_rollout)
            keys.ADVANTAGE: torch.randn(n, generator=g),
            keys.RETURN: torch.randn(n, generator=g),
        },
        [n],
    )


@pytest.mark.parametrize(
    ("term", "touches_actor", "touches_critic"),
    [("loss_policy", True, False), ("loss_entropy", True, False), ("loss_value", False, True)],
)
def test_gradient_isolation_between_actor_and_critic(term, touches_actor, touches_critic):
    module, _ = tiny_ppo()
    batch = _batch(module)
    logprob, entropy, value = module.evaluate_actions(batch)
    out = ppo_loss(
        logprob,
        batch[keys.LOGPROB] - 0.1,
        batch[keys.ADVANTAGE],
        value,
        batch[keys.VALUE],
        batch[keys.RETURN],
        entropy,
        0.2,
        False,
        0.5,
        0.01,
    )
    module.zero_grad()
    out[term].backward()
    actor_grad = any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.actor.parameters())
    critic_grad = any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.critic.parameters())
    assert actor_grad == touches_actor
    assert critic_grad == touches_critic
