"""RSSM contract tests: unimix floor (I9), resets (I10), straight-through latents (I11), determinism, block GRU."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.errors import ConfigError
from rl_lightning.networks.dreamer_nets import DREAMER_SIZES
from rl_lightning.networks.rssm import RSSM, BlockGRUCell, BlockLinear

T, B, EMBED, ACTIONS = 6, 3, 16, 3


def _rssm(**kwargs: object) -> RSSM:
    torch.manual_seed(0)
    config: dict[str, object] = {"deter": 32, "hidden": 16, "stoch": 4, "classes": 5, "blocks": 4} | kwargs
    return RSSM(ACTIONS, EMBED, **config)  # type: ignore[arg-type]


def _inputs(seed: int, steps: int = T) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(steps, B, EMBED, generator=g)
    actions = torch.nn.functional.one_hot(torch.randint(ACTIONS, (steps, B), generator=g), ACTIONS).float()
    is_first = torch.zeros(steps, B, dtype=torch.bool)
    is_first[0] = True
    return embed, actions, is_first


def _observe(rssm: RSSM, embed: torch.Tensor, actions: torch.Tensor, is_first: torch.Tensor, seed: int = 7):
    return rssm.observe(embed, actions, is_first, generator=torch.Generator().manual_seed(seed))


def test_unimix_floor_on_latent_probs_with_huge_logits() -> None:
    """I9: every prior and posterior probability is >= unimix / classes even when the logits are scaled ×50."""
    rssm = _rssm()
    with torch.no_grad():
        for head in (rssm.prior_head, rssm.post_head):
            head.out.weight.mul_(50.0)
            head.out.bias.normal_(0.0, 50.0)
    embed, actions, is_first = _inputs(0)
    posts, priors = _observe(rssm, embed * 50.0, actions, is_first)
    floor = 0.01 / rssm.classes
    assert posts["logits"].exp().min() >= floor * (1 - 1e-5)
    assert priors.exp().min() >= floor * (1 - 1e-5)
    assert torch.allclose(posts["logits"].exp().sum(-1), torch.ones(()), atol=1e-5)
    assert torch.isfinite(posts["logits"]).all()


@pytest.mark.parametrize("initial", ["zeros", "learned"])
def test_reset_mid_sequence_forgets_the_past_and_the_carried_action(initial: str) -> None:
    """I10: with is_first[k], outputs for t >= k ignore every input before k, and prev_action[k] too."""
    rssm = _rssm(initial=initial)
    if rssm.initial_deter is not None:
        torch.nn.init.normal_(rssm.initial_deter)
    k = 3
    embed_a, actions_a, is_first = _inputs(1)
    embed_b, actions_b, _ = _inputs(2)
    is_first[k] = True
    embed_b[k:] = embed_a[k:]
    actions_b[k + 1 :] = actions_a[k + 1 :]  # actions_b[k] (carried into the reset) differs
    assert not torch.equal(actions_a[k], actions_b[k])
    posts_a, priors_a = _observe(rssm, embed_a, actions_a, is_first)
    posts_b, priors_b = _observe(rssm, embed_b, actions_b, is_first)
    assert not torch.equal(posts_a["deter"][:k], posts_b["deter"][:k])
    for key in ("deter", "stoch", "logits"):
        assert torch.equal(posts_a[key][k:], posts_b[key][k:]), key
    assert torch.equal(priors_a[k:], priors_b[k:])


def test_reset_equals_a_fresh_start() -> None:
    """I10: the state after a mid-sequence reset equals that of a sequence starting at the reset row."""
    rssm = _rssm()
    embed, actions, is_first = _inputs(3)
    is_first[2] = True
    g = torch.Generator().manual_seed(0)
    state = rssm.initial_state(B)
    state, _ = rssm.obs_step(state, actions[0], embed[0], is_first[0], g)
    garbage = state.apply(lambda x: x + 3.0)
    g.manual_seed(0)
    reset, reset_prior = rssm.obs_step(garbage, actions[2], embed[2], is_first[2], g)
    g.manual_seed(0)
    fresh, fresh_prior = rssm.obs_step(rssm.initial_state(B), torch.zeros_like(actions[2]), embed[2], is_first[0], g)
    for key in ("deter", "stoch", "logits"):
        assert torch.equal(reset[key], fresh[key]), key
    assert torch.equal(reset_prior, fresh_prior)


def test_initial_carry_zeros_and_learned() -> None:
    """I10: 2024 zeros carry; v1 learned carry deter = tanh(W), stoch = one-hot mode of prior(deter)."""
    zeros = _rssm().initial_state(B)
    assert zeros.batch_size == torch.Size([B])
    assert torch.equal(zeros["deter"], torch.zeros(B, 32))
    assert torch.equal(zeros["stoch"], torch.zeros(B, 4, 5))
    assert torch.allclose(zeros["logits"].exp(), torch.full((B, 4, 5), 0.2))
    learned = _rssm(initial="learned", norm="layer", img_layers=1)
    torch.nn.init.normal_(learned.initial_deter)
    state = learned.initial_state(B)
    assert torch.allclose(state["deter"], torch.tanh(learned.initial_deter).expand(B, -1))
    expected = learned.prior_head(torch.tanh(learned.initial_deter)).view(4, 5).argmax(-1)
    assert torch.equal(state["stoch"].argmax(-1), expected.expand(B, -1))
    assert torch.allclose(state["stoch"].sum(-1), torch.ones(B, 4), atol=1e-6)


def test_learned_initial_state_gets_gradient() -> None:
    rssm = _rssm(initial="learned")
    embed, actions, is_first = _inputs(4)
    posts, _ = _observe(rssm, embed, actions, is_first)
    rssm.feature(posts).sum().backward()
    assert rssm.initial_deter.grad is not None
    assert rssm.initial_deter.grad.abs().sum() > 0


def test_straight_through_samples_are_one_hot_with_gradients() -> None:
    """I11: forward samples are exact one-hots; gradients reach the posterior logits' parameters."""
    rssm = _rssm()
    embed, actions, is_first = _inputs(5)
    posts, _ = _observe(rssm, embed, actions, is_first)
    stoch = posts["stoch"]
    assert torch.allclose(stoch, stoch.round(), atol=1e-6)
    assert torch.allclose(stoch.sum(-1), torch.ones(()), atol=1e-6)
    weights = torch.randn(stoch.shape, generator=torch.Generator().manual_seed(0))
    (stoch * weights).sum().backward()
    assert rssm.post_head.out.weight.grad is not None
    assert rssm.post_head.out.weight.grad.abs().sum() > 0


def test_mode_is_argmax_of_posterior() -> None:
    rssm = _rssm()
    embed, actions, is_first = _inputs(6)
    posts, _ = rssm.observe(embed, actions, is_first, generator=None, sample=False)
    assert torch.equal(posts["stoch"].argmax(-1), posts["logits"].argmax(-1))


def test_same_seed_same_result_and_global_rng_untouched() -> None:
    rssm = _rssm()
    embed, actions, is_first = _inputs(7)
    before = torch.get_rng_state()
    posts_a, priors_a = _observe(rssm, embed, actions, is_first, seed=11)
    assert torch.equal(torch.get_rng_state(), before)
    posts_b, priors_b = _observe(rssm, embed, actions, is_first, seed=11)
    posts_c, _ = _observe(rssm, embed, actions, is_first, seed=12)
    assert torch.equal(posts_a["stoch"], posts_b["stoch"])
    assert torch.equal(posts_a["deter"], posts_b["deter"])
    assert torch.equal(priors_a, priors_b)
    assert not torch.equal(posts_a["stoch"], posts_c["stoch"])


def test_img_step_and_feature_shapes() -> None:
    rssm = _rssm()
    posts, _ = _observe(rssm, *_inputs(8))
    start = posts[-1]
    action = torch.nn.functional.one_hot(torch.tensor([0, 1, 2]), ACTIONS).float()
    nxt = rssm.img_step(start, action, torch.Generator().manual_seed(0))
    assert nxt["deter"].shape == (B, 32)
    assert nxt["stoch"].shape == nxt["logits"].shape == (B, 4, 5)
    assert rssm.feature(nxt).shape == (B, rssm.feature_dim)
    assert rssm.feature(posts).shape == (T, B, 32 + 20)
    assert rssm.stoch_dim == 20
    assert torch.allclose(nxt["logits"].exp().sum(-1), torch.ones(()), atol=1e-5)


def test_continuous_actions_are_bounded_by_magnitude() -> None:
    rssm = _rssm(continuous_actions=True)
    action = torch.tensor([[0.5, -3.0, 2.0]], requires_grad=True)
    out = rssm.preprocess_action(action)
    assert torch.allclose(out, torch.tensor([[0.5, -1.0, 1.0]]))
    out.sum().backward()
    assert torch.allclose(action.grad, torch.tensor([[1.0, 1 / 3, 0.5]]))
    assert _rssm().preprocess_action(action) is action


def test_block_linear_is_block_diagonal() -> None:
    torch.manual_seed(0)
    layer = BlockLinear(16, 8, blocks=4)
    assert layer.weight.shape == (4, 4, 2)
    x = torch.randn(5, 16)
    y = layer(x)
    x2 = x.clone()
    x2[:, 4:8] += 1.0  # input block 1
    changed = (layer(x2) - y).abs().amax(0) > 0
    assert changed.tolist() == [False, False, True, True, False, False, False, False]
    dense = torch.block_diag(*layer.weight)  # [16, 8]
    assert torch.allclose(y, x @ dense + layer.bias, atol=1e-6)
    full_fan_in_std = 1.0 / 16**0.5
    assert layer.weight.std() < 1.5 * full_fan_in_std


def test_block_gru_gate_path_is_block_diagonal() -> None:
    """With the shared input x fixed, perturbing deter block j changes deter' block j only (8 blocks)."""
    torch.manual_seed(0)
    cell = BlockGRUCell(deter=32, stoch_dim=8, action_dim=2, hidden=8, blocks=8, norm="rms")
    deter, x = torch.randn(4, 32), torch.randn(4, 24)
    base = cell.recur(deter, x)
    bumped = deter.clone()
    bumped[:, 12:16] += 1.0  # block 3
    changed = ((cell.recur(bumped, x) - base).abs().amax(0) > 0).view(8, 4).any(-1)
    assert changed.tolist() == [j == 3 for j in range(8)]


def test_bad_arguments_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="initial"):
        _rssm(initial="random")
    with pytest.raises(ConfigError, match="blocks"):
        _rssm(blocks=5)
    with pytest.raises(ConfigError, match="norm"):
        _rssm(norm="batch")


@pytest.mark.parametrize("name", list(DREAMER_SIZES))
def test_every_preset_builds_and_observes(name: str) -> None:
    size = DREAMER_SIZES[name]
    rssm = RSSM(2, 64, size.deter, size.hidden, size.stoch, size.classes, blocks=size.blocks)
    embed = torch.randn(3, 2, 64)
    actions = torch.zeros(3, 2, 2)
    is_first = torch.tensor([[True, True], [False, False], [False, True]])
    posts, priors = rssm.observe(embed, actions, is_first, generator=torch.Generator().manual_seed(0))
    assert posts.batch_size == torch.Size([3, 2])
    assert posts["deter"].shape == (3, 2, size.deter)
    assert posts["stoch"].shape == priors.shape == (3, 2, size.stoch, size.classes)
    assert rssm.feature(posts).shape == (3, 2, size.deter + size.stoch * size.classes)
    if name == "12M":
        assert 5_000_000 < sum(p.numel() for p in rssm.parameters()) < 7_000_000


def test_reset_only_touches_flagged_envs() -> None:
    rssm = _rssm()
    embed, actions, is_first = _inputs(9)
    mixed = is_first.clone()
    mixed[3, 0] = True
    posts_plain, _ = _observe(rssm, embed, actions, is_first)
    posts_mixed, _ = _observe(rssm, embed, actions, mixed)
    assert torch.equal(posts_plain["deter"][:, 1:], posts_mixed["deter"][:, 1:])
    assert not torch.equal(posts_plain["deter"][3:, 0], posts_mixed["deter"][3:, 0])
