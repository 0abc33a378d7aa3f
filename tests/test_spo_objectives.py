"""SPO losses (spo.md §5.1 items 11–15): dual directions, gradient routing, critic targets, policy CE, tanh-Normal."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from rl_lightning.networks.distributions import (
    categorical_kl,
    masked_logits,
    normal_kl,
    tanh_normal_log_prob,
    tanh_normal_mode,
    tanh_normal_sample,
)
from rl_lightning.objectives import (
    DUAL_FLOOR,
    clamp_duals_,
    critic_loss,
    critic_targets,
    dual_value,
    kl_trust_region,
    particle_cross_entropy,
    spo_continuous_policy_loss,
    spo_discrete_policy_loss,
    temperature_loss,
)


def _inverse_dual(value: float) -> torch.Tensor:
    """The log-parameter whose :func:`dual_value` is ``value``."""
    return torch.tensor(math.log(math.expm1(value - 1e-8)), dtype=torch.float64)


def _touches(loss: torch.Tensor, tensors: dict[str, torch.Tensor]) -> dict[str, bool]:
    """Which of ``tensors`` receive a non-zero gradient from ``loss``."""
    grads = torch.autograd.grad(loss, list(tensors.values()), retain_graph=True, allow_unused=True)
    return {name: grad is not None and bool(grad.abs().sum() > 0) for name, grad in zip(tensors, grads)}


def _sgd_step(log_param: torch.Tensor, loss_fn, lr: float = 1e-2) -> float:
    """One SGD step on ``loss_fn(dual_value(log_param))``; returns the new dual value."""
    param = log_param.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_fn(dual_value(param)), param)
    return dual_value(param.detach() - lr * grad).item()


# --- 11. Dual directions ----------------------------------------------------------------------------------------------


def _advantages() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return 5.0 * torch.randn(64, 16, generator=g, dtype=torch.float64)


@pytest.mark.parametrize(("eta", "expected_kl", "tol", "rises"), [(0.05, 2.76, 0.02, True), (50.0, 0.005, 1e-3, False)])
def test_temperature_moves_towards_the_kl_bound(eta, expected_kl, tol, rises):
    advantages, epsilon = _advantages(), 0.5
    _, kl = temperature_loss(advantages, torch.tensor(eta, dtype=torch.float64), epsilon)
    assert kl.item() == pytest.approx(expected_kl, abs=tol)
    new_eta = _sgd_step(_inverse_dual(eta), lambda t: temperature_loss(advantages, t, epsilon)[0])
    assert (new_eta > eta) == rises
    assert new_eta != pytest.approx(eta, abs=0.0)


@pytest.mark.parametrize("eta", [0.05, 0.3, 1.0, 5.0, 50.0])
def test_temperature_gradient_is_epsilon_minus_nonparametric_kl(eta):
    advantages, epsilon = _advantages(), 0.5
    temperature = torch.tensor(eta, dtype=torch.float64, requires_grad=True)
    loss, kl = temperature_loss(advantages, temperature, epsilon)
    (grad,) = torch.autograd.grad(loss, temperature)
    # Naive KL(softmax(A/η) ‖ U_N), independent of the function's own diagnostic.
    w = (advantages / eta).softmax(-1)
    naive_kl = (w * (w * advantages.shape[-1]).log().nan_to_num(neginf=0.0)).sum(-1).mean()
    assert kl.item() == pytest.approx(naive_kl.item(), abs=1e-6)
    assert grad.item() == pytest.approx(epsilon - naive_kl.item(), abs=1e-4)


def test_temperature_loss_matches_closed_form():
    advantages, epsilon, eta = _advantages(), 0.1, 2.0
    loss, _ = temperature_loss(advantages, torch.tensor(eta, dtype=torch.float64), epsilon)
    n = advantages.shape[1]
    per_state = [math.log(sum(math.exp(a / eta) for a in row.tolist())) for row in advantages]
    expected = eta * (epsilon + sum(per_state) / len(per_state) - math.log(n))
    assert loss.item() == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize(("kl_value", "rises"), [(1e-2, True), (1e-4, False)])
def test_alpha_moves_towards_the_kl_bound(kl_value, rises):
    kl = torch.full((32,), kl_value, dtype=torch.float64)
    alpha0 = 1.0
    new_alpha = _sgd_step(_inverse_dual(alpha0), lambda a: kl_trust_region(kl, a, 1e-3)[1], lr=10.0)
    assert (new_alpha > alpha0) == rises
    assert new_alpha != pytest.approx(alpha0, abs=0.0)


def test_kl_trust_region_per_dimension_shapes_and_values():
    g = torch.Generator().manual_seed(1)
    kl = torch.rand(8, 3, generator=g, dtype=torch.float64)
    alpha = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    epsilon = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    loss_kl, loss_alpha, mean_kl = kl_trust_region(kl, alpha, epsilon)
    assert mean_kl.shape == (3,)
    assert loss_kl.shape == loss_alpha.shape == ()
    torch.testing.assert_close(mean_kl, kl.mean(0))
    torch.testing.assert_close(loss_kl, (alpha * kl.mean(0)).sum())
    torch.testing.assert_close(loss_alpha, (alpha * (epsilon - kl.mean(0))).sum())


def test_dual_parametrisation_and_floor():
    assert dual_value(torch.tensor(10.0)).item() == pytest.approx(10.0, abs=1e-4)
    assert dual_value(torch.tensor(3.0)).item() == pytest.approx(3.0486, abs=1e-4)
    assert dual_value(torch.tensor(-1e4)).item() > 0
    params = [torch.tensor(-25.0, requires_grad=True), torch.tensor([-30.0, -5.0, 2.0], requires_grad=True)]
    clamp_duals_(params)
    assert params[0].item() == DUAL_FLOOR == -18.0
    torch.testing.assert_close(params[1].detach(), torch.tensor([-18.0, -5.0, 2.0]))
    assert all(p.requires_grad and p.grad is None for p in params)


# --- 12. Gradient routing ---------------------------------------------------------------------------------------------


def _discrete_inputs(b: int = 6, a: int = 4, n: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "online_logits": torch.randn(b, a, generator=g).requires_grad_(True),
        "target_logits": torch.randn(b, a, generator=g).requires_grad_(True),
        "sampled_actions": torch.randint(a, (b, n), generator=g),
        "weights": torch.randn(b, n, generator=g).softmax(-1).requires_grad_(True),
        "advantages": torch.randn(b, n, generator=g).requires_grad_(True),
        "log_temperature": torch.tensor(1.0, requires_grad=True),
        "log_alpha": torch.tensor(0.5, requires_grad=True),
    }


_DISCRETE_ROUTES = {
    "loss_policy": {"online_logits"},
    "loss_kl": {"online_logits"},
    "loss_alpha": {"log_alpha"},
    "loss_temperature": {"log_temperature"},
}


@pytest.mark.parametrize(("term", "receivers"), list(_DISCRETE_ROUTES.items()))
def test_discrete_gradient_routing(term, receivers):
    inputs = _discrete_inputs()
    # Make the target differ from the online policy so that every term has a non-zero gradient somewhere.
    out = spo_discrete_policy_loss(**inputs, epsilon=0.1, epsilon_alpha=1e-3)
    differentiable = {k: v for k, v in inputs.items() if v.requires_grad}
    touched = _touches(out[term], differentiable)
    assert {name for name, hit in touched.items() if hit} == receivers


def test_discrete_diagnostics_are_detached_and_loss_keys_are_the_four_terms():
    out = spo_discrete_policy_loss(**_discrete_inputs(), epsilon=0.1, epsilon_alpha=1e-3)
    loss_keys = sorted(k for k in out.keys(include_nested=False) if k.startswith("loss"))
    assert loss_keys == ["loss_alpha", "loss_kl", "loss_policy", "loss_temperature"]
    for key in ("kl", "kl_nonparametric", "temperature", "alpha", "entropy"):
        assert not out[key].requires_grad, key
        assert out[key].shape == ()
    assert all(out[k].requires_grad for k in loss_keys)


def _continuous_inputs(b: int = 5, n: int = 7, d: int = 3, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    low = torch.tensor([-1.0, -2.0, 0.0])[:d]
    high = torch.tensor([1.0, 2.0, 3.0])[:d]
    target_mean = torch.randn(b, d, generator=g)
    target_std = torch.rand(b, d, generator=g) + 0.3
    # Stored search actions are data; make them a grad-requiring leaf to check the loss detaches them.
    actions = tanh_normal_sample(
        target_mean.unsqueeze(1).expand(b, n, d), target_std.unsqueeze(1).expand(b, n, d), low, high, g
    )
    return {
        "online_mean": (target_mean + 0.3 * torch.randn(b, d, generator=g)).requires_grad_(True),
        "online_std": (target_std * (1.0 + 0.3 * torch.rand(b, d, generator=g))).requires_grad_(True),
        "target_mean": target_mean.requires_grad_(True),
        "target_std": target_std.requires_grad_(True),
        "sampled_actions": actions.requires_grad_(True),
        "weights": torch.randn(b, n, generator=g).softmax(-1).requires_grad_(True),
        "advantages": torch.randn(b, n, generator=g).requires_grad_(True),
        "low": low,
        "high": high,
        "log_temperature": torch.tensor(1.0, requires_grad=True),
        "log_alpha_mean": torch.zeros(d, requires_grad=True),
        "log_alpha_std": torch.full((d,), 0.5, requires_grad=True),
    }


_CONTINUOUS_ROUTES = {
    "loss_policy": {"online_mean", "online_std"},
    "loss_kl": {"online_mean", "online_std"},
    "loss_alpha": {"log_alpha_mean", "log_alpha_std"},
    "loss_temperature": {"log_temperature"},
}


@pytest.mark.parametrize(("term", "receivers"), list(_CONTINUOUS_ROUTES.items()))
def test_continuous_gradient_routing(term, receivers):
    inputs = _continuous_inputs()
    out = spo_continuous_policy_loss(
        **inputs, epsilon=0.1, epsilon_alpha_mean=1e-3, epsilon_alpha_std=torch.full((3,), 1e-5)
    )
    differentiable = {k: v for k, v in inputs.items() if v.requires_grad}
    touched = _touches(out[term], differentiable)
    assert {name for name, hit in touched.items() if hit} == receivers


# --- 13. Critic targets -----------------------------------------------------------------------------------------------


def _naive_targets(reward, value, next_value, terminated, truncated, gamma, lam):
    T, B = reward.shape
    targets = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            bootstrap = 0.0 if terminated[t, b] else float(next_value[t, b])
            delta = float(reward[t, b]) + gamma * bootstrap - float(value[t, b])
            continues = t + 1 < T and not (terminated[t, b] or truncated[t, b])
            running = delta + gamma * lam * (running if continues else 0.0)
            targets[t, b] = running + float(value[t, b])
    return targets


def _critic_sequence():
    """T = 6, B = 2: env 0 terminates at t = 2, env 1 is truncated at t = 5 (the last row); env 0 also at t = 5."""
    f64 = torch.float64
    reward = torch.tensor([[1.0, 0.5], [0.0, 1.0], [2.0, -1.0], [1.0, 0.0], [-0.5, 2.0], [1.0, 1.0]], dtype=f64)
    value = torch.tensor([[0.3, 0.1], [0.7, -0.2], [1.1, 0.4], [0.2, 0.9], [-0.4, 0.6], [0.5, 1.5]], dtype=f64)
    # next_value[t] = V(final_obs[t]); after a termination or truncation it is not value[t + 1] (that is the reset obs).
    next_value = torch.cat([value[1:], torch.tensor([[0.8, 7.0]], dtype=f64)])
    next_value[2, 0] = 9.0  # terminal successor: must be ignored
    terminated = torch.zeros(6, 2, dtype=torch.bool)
    truncated = torch.zeros(6, 2, dtype=torch.bool)
    terminated[2, 0] = True
    truncated[5, 1] = True
    return reward, value, next_value, terminated, truncated


def test_critic_targets_match_naive_loop_with_termination_and_truncation():
    reward, value, next_value, terminated, truncated = _critic_sequence()
    gamma, lam = 0.9, 0.8
    targets = critic_targets(reward, value, next_value, terminated, truncated, gamma, lam)
    expected = _naive_targets(reward, value, next_value, terminated, truncated, gamma, lam)
    torch.testing.assert_close(targets, expected)
    # Hand check of the boundary rows: termination drops the bootstrap, truncation bootstraps from final_obs.
    assert targets[2, 0].item() == pytest.approx(2.0)
    assert targets[5, 1].item() == pytest.approx(1.0 + gamma * 7.0)
    assert targets[5, 0].item() == pytest.approx(1.0 + gamma * 0.8)


def test_truncation_bootstraps_from_final_obs_value_not_next_row():
    reward, value, next_value, terminated, truncated = _critic_sequence()
    truncated[3, 1] = True
    next_value[3, 1] = 5.0  # V(final_obs) of the truncated step, while value[4, 1] = 0.6 is the reset obs
    targets = critic_targets(reward, value, next_value, terminated, truncated, 0.9, 0.8)
    assert targets[3, 1].item() == pytest.approx(0.0 + 0.9 * 5.0)
    next_value[3, 1] = 100.0
    assert critic_targets(reward, value, next_value, terminated, truncated, 0.9, 0.8)[3, 1].item() == pytest.approx(90)


def test_critic_targets_are_detached():
    reward, value, next_value, terminated, truncated = _critic_sequence()
    value.requires_grad_(True)
    next_value.requires_grad_(True)
    assert not critic_targets(reward, value, next_value, terminated, truncated, 0.9, 0.8).requires_grad


def test_critic_loss_uses_gae_targets_not_search_value():
    reward, target_value, target_next_value, terminated, truncated = _critic_sequence()
    g = torch.Generator().manual_seed(0)
    online_value = torch.randn(6, 2, generator=g, dtype=torch.float64, requires_grad=True)
    targets = critic_targets(reward, target_value, target_next_value, terminated, truncated, 0.99, 0.95)
    loss = critic_loss(online_value, targets, vf_coef=2.0)
    expected_targets = _naive_targets(reward, target_value, target_next_value, terminated, truncated, 0.99, 0.95)
    values = online_value.detach()
    expected = 2.0 * sum(
        0.5 * (float(values[t, b]) - float(expected_targets[t, b])) ** 2 for t in range(6) for b in range(2)
    )
    assert loss.item() == pytest.approx(expected / 12)
    for fn in (critic_loss, critic_targets):
        assert "search_value" not in inspect.signature(fn).parameters
    # The loss is zero exactly at the GAE targets, not at a stored search value (= V(s₀), here the target value).
    assert critic_loss(targets.clone(), targets, 1.0).item() == 0.0
    assert critic_loss(target_value, targets, 1.0).item() > 0.0
    # Gradient only to the online value; none through the target.
    target_leaf = targets.clone().requires_grad_(True)
    touched = _touches(critic_loss(online_value, target_leaf, 1.0), {"online": online_value, "target": target_leaf})
    assert touched == {"online": True, "target": False}


# --- 14. Policy loss --------------------------------------------------------------------------------------------------


def _histogram(actions: torch.Tensor, weights: torch.Tensor, num_actions: int) -> torch.Tensor:
    return torch.zeros(actions.shape[0], num_actions, dtype=weights.dtype).scatter_add_(-1, actions, weights)


def test_particle_ce_equals_histogram_ce():
    g = torch.Generator().manual_seed(3)
    b, a, n = 8, 5, 16
    logits = torch.randn(b, a, generator=g, dtype=torch.float64)
    actions = torch.randint(a, (b, n), generator=g)
    weights = torch.randn(b, n, generator=g, dtype=torch.float64).softmax(-1)
    log_p = logits.log_softmax(-1)
    particle = particle_cross_entropy(log_p.gather(-1, actions), weights)
    histogram = -(_histogram(actions, weights, a) * log_p).sum(-1).mean()
    torch.testing.assert_close(particle, histogram)
    # The same through the full discrete loss.
    out = spo_discrete_policy_loss(
        logits, logits, actions, weights, torch.zeros(b, n, dtype=torch.float64), torch.tensor(1.0),
        torch.tensor(1.0), 0.1, 1e-3,
    )  # fmt: skip
    torch.testing.assert_close(out["loss_policy"], histogram)


def test_policy_ce_gradient_vanishes_at_the_target_histogram():
    g = torch.Generator().manual_seed(4)
    b, a, n = 6, 4, 12
    # Every action appears in every row, so q̂ has full support and log q̂ is a valid set of logits.
    actions = torch.stack([torch.randperm(n, generator=g) % a for _ in range(b)])
    weights = torch.rand(b, n, generator=g, dtype=torch.float64).add(0.1)
    weights = weights / weights.sum(-1, keepdim=True)
    target = _histogram(actions, weights, a)
    assert bool((target > 0).all())

    def grad_at(logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone().requires_grad_(True)
        loss = particle_cross_entropy(logits.log_softmax(-1).gather(-1, actions), weights)
        return torch.autograd.grad(loss, logits)[0]

    assert grad_at(target.log()).abs().max().item() < 1e-12
    assert grad_at(torch.zeros(b, a, dtype=torch.float64)).abs().max().item() > 1e-3


def test_zero_weight_particles_with_infinite_log_prob_contribute_nothing():
    log_prob = torch.tensor([[-1.0, -math.inf]], requires_grad=True)
    weights = torch.tensor([[1.0, 0.0]])
    loss = particle_cross_entropy(log_prob, weights)
    (grad,) = torch.autograd.grad(loss, log_prob)
    assert loss.item() == pytest.approx(1.0)
    torch.testing.assert_close(grad, torch.tensor([[-1.0, 0.0]]))


def test_masked_logits_keep_every_loss_finite():
    g = torch.Generator().manual_seed(5)
    b, a, n = 6, 5, 10
    mask = torch.rand(b, a, generator=g) < 0.6
    mask[:, 0] = True  # at least one legal action per row
    online = masked_logits(torch.randn(b, a, generator=g), mask).requires_grad_(True)
    target = masked_logits(torch.randn(b, a, generator=g), mask)
    # Sample only legal actions: uniform over the legal set.
    actions = torch.multinomial(mask.float(), n, replacement=True, generator=g)
    assert bool(mask.gather(-1, actions).all())
    weights = torch.randn(b, n, generator=g).softmax(-1)
    log_temperature, log_alpha = torch.tensor(0.0, requires_grad=True), torch.tensor(0.0, requires_grad=True)
    out = spo_discrete_policy_loss(
        online, target, actions, weights, torch.randn(b, n, generator=g), log_temperature, log_alpha, 0.1, 1e-3
    )
    for key, value in out.items():
        assert bool(torch.isfinite(value).all()), key
    total = sum(out[k] for k in ("loss_policy", "loss_kl", "loss_alpha", "loss_temperature"))
    grads = torch.autograd.grad(total, [online, log_temperature, log_alpha])
    assert all(bool(torch.isfinite(grad).all()) for grad in grads)
    assert bool((grads[0][~mask] == 0).all())


# --- KL helpers -------------------------------------------------------------------------------------------------------


def test_categorical_kl_matches_torch_and_ignores_masked_entries():
    g = torch.Generator().manual_seed(6)
    p_logits = torch.randn(7, 4, generator=g, dtype=torch.float64)
    q_logits = torch.randn(7, 4, generator=g, dtype=torch.float64)
    expected = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=p_logits), torch.distributions.Categorical(logits=q_logits)
    )
    torch.testing.assert_close(categorical_kl(p_logits, q_logits), expected)
    # Masking the last action in both equals the KL of the renormalised 3-action distributions.
    mask = torch.tensor([True, True, True, False]).expand(7, 4)
    kl = categorical_kl(masked_logits(p_logits, mask), masked_logits(q_logits, mask))
    torch.testing.assert_close(kl, categorical_kl(p_logits[:, :3], q_logits[:, :3]))


def test_normal_kl_matches_torch_per_dimension():
    g = torch.Generator().manual_seed(7)
    mp, mq = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    sp, sq = torch.rand(5, 3, generator=g) + 0.1, torch.rand(5, 3, generator=g) + 0.1
    expected = torch.distributions.kl_divergence(torch.distributions.Normal(mp, sp), torch.distributions.Normal(mq, sq))
    kl = normal_kl(mp, sp, mq, sq)
    assert kl.shape == (5, 3)
    torch.testing.assert_close(kl, expected)


# --- 15. Continuous variant -------------------------------------------------------------------------------------------


def test_continuous_kl_is_zero_when_online_equals_target():
    inputs = _continuous_inputs()
    inputs["online_mean"] = inputs["target_mean"].detach().clone().requires_grad_(True)
    inputs["online_std"] = inputs["target_std"].detach().clone().requires_grad_(True)
    out = spo_continuous_policy_loss(**inputs, epsilon=0.1, epsilon_alpha_mean=1e-3, epsilon_alpha_std=1e-5)
    assert out["kl_mean"].item() == 0.0
    assert out["kl_std"].item() == 0.0
    assert out["loss_kl"].item() == 0.0
    mean, std = inputs["target_mean"].detach(), inputs["target_std"].detach()
    kl_mu, kl_sigma = normal_kl(mean, std, mean, std), normal_kl(mean, std, mean, std)
    assert kl_mu.shape == kl_sigma.shape == (5, 3)


def test_continuous_kl_is_decoupled_into_mean_and_std_parts():
    inputs = _continuous_inputs()
    # Only the mean moves: KL_σ = 0, KL_μ > 0.
    inputs["online_std"] = inputs["target_std"].detach().clone()
    out = spo_continuous_policy_loss(**inputs, epsilon=0.1, epsilon_alpha_mean=1e-3, epsilon_alpha_std=1e-5)
    assert out["kl_std"].item() == 0.0
    assert out["kl_mean"].item() > 0.0
    expected = normal_kl(inputs["target_mean"], inputs["target_std"], inputs["online_mean"], inputs["target_std"])
    assert out["kl_mean"].item() == pytest.approx(expected.mean(0).sum().item(), rel=1e-6)
    # Only the std moves: KL_μ = 0, KL_σ > 0.
    inputs = _continuous_inputs()
    inputs["online_mean"] = inputs["target_mean"].detach().clone()
    out = spo_continuous_policy_loss(**inputs, epsilon=0.1, epsilon_alpha_mean=1e-3, epsilon_alpha_std=1e-5)
    assert out["kl_mean"].item() == 0.0
    assert out["kl_std"].item() > 0.0


def test_continuous_loss_matches_hand_assembly():
    inputs = _continuous_inputs()
    out = spo_continuous_policy_loss(**inputs, epsilon=0.1, epsilon_alpha_mean=1e-3, epsilon_alpha_std=1e-5)
    om, os_, tm, ts = (inputs[k].detach() for k in ("online_mean", "online_std", "target_mean", "target_std"))
    acts, w, low, high = inputs["sampled_actions"], inputs["weights"].detach(), inputs["low"], inputs["high"]

    def ce(mean, std):
        return -(w * tanh_normal_log_prob(mean[:, None], std[:, None], acts, low, high)).sum(-1).mean()

    torch.testing.assert_close(out["loss_policy"].detach(), ce(om, ts) + ce(tm, os_))
    alpha_mu, alpha_sigma = dual_value(inputs["log_alpha_mean"].detach()), dual_value(inputs["log_alpha_std"].detach())
    kl_mu, kl_sigma = normal_kl(tm, ts, om, ts).mean(0), normal_kl(tm, ts, tm, os_).mean(0)
    torch.testing.assert_close(out["loss_kl"].detach(), (alpha_mu * kl_mu).sum() + (alpha_sigma * kl_sigma).sum())
    expected_alpha = (alpha_mu * (1e-3 - kl_mu)).sum() + (alpha_sigma * (1e-5 - kl_sigma)).sum()
    torch.testing.assert_close(out["loss_alpha"].detach(), expected_alpha)
    assert out["alpha_mean"].item() == pytest.approx(alpha_mu.mean().item())


def test_tanh_normal_log_prob_is_finite_at_the_exact_bounds():
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 3.0])
    mean = torch.tensor([[0.2, -0.5]], requires_grad=True)
    std = torch.tensor([[0.7, 1.3]], requires_grad=True)
    actions = torch.stack([low, high, torch.stack([low[0], high[1]])])  # [3, 2]
    log_prob = tanh_normal_log_prob(mean, std, actions, low, high)
    assert log_prob.shape == (3,)
    assert bool(torch.isfinite(log_prob).all())
    grads = torch.autograd.grad(log_prob.sum(), [mean, std])
    assert all(bool(torch.isfinite(grad).all()) for grad in grads)


def test_tanh_normal_sample_stays_within_bounds_and_mode_is_squashed_mean():
    g = torch.Generator().manual_seed(8)
    low, high = torch.tensor([-2.0, 0.5]), torch.tensor([1.0, 4.0])
    mean = torch.randn(10_000, 2, generator=g) * 3.0
    std = torch.full((10_000, 2), 5.0)
    action = tanh_normal_sample(mean, std, low, high, g)
    assert bool(((action >= low) & (action <= high)).all())
    torch.testing.assert_close(tanh_normal_mode(torch.zeros(2), low, high), (low + high) / 2)
    assert bool(((tanh_normal_mode(mean, low, high) >= low) & (tanh_normal_mode(mean, low, high) <= high)).all())


def test_tanh_normal_sample_uses_only_the_given_generator():
    mean, std = torch.zeros(4, 2), torch.ones(4, 2)
    low, high = -torch.ones(2), torch.ones(2)
    first = tanh_normal_sample(mean, std, low, high, torch.Generator().manual_seed(9))
    second = tanh_normal_sample(mean, std, low, high, torch.Generator().manual_seed(9))
    torch.testing.assert_close(first, second, rtol=0, atol=0)


@pytest.mark.parametrize(("mean", "std", "low", "high"), [(0.3, 0.8, -2.0, 3.0), (-1.0, 1.5, 0.0, 1.0)])
def test_tanh_normal_density_integrates_to_one(mean, std, low, high):
    grid = torch.linspace(low, high, 200_001, dtype=torch.float64).unsqueeze(-1)
    lo, hi = torch.tensor([low], dtype=torch.float64), torch.tensor([high], dtype=torch.float64)
    m, s = torch.tensor([mean], dtype=torch.float64), torch.tensor([std], dtype=torch.float64)
    density = tanh_normal_log_prob(m, s, grid, lo, hi).exp()
    assert torch.trapezoid(density, grid.squeeze(-1)).item() == pytest.approx(1.0, abs=1e-2)


def test_tanh_normal_log_prob_matches_torch_transformed_distribution():
    g = torch.Generator().manual_seed(10)
    low, high = torch.tensor([-1.0, 2.0], dtype=torch.float64), torch.tensor([3.0, 2.5], dtype=torch.float64)
    mean = torch.randn(50, 2, generator=g, dtype=torch.float64)
    std = torch.rand(50, 2, generator=g, dtype=torch.float64) + 0.2
    action = tanh_normal_sample(mean, std, low, high, g)
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, std),
        [
            torch.distributions.TanhTransform(),
            torch.distributions.AffineTransform((low + high) / 2, (high - low) / 2),
        ],
    )
    # Stay away from the clip so that both agree to machine precision.
    inside = ((action - low) / (high - low) - 0.5).abs().amax(-1) < 0.49
    expected = reference.log_prob(action).sum(-1)
    torch.testing.assert_close(tanh_normal_log_prob(mean, std, action, low, high)[inside], expected[inside])
