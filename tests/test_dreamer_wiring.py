"""DreamerV3 wiring against naive loops: what the module feeds its (separately tested) objectives.

Each test builds a replay batch with both a truncation and a termination, so a flag routed to the wrong place
(truncation taken for termination, an episode boundary ignored, the discount dropped) changes a number.
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_dreamer
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.dreamer import behavior, update_graphs
from rl_lightning.data.sequence_collector import SequenceCollector
from rl_lightning.envs import BatchedEnv, CartPole
from rl_lightning.envs.random_action import random_action
from rl_lightning.objectives import dreamer as L

T, B = 8, 3
TRUNCATED_AT, TERMINATED_AT = (3, 0), (5, 1)  # (row, column) of the episode ends the batch is given


def _batch(seed: int = 0) -> TensorDict:
    """A real ``[T, B]`` random-policy CartPole stream with a truncation and a termination placed by hand.

    The flags are data to the losses, so placing them keeps the test exact: row 3 of env 0 is cut by a time
    limit, row 5 of env 1 terminates, and the rows after them start new episodes.
    """
    env = BatchedEnv(CartPole(max_episode_steps=1000), B, seed=seed)
    collector = SequenceCollector(env, seed)

    def act(view, gen):
        return TensorDict({keys.ACTION: random_action(env.spec, view, gen)}, batch_size=view.batch_size)

    seq = collector.rollout(act, T, 0)
    seq[keys.TERMINATED] = torch.zeros(T, B, dtype=torch.bool)
    seq[keys.TRUNCATED] = torch.zeros(T, B, dtype=torch.bool)
    seq[keys.IS_FIRST] = torch.zeros(T, B, dtype=torch.bool)
    seq[keys.IS_FIRST][0] = True
    seq[keys.TRUNCATED][TRUNCATED_AT] = True
    seq[keys.TERMINATED][TERMINATED_AT] = True
    for row, col in (TRUNCATED_AT, TERMINATED_AT):
        seq[keys.IS_FIRST][row + 1, col] = True
    seq[keys.REWARD] = torch.randn(T, B, generator=torch.Generator().manual_seed(seed))
    return seq


def naive_lambda_return(reward, boot, live, last, lam):
    """Dreamer.md §5 recursion, one element at a time: ``R_t = r_{t+1} + live_{t+1}·((1 − c)·boot_{t+1} + c·R_{t+1})``
    with ``c = 0`` where row ``t+1`` ends an episode (``is_last``), else λ; ``R_{T−1} = boot_{T−1}``."""
    length, batch = boot.shape
    out = torch.zeros(length - 1, batch)
    for b in range(batch):
        running = float(boot[-1, b])
        for t in range(length - 2, -1, -1):
            c = 0.0 if bool(last[t + 1, b]) else lam
            running = float(reward[t + 1, b]) + float(live[t + 1, b]) * ((1 - c) * float(boot[t + 1, b]) + c * running)
            out[t, b] = running
    return out


def naive_imagination_weights(cont: torch.Tensor, disc: float) -> torch.Tensor:
    """``w_0 = c_0``, ``w_t = w_{t−1}·disc·c_t`` (``cumprod(disc·c)/disc``, dreamer.md §5)."""
    weights = torch.zeros_like(cont)
    running = 1.0 / disc
    for t in range(cont.shape[0]):
        running = running * disc * cont[t]
        weights[t] = running
    return weights


# ----- continue target (mutation: built from `truncated`) ------------------------------------------------------------


@pytest.mark.parametrize("discount_continue", [True, False])
def test_world_model_continue_loss_targets_termination_only(discount_continue):
    """The continue head learns ``(1 − terminated)·γ`` (or ``1 − terminated``): a truncated row keeps its target."""
    model, _ = tiny_dreamer(discount_horizon=4.0, discount_continue=discount_continue)
    seq = _batch()
    actions = model.space.to_model(seq[keys.ACTION])
    generator = torch.Generator().manual_seed(0)
    terms, posts, _ = model.world_model.loss(seq, actions, generator, 1.0, 4.0, discount_continue)
    target = torch.where(seq[keys.TERMINATED], 0.0, 0.75 if discount_continue else 1.0)
    assert float(target[TRUNCATED_AT]) > 0  # the batch exercises both ends
    assert float(target[TERMINATED_AT]) == 0
    logits = model.world_model.cont_head(model.world_model.rssm.feature(posts)).squeeze(-1)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits, target, reduction="none")
    torch.testing.assert_close(terms["con"], expected)


def test_module_replay_value_loss_gets_the_termination_continue(monkeypatch):
    """``DreamerV3.losses`` hands the replay value loss ``live = γ·(1 − terminated)``, never a truncation."""
    model, _ = tiny_dreamer(discount_horizon=4.0)
    seen = {}
    original = update_graphs.replay_value_terms

    def spy(ac, features, reward, last, imagined, lam, cont_target, slowreg):
        seen["cont"] = cont_target
        return original(ac, features, reward, last, imagined, lam, cont_target, slowreg)

    monkeypatch.setattr(update_graphs, "replay_value_terms", spy)
    seq = _batch()
    model.losses(seq)
    torch.testing.assert_close(seen["cont"], torch.where(seq[keys.TERMINATED], 0.0, 0.75))


# ----- replay λ-return (mutation: truncation boundary ignored) -------------------------------------------------------


def test_replay_value_loss_matches_a_naive_loop_with_truncation_and_termination():
    """λ-returns along the real sequence stop at the truncation (bootstrapping from it) and at the termination
    (no bootstrap); rows that end an episode get weight 0."""
    model, _ = tiny_dreamer(discount_horizon=4.0)
    seq = _batch()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the critic's output layer starts at zero: uniform logits score every target alike
        for param in model.behaviour.critic.parameters():
            param.copy_(torch.randn(param.shape, generator=g))
    feat_dim = model.world_model.rssm.feature_dim
    features = torch.randn(T, B, feat_dim, generator=g)
    imagined = torch.randn(3, T * B, generator=g) * 5
    live = L.continue_target(seq[keys.TERMINATED].float(), 4.0, True)
    lam = 0.9
    loss = behavior.replay_value_loss(model.behaviour, features, seq, imagined, lam, live, 1.0)

    last = seq[keys.TERMINATED] | seq[keys.TRUNCATED]
    boot = imagined[0].reshape(T, B)
    returns = naive_lambda_return(seq[keys.REWARD], boot, live, last, lam)
    ac = model.behaviour
    expected = L.value_loss(
        ac.critic(features[:-1]), returns, ac.slow_critic(features[:-1]), (~last[:-1]).float(), ac.value_codec, 1.0
    )
    torch.testing.assert_close(loss, expected)
    assert float(loss[TRUNCATED_AT].detach()) == 0.0  # episode ends carry no loss
    assert float(loss[TERMINATED_AT].detach()) == 0.0


# ----- imagination weights (bug 7: the discount was dropped without discount_continue) -------------------------------


@pytest.mark.parametrize(("disc", "expected"), [(1.0, [0.5, 0.25, 0.125]), (0.5, [0.5, 0.125, 0.03125])])
def test_imagination_weights_goldens_and_naive_loop(disc, expected):
    cont = torch.full((3, 2), 0.5)
    torch.testing.assert_close(L.imagination_weights(cont, disc)[:, 0], torch.tensor(expected))
    cont = torch.rand(6, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(L.imagination_weights(cont, disc), naive_imagination_weights(cont, disc))


@pytest.mark.parametrize("discount_continue", [True, False])
def test_behaviour_losses_weight_imagined_steps_by_the_discounted_continue(monkeypatch, discount_continue):
    """Both revisions: the actor and critic weights are ``cumprod(disc·cont)/disc`` of the predicted continues,
    disc = 1 when the continue target carries γ (2024), disc = γ otherwise (2023)."""
    gamma = 0.75
    model, _ = tiny_dreamer(discount_horizon=4.0, discount_continue=discount_continue)
    conts: list[torch.Tensor] = []
    weights: dict[str, list[torch.Tensor]] = {"policy": [], "value": []}
    cont_fn = model.world_model.cont

    def record_cont(feat):
        conts.append(cont_fn(feat))
        return conts[-1]

    def spy(name, fn):
        def wrapped(*args, **kwargs):
            weights[name].append(args[3])  # both losses take the weight as their fourth argument
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(model.world_model, "cont", record_cont)
    monkeypatch.setattr(L, "reinforce_loss", spy("policy", L.reinforce_loss))
    monkeypatch.setattr(L, "value_loss", spy("value", L.value_loss))
    model.losses(_batch())
    (cont,) = conts  # imagination asks the continue head once, for all H + 1 imagined states
    expected = naive_imagination_weights(cont[:-1], 1.0 if discount_continue else gamma)
    assert len(weights["policy"]) == 1
    assert len(weights["value"]) == 2  # imagination, then the replay value loss
    torch.testing.assert_close(weights["policy"][0], expected)
    torch.testing.assert_close(weights["value"][0], expected)
