"""DreamerV3 codecs, estimators and losses against goldens, closed forms and naive loops (dreamer.md §14)."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.errors import ConfigError
from rl_lightning.networks.distributions import symexp, symlog, unimix_logits
from rl_lightning.objectives.dreamer import (
    ReturnNormalizer,
    TwoHot,
    continue_target,
    imagination_weights,
    kl_losses,
    lambda_return,
    reinforce_loss,
    twohot_bins,
    value_loss,
)

# ----- I1 symlog / symexp --------------------------------------------------------------------------------------------


def test_symlog_symexp_round_trip_symmetry_and_gradient_at_zero():
    x = torch.cat([torch.logspace(-6, 6, 200, dtype=torch.float64), torch.zeros(1)])
    x = torch.cat([x, -x])
    torch.testing.assert_close(symexp(symlog(x)), x, rtol=1e-12, atol=1e-12)
    assert symlog(torch.zeros(())) == 0.0
    assert torch.equal(symlog(-x), -symlog(x))
    zero = torch.zeros((), requires_grad=True)
    symlog(zero).backward()
    assert torch.isfinite(zero.grad)


# ----- I2–I5 two-hot -------------------------------------------------------------------------------------------------


def test_raw_bins_golden_and_exact_symmetry():
    expected = torch.tensor([-4.85165e8, -22025.465, 0.0, 22025.465, 4.85165e8])
    torch.testing.assert_close(twohot_bins(5), expected, rtol=1e-5, atol=0.0)
    bins = twohot_bins(255)
    assert torch.equal(bins, -bins.flip(0))
    assert bins[127] == 0.0
    assert bool((bins[1:] > bins[:-1]).all())
    symlog_bins = twohot_bins(255, space="symlog")
    assert torch.equal(symlog_bins, -symlog_bins.flip(0))
    torch.testing.assert_close(symlog_bins[[0, -1]], torch.tensor([-20.0, 20.0]))


def test_bad_twohot_space_lists_the_choices():
    with pytest.raises(ConfigError, match="raw, symlog"):
        twohot_bins(5, space="log")


@pytest.mark.parametrize("space", ["raw", "symlog"])
def test_twohot_round_trip_inside_range_and_edge_beyond(space):
    codec = TwoHot(255, space=space).double()
    g = torch.Generator().manual_seed(0)
    x = symexp(torch.empty(4, 50, dtype=torch.float64).uniform_(-19.0, 19.0, generator=g))
    x[0, :3] = torch.tensor([0.0, 1.0, -1.0], dtype=torch.float64)
    target = codec.encode(x)
    assert target.shape == (4, 50, 255)
    torch.testing.assert_close(target.sum(-1), torch.ones(4, 50, dtype=torch.float64))
    assert int((target > 0).sum(-1).max()) <= 2
    # decode of the two-hot as logits: log(target) puts exactly that distribution through softmax
    decoded = codec.decode(target.log())
    torch.testing.assert_close(decoded, x, rtol=1e-9, atol=1e-9)
    beyond = codec.encode(torch.tensor([1e30, -1e30], dtype=torch.float64))
    assert beyond[0, -1] == 1.0
    assert beyond[1, 0] == 1.0
    assert beyond.sum() == 2.0


def test_twohot_cross_entropy_golden():
    codec = TwoHot(5)
    midpoint = (codec.bins[1] + codec.bins[2]) / 2
    torch.testing.assert_close(codec.encode(midpoint), torch.tensor([0.0, 0.5, 0.5, 0.0, 0.0]))
    loss = codec.loss(torch.tensor([0.0, 1.0, -1.0, 2.0, -2.0]), midpoint)
    torch.testing.assert_close(loss, torch.tensor(2.4519143))


def test_twohot_loss_keeps_leading_dims_and_trains_only_logits():
    codec = TwoHot(255)
    logits = torch.randn(6, 3, 255, requires_grad=True)
    target = torch.randn(6, 3, requires_grad=True)
    loss = codec.loss(logits, target)
    assert loss.shape == (6, 3)
    loss.sum().backward()
    assert logits.grad is not None
    assert target.grad is None


def _left_to_right_sum(values: torch.Tensor) -> torch.Tensor:
    total = torch.zeros((), dtype=values.dtype)
    for value in values:
        total = total + value
    return total


def test_zero_logits_decode_to_exactly_zero_but_naive_sums_do_not():
    codec = TwoHot(255)
    assert codec.bins.dtype == torch.float32
    assert torch.equal(codec.decode(torch.zeros(7, 255)), torch.zeros(7))
    products = torch.zeros(255).softmax(-1) * codec.bins
    # Left to right over the exactly symmetric bins gives 0.625 with torch 2.13; torch.sum over
    # symexp(float32 linspace) bins gives the -0.316 quoted in dreamer.md §4. Either way not 0.
    assert abs(float(_left_to_right_sum(products))) > 0.1
    naive_bins = symexp(torch.linspace(-20.0, 20.0, 255))
    assert abs(float((torch.zeros(255).softmax(-1) * naive_bins).sum())) > 0.1


# ----- I6 λ-return ---------------------------------------------------------------------------------------------------


def naive_lambda_return(reward, boot, term, last, disc, lam):
    T, B = boot.shape
    out = torch.zeros(T - 1, B, dtype=torch.float64)
    for b in range(B):
        ret = float(boot[T - 1, b])
        for t in reversed(range(T - 1)):
            alive = (1.0 - float(term[t + 1, b])) * disc
            chain = (1.0 - float(last[t + 1, b])) * lam
            ret = float(reward[t + 1, b]) + alive * ((1 - chain) * float(boot[t + 1, b]) + chain * ret)
            out[t, b] = ret
    return out


def test_lambda_return_matches_naive_loop():
    g = torch.Generator().manual_seed(1)
    T, B = 16, 5
    reward = torch.randn(T, B, generator=g, dtype=torch.float64)
    boot = torch.randn(T, B, generator=g, dtype=torch.float64)
    term = (torch.rand(T, B, generator=g) < 0.15).double()
    last = torch.maximum(term, (torch.rand(T, B, generator=g) < 0.15).double())
    live = (1.0 - term) * 0.97
    got = lambda_return(reward, boot, live, 0.9, last=last)
    assert got.shape == (T - 1, B)
    torch.testing.assert_close(got, naive_lambda_return(reward, boot, term, last, 0.97, 0.9))


def _golden(disc, lam, term_at=None, last_at=None):
    reward = torch.tensor([0.0, 1.0, 2.0, 3.0])
    boot = torch.tensor([10.0, 20.0, 30.0, 40.0])
    term, last = torch.zeros(4), torch.zeros(4)
    if term_at is not None:
        term[term_at] = 1.0
    if last_at is not None:
        last[last_at] = 1.0
    return lambda_return(reward, boot, (1.0 - term) * disc, lam, last=last).tolist()


def test_lambda_return_goldens():
    assert _golden(0.5, 0.5) == [9.8125, 15.25, 23.0]
    assert _golden(1.0, 1.0) == [46.0, 45.0, 43.0]
    assert _golden(1.0, 0.0) == [21.0, 32.0, 43.0]
    assert _golden(1.0, 1.0, term_at=2) == [3.0, 2.0, 43.0]  # R_1 = r_2: the terminal cuts the bootstrap
    assert _golden(1.0, 1.0, last_at=2) == [33.0, 32.0, 43.0]  # is_last stops the chain, bootstraps boot_2


def test_lambda_return_torchrl_convention_golden():
    # TorchRL indexes r_t, V(s'_t), c_t by the step t→t+1; here row t+1 describes arriving at t+1, so shift by one
    # (row 0 unused): R_t = r_t + c·γ·((1−λ)V(s'_t) + λR_{t+1}) with R_last = r + c·γ·V(s').
    reward = torch.tensor([0.0, 1.0, 2.0, 3.0])
    boot = torch.tensor([0.0, 10.0, 20.0, 30.0])
    live = torch.full((4,), 0.5 * 1.0)
    assert lambda_return(reward, boot, live, 0.5).tolist() == [6.375, 11.5, 18.0]


# ----- I7 weights, I15 continue target -------------------------------------------------------------------------------


def test_imagination_weights_cumprod_without_gradient():
    cont = torch.full((3, 2), 0.5, requires_grad=True)
    weights = imagination_weights(cont)
    torch.testing.assert_close(weights[:, 0], torch.tensor([0.5, 0.25, 0.125]))
    assert not weights.requires_grad


def test_continue_target_discounts_and_keeps_truncation():
    terminated = torch.tensor([False, True, False])  # the last step is a truncation: not terminal
    con = continue_target(terminated)
    assert con.dtype == torch.float32
    torch.testing.assert_close(con, torch.tensor([1 - 1 / 333, 0.0, 1 - 1 / 333]))
    assert float(con[2]) == pytest.approx(0.997, abs=1e-3)
    assert continue_target(terminated, discount_continue=False).tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(ConfigError, match="horizon"):
        continue_target(terminated, horizon=0.5)


# ----- I8 KL, I9 unimix ----------------------------------------------------------------------------------------------


def _latent_logits(*shape, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).requires_grad_(True)


def test_kl_routing_dyn_trains_prior_rep_trains_posterior():
    post_logits, prior_logits = _latent_logits(4, 3, 32, 8), _latent_logits(4, 3, 32, 8, seed=3)
    post, prior = unimix_logits(post_logits, 0.01), unimix_logits(prior_logits, 0.01)
    dyn, rep, kl = kl_losses(post, prior)
    assert dyn.shape == rep.shape == kl.shape == (4, 3)
    assert not kl.requires_grad
    assert bool((kl > 1.0).all())  # random 32-latent KLs exceed the free bits, so both terms carry gradient
    post_grad, prior_grad = torch.autograd.grad(dyn.sum(), [post_logits, prior_logits], allow_unused=True)
    assert post_grad is None or not post_grad.any()
    assert prior_grad.abs().sum() > 0
    post_grad, prior_grad = torch.autograd.grad(rep.sum(), [post_logits, prior_logits], allow_unused=True)
    assert post_grad.abs().sum() > 0
    assert prior_grad is None or not prior_grad.any()


def test_kl_equal_distributions_give_exactly_free_nats_and_no_gradient():
    logits = _latent_logits(2, 32, 4)
    logp = unimix_logits(logits, 0.01)
    dyn, rep, kl = kl_losses(logp, logp, free_nats=1.0)
    assert torch.equal(dyn, torch.ones(2))
    assert torch.equal(rep, torch.ones(2))
    assert torch.equal(kl, torch.zeros(2))
    (grad,) = torch.autograd.grad((dyn + rep).sum(), [logits])
    assert torch.equal(grad, torch.zeros_like(grad))


def test_free_bits_clamp_the_sum_over_latents_not_each_latent():
    # 32 latents with a small KL each: the sum (~32 · 0.06) clears 1 nat, while every single latent is far below it.
    post_logits = torch.zeros(32, 4)
    prior_logits = torch.tensor([0.5, 0.0, 0.0, -0.5]).expand(32, 4).clone().requires_grad_(True)
    post, prior = post_logits.log_softmax(-1), prior_logits.log_softmax(-1)
    per_latent = (post.exp() * (post - prior)).sum(-1)
    assert bool((per_latent < 1.0).all())
    dyn, _, kl = kl_losses(post, prior)
    assert float(kl) > 1.0
    torch.testing.assert_close(dyn, per_latent.sum())  # per-latent clamping would give 32.0
    (grad,) = torch.autograd.grad(dyn, [prior_logits])
    assert grad.abs().sum() > 0


def test_unimix_floors_every_probability_even_for_huge_logits():
    logits = torch.randn(64, 32, 16, generator=torch.Generator().manual_seed(3)) * 50
    probs = unimix_logits(logits, 0.01).exp()
    assert float(probs.min()) >= 0.01 / 16 * (1 - 1e-5)
    torch.testing.assert_close(probs.sum(-1), torch.ones(64, 32))


# ----- I13 return normaliser -----------------------------------------------------------------------------------------


def _stacked_copies(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([x, x])  # what all_gather does on two ranks holding the same data


def test_return_normalizer_first_update_and_small_returns():
    norm = ReturnNormalizer()
    returns = torch.linspace(0.0, 10.0, 1001)
    norm.update(returns, gather=_stacked_copies)
    torch.testing.assert_close(norm.lo, torch.tensor(0.01 * 0.5))
    torch.testing.assert_close(norm.hi, torch.tensor(0.01 * 9.5))
    small = ReturnNormalizer()
    for _ in range(50):
        small.update(torch.linspace(0.0, 0.1, 101))
    assert float(small.scale()) == 1.0


def test_return_normalizer_converges_and_uses_gathered_data():
    norm = ReturnNormalizer()
    returns = torch.linspace(0.0, 10.0, 201)
    for _ in range(2000):
        norm.update(returns)
    torch.testing.assert_close(norm.scale(), torch.tensor(9.0), rtol=0.01, atol=0.0)
    other_rank = ReturnNormalizer()
    other_rank.update(torch.zeros(100), gather=lambda x: torch.stack([x, torch.full_like(x, 10.0)]))
    torch.testing.assert_close(other_rank.hi, torch.tensor(0.1))


def test_return_normalizer_checkpoint_and_eval_freeze():
    norm = ReturnNormalizer()
    norm.update(torch.linspace(-5.0, 20.0, 300))
    state = norm.state_dict()
    assert set(state) == {"lo", "hi"}
    restored = ReturnNormalizer()
    restored.load_state_dict(state)
    assert torch.equal(restored.lo, norm.lo)
    assert torch.equal(restored.hi, norm.hi)
    restored.eval()
    restored.update(torch.full((10,), 1e6))
    assert torch.equal(restored.hi, norm.hi)
    with pytest.raises(ConfigError, match="decay"):
        ReturnNormalizer(decay=1.0)


# ----- I17 actor / critic losses -------------------------------------------------------------------------------------


def _leaves(*shape, n):
    g = torch.Generator().manual_seed(4)
    return [torch.randn(*shape, generator=g).requires_grad_(True) for _ in range(n)]


def test_reinforce_loss_per_step_and_gradient_isolation():
    log_prob, entropy, advantage, weight = _leaves(15, 4, n=4)
    loss = reinforce_loss(log_prob, entropy, advantage, weight, entropy_coef=0.1)
    assert loss.shape == (15, 4)
    expected = -weight.detach() * (log_prob.detach() * advantage.detach() + 0.1 * entropy.detach())
    torch.testing.assert_close(loss.detach(), expected)
    grads = torch.autograd.grad(loss.sum(), [log_prob, entropy, advantage, weight], allow_unused=True)
    assert grads[0] is not None
    assert grads[1] is not None
    assert grads[2] is None
    assert grads[3] is None


def test_value_loss_per_step_and_gradient_isolation():
    codec = TwoHot(255)
    logits, slow_logits = _leaves(16, 4, 255, n=2)
    returns, weight = _leaves(16, 4, n=2)
    loss = value_loss(logits, returns, slow_logits, weight, codec, slow_reg=1.0)
    assert loss.shape == (16, 4)
    slow_value = codec.decode(slow_logits.detach())
    expected = weight.detach() * (codec.loss(logits, returns) + codec.loss(logits, slow_value))
    torch.testing.assert_close(loss.detach(), expected.detach())
    grads = torch.autograd.grad(loss.sum(), [logits, returns, slow_logits, weight], allow_unused=True)
    assert grads[0] is not None
    assert grads[1:] == (None, None, None)


@pytest.mark.parametrize("space", ["raw", "symlog"])
def test_twohot_loss_equals_cross_entropy_against_the_encoded_target(space):
    """``loss`` gathers the two weighted bins; it must equal the CE against the full ``encode`` target."""
    codec = TwoHot(15, space=space).double()
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(7, 5, 15, generator=generator, dtype=torch.float64, requires_grad=True)
    target = torch.randn(7, 5, generator=generator, dtype=torch.float64) * 1e4  # inside and beyond the range
    reference = -(codec.encode(target) * logits.log_softmax(-1)).sum(-1)
    torch.testing.assert_close(codec.loss(logits, target), reference)
    (grad,) = torch.autograd.grad(codec.loss(logits, target).sum(), logits)
    (ref_grad,) = torch.autograd.grad(reference.sum(), logits)
    torch.testing.assert_close(grad, ref_grad)


@pytest.mark.parametrize("space", ["raw", "symlog"])
def test_twohot_decode_is_the_expected_value(space):
    codec = TwoHot(255, space=space).double()
    logits = torch.randn(6, 255, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    expected = (logits.softmax(-1) * codec.bins).sum(-1)
    torch.testing.assert_close(codec.decode(logits), symexp(expected) if space == "symlog" else expected)
