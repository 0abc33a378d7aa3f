"""SMC search invariants (spo.md §5.1 items 1–10) on tiny table envs with fixed priors."""

from __future__ import annotations

import pytest
import torch

from rl_lightning import keys
from rl_lightning.algos.spo.draws import resample_indices
from rl_lightning.algos.spo.search import SearchConfig, effective_sample_size, smc_search
from tests.spo_toys import TableEnv, root, table_prior

ETA = torch.tensor(1.0)


def random_tree(num_states: int = 12, num_actions: int = 3, seed: int = 0, **kwargs) -> TableEnv:
    """Random transitions and rewards: particles on different action paths reach different states."""
    g = torch.Generator().manual_seed(seed)
    nxt = torch.randint(0, num_states, (num_states, num_actions), generator=g)
    reward = torch.randn(num_states, num_actions, generator=g)
    return TableEnv(nxt, reward, **kwargs)


def random_prior(env: TableEnv, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    num_states, num_actions = env.next_state.shape
    return table_prior(env, torch.randn(num_states, num_actions, generator=g), torch.randn(num_states, generator=g))


def search(env, prior, cfg, num_envs=2, seed=0, eta=ETA, state=None, **kwargs):
    root_state, root_obs = root(env, num_envs, state)
    return smc_search(env, root_state, root_obs, prior, cfg, eta, torch.Generator().manual_seed(seed), **kwargs)


def naive_log_weights(env: TableEnv, values: torch.Tensor, gamma: float, depth: int) -> torch.Tensor:
    """Σ_t r_t + γ·V(s_h) − V(s_0) per particle, frozen at termination, replayed from the env's action history."""
    s0 = env.history[0][0]
    total = torch.zeros(s0.shape[0])
    alive = torch.ones(s0.shape[0], dtype=torch.bool)
    value = values[s0]
    for d in range(depth):
        s, a = env.history[d]
        nxt = env.next_state[s, a]
        boot = gamma * values[nxt] * (~env.terminal[nxt])
        total += torch.where(alive, env.reward[s, a] + boot - value, 0.0)
        value = boot
        alive &= ~env.terminal[nxt]
    return total


# 1. weights ---------------------------------------------------------------------------------------------------------
def test_weights_normalised_and_finite_for_huge_rewards():
    env = random_tree()
    env.reward *= 1e4
    result = search(env, random_prior(env), SearchConfig(num_particles=8, depth=3, resample_period=100), num_envs=3)
    assert result.weights.shape == (3, 8)
    assert torch.isfinite(result.weights).all()
    torch.testing.assert_close(result.weights.sum(-1), torch.ones(3), atol=1e-6, rtol=0)


# 2. ESS -------------------------------------------------------------------------------------------------------------
def test_ess_bounds():
    n = 16
    assert float(effective_sample_size(torch.full((n,), 1 / n))) == pytest.approx(n)
    assert float(effective_sample_size(torch.nn.functional.one_hot(torch.tensor(3), n).float())) == pytest.approx(1)
    w = torch.rand(100, n, generator=torch.Generator().manual_seed(0)).softmax(-1)
    ess = effective_sample_size(w)
    assert bool(((ess >= 1) & (ess <= n + 1e-4)).all())


def test_ess_mode_resamples_per_env():
    """Env 0 sees rewards of ±100 (degenerate weights), env 1 sees equal rewards: only env 0 resamples."""
    nxt = torch.tensor([[1, 2], [1, 1], [2, 2], [3, 3]])
    reward = torch.tensor([[100.0, -100.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    env = TableEnv(nxt, reward)
    env.next_state = torch.tensor([[1, 2], [1, 1], [2, 2], [3, 3]])
    prior = table_prior(env, torch.zeros(4, 2), torch.zeros(4))
    root_state, root_obs = root(env, 2)
    root_state["s"] = torch.tensor([0, 3])
    root_obs = env.observe(root_state)
    cfg = SearchConfig(num_particles=16, depth=2, resample_mode="ess", ess_threshold=0.5)
    result = smc_search(env, root_state, root_obs, prior, cfg, ETA, torch.Generator().manual_seed(0))
    assert result.resampled[0].tolist() == [True, False]
    assert result.ess[0, 1] == pytest.approx(16.0)
    assert result.ess[0, 0] < 8.0
    # Env 0 resampled: only particles that went right (reward +100) survive, and their log-weights restart at 0.
    assert bool((result.sampled_actions[0] == 0).all())


def test_ess_mode_leaves_envs_that_are_not_due_untouched():
    """Env 1's weights are uneven but its ESS stays above the threshold: its particles keep their order, their
    root actions and their accumulated log-weights (a resample of every env would shuffle or reset them)."""
    nxt = torch.tensor([[1, 2], [1, 1], [2, 2], [3, 3]])
    reward = torch.tensor([[100.0, -100.0], [0.0, 0.0], [0.0, 0.0], [0.5, 0.0]])
    env = TableEnv(nxt, reward)
    prior = table_prior(env, torch.zeros(4, 2), torch.zeros(4))
    root_state, _ = root(env, 2)
    root_state["s"] = torch.tensor([0, 3])
    cfg = SearchConfig(num_particles=16, depth=2, resample_mode="ess", ess_threshold=0.5)
    result = smc_search(env, root_state, env.observe(root_state), prior, cfg, ETA, torch.Generator().manual_seed(0))
    assert result.resampled.tolist() == [[True, False], [False, False]]
    (_, first), (_, second) = env.history
    env1 = slice(16, 32)  # env 1 owns particle rows 16..31; with no resample, row i is particle i at every depth
    assert torch.equal(result.sampled_actions[1], first[env1])
    expected = reward[3, first[env1]] + reward[3, second[env1]]
    assert float(expected.std()) > 0  # uneven weights: a shuffle would be visible
    torch.testing.assert_close(result.log_weights[1], expected)


# 3. closed-form log-weights -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_log_weights_closed_form(gamma):
    env = random_tree(terminal=(5,))
    prior = random_prior(env)
    values = prior.critic(torch.eye(12))
    cfg = SearchConfig(num_particles=8, depth=4, resample_period=100, gamma=gamma)
    result = search(env, prior, cfg, num_envs=3, state=0)
    expected = naive_log_weights(env, values, gamma, 4).view(3, 8)
    torch.testing.assert_close(result.log_weights, expected, atol=1e-5, rtol=0)


def test_gamma_one_equals_paper_sum_and_gamma_below_one_differs():
    """γ_s = 1: Σ_t (r + V' − V) telescopes to the closed form; γ_s = 0.9 gives neither the paper sum nor G_h."""
    nxt = torch.tensor([[1], [2], [3], [4], [4]])
    reward = torch.tensor([[0.3], [1.1], [-0.4], [0.7], [0.0]])
    values = torch.tensor([0.5, -0.2, 0.9, 0.1, 1.3])
    env = TableEnv(nxt, reward)
    prior = table_prior(env, torch.zeros(5, 1), values)
    r, v = reward.squeeze(-1), values
    for gamma in (1.0, 0.9):
        result = search(env, prior, SearchConfig(num_particles=1, depth=4, gamma=gamma), num_envs=1, state=0)
        stoix = float(result.log_weights[0, 0])
        closed = float(r[:4].sum() + gamma * v[4] - v[0])
        paper = float(sum(r[t] + gamma * v[t + 1] - v[t] for t in range(4)))
        discounted = float(sum(gamma**t * r[t] for t in range(4)) + gamma**4 * v[4] - v[0])
        assert stoix == pytest.approx(closed, abs=1e-6)
        if gamma == 1.0:
            assert stoix == pytest.approx(paper, abs=1e-6)
        else:
            assert abs(stoix - paper) > 1e-2
            assert abs(stoix - discounted) > 1e-2


# 4. resampling ------------------------------------------------------------------------------------------------------
def test_multinomial_resampling_unbiased():
    n, envs = 16, 12_500  # 200k draws
    g = torch.Generator().manual_seed(0)
    log_w = torch.randn(n, generator=g)
    probs = log_w.softmax(-1)
    idx = resample_indices(log_w.expand(envs, n), ETA, torch.Generator().manual_seed(1))
    freq = torch.bincount(idx.flatten(), minlength=n).float() / idx.numel()
    assert float((freq - probs).abs().max()) < 1e-3


def test_minus_inf_weight_never_selected():
    log_w = torch.tensor([[0.0, float("-inf"), 1.0, -1e9]]).expand(5_000, 4)
    idx = resample_indices(log_w, ETA, torch.Generator().manual_seed(0))
    assert not bool(((idx == 1) | (idx == 3)).any())


def test_resample_gathers_next_actions_with_particles():
    """Each state allows exactly one action, so a next action not gathered with its particle is illegal (§6.1)."""
    num_states, num_actions = 12, 3
    g = torch.Generator().manual_seed(3)
    mask = torch.nn.functional.one_hot(torch.randint(0, num_actions, (num_states,), generator=g), num_actions).bool()
    mask[0] = True  # the root allows every action, so particles spread over different states
    env = random_tree(num_states, num_actions, seed=4, mask=mask)
    cfg = SearchConfig(num_particles=16, depth=6, resample_period=1)
    result = search(env, random_prior(env), cfg, num_envs=4, state=0)  # TableEnv raises on any illegal action
    assert bool(result.resampled.all())


def test_search_advantages_frozen_at_first_resample():
    """With p = 1 the advantages are the original root particles' first-step δ, on their pre-resample indices."""
    env = random_tree()
    prior = random_prior(env)
    values = prior.critic(torch.eye(12))
    result = search(env, prior, SearchConfig(num_particles=8, depth=4, resample_period=1), num_envs=2, state=0)
    s, a = env.history[0]
    delta = env.reward[s, a] + values[env.next_state[s, a]] * (~env.terminal[env.next_state[s, a]]) - values[s]
    torch.testing.assert_close(result.advantages, delta.view(2, 8), atol=1e-5, rtol=0)


# 5. period schedule -------------------------------------------------------------------------------------------------
def test_period_equal_depth_resamples_once_at_the_end():
    env = random_tree()
    result = search(env, random_prior(env), SearchConfig(num_particles=8, depth=4, resample_period=4))
    assert result.resampled.tolist() == [[False, False]] * 3 + [[True, True]]
    torch.testing.assert_close(result.weights, torch.full((2, 8), 1 / 8))


def test_period_two_restarts_log_weights():
    """p = 2, h = 3: resample after d = 1; the read-out weight is the last step's δ from v_2 = γ·V(s_2)."""
    env = random_tree()
    prior = random_prior(env)
    values = prior.critic(torch.eye(12))
    result = search(env, prior, SearchConfig(num_particles=8, depth=3, resample_period=2), num_envs=2, state=0)
    assert result.resampled[:, 0].tolist() == [False, True, False]
    s, a = env.history[2]
    nxt = env.next_state[s, a]
    # s is the resampled particles' state at depth 2; none of this tree's states is terminal.
    expected = env.reward[s, a] + values[nxt] - values[s]
    torch.testing.assert_close(result.log_weights, expected.view(2, 8), atol=1e-5, rtol=0)


# 6. degenerate settings ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("depth", "eta"), [(0, 1.0), (4, 1e9)])
def test_prior_recovered_without_weighting(depth, eta):
    env = random_tree()
    prior = random_prior(env)
    pi = prior.params(env.observe(root(env, 1, 0)[0]))[0].softmax(-1)[0]
    result = search(env, prior, SearchConfig(num_particles=16, depth=depth), num_envs=10_000, eta=torch.tensor(eta))
    target = torch.zeros(10_000, 3).scatter_add_(1, result.sampled_actions, result.weights).mean(0)
    assert float((target - pi).abs().sum()) < 0.02
    executed = torch.bincount(result.action, minlength=3).float() / 10_000
    assert float((executed - pi).abs().sum()) < 0.03


def test_single_particle_target_is_one_hot_on_root_sample():
    env = random_tree()
    for resample_period in (1, 4):
        result = search(env, random_prior(env), SearchConfig(num_particles=1, depth=4, resample_period=resample_period))
        torch.testing.assert_close(result.weights, torch.ones(2, 1))
        assert torch.equal(result.action, result.sampled_actions[:, 0])
        assert torch.equal(result.sampled_actions[:, 0], env.history[0][1])


def test_zero_temperature_picks_the_best_particle():
    env = random_tree()
    cfg = SearchConfig(num_particles=8, depth=3, resample_period=100)
    result = search(env, random_prior(env), cfg, num_envs=4, eta=torch.tensor(1e-6))
    best = result.log_weights >= result.log_weights.max(-1, keepdim=True).values - 1e-6  # ties share the mass
    assert bool(((result.weights * best).sum(-1) > 0.999).all())
    chosen = (result.sampled_actions == result.action.unsqueeze(-1)) & best
    assert bool(chosen.any(-1).all())


# 7. analytic E-step target ------------------------------------------------------------------------------------------
def test_bandit_target_matches_analytic_e_step():
    """One state, π = [.5, .3, .2], Q = [0, 1, 2], V = E_π[Q]: E[q̂] → π·exp((Q − V)/η)/Z = [.179, .292, .529]."""
    nxt = torch.tensor([[1, 1, 1], [1, 1, 1]])
    reward = torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]])
    env = TableEnv(nxt, reward, terminal=(1,))
    pi = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.0, 1.0, 2.0])
    prior = table_prior(env, torch.stack([pi.log(), torch.zeros(3)]), torch.tensor([float(pi @ q), 0.0]))
    cfg = SearchConfig(num_particles=4096, depth=1, resample_period=1)
    result = search(env, prior, cfg, num_envs=8, state=0)
    target = torch.zeros(8, 3).scatter_add_(1, result.sampled_actions, result.weights).mean(0)
    analytic = pi * (q - pi @ q).exp()
    analytic = analytic / analytic.sum()
    torch.testing.assert_close(analytic, torch.tensor([0.179, 0.292, 0.529]), atol=1e-3, rtol=0)
    assert float((target - analytic).abs().max()) < 0.01


# 8. determinism -----------------------------------------------------------------------------------------------------
def test_same_seed_identical_and_global_rng_untouched():
    env = random_tree()
    prior = random_prior(env)
    cfg = SearchConfig(num_particles=8, depth=4, resample_mode="ess", root_noise_fraction=0.25)
    before = torch.random.get_rng_state()
    a = search(env, prior, cfg, seed=5, explore=True)
    b = search(env, prior, cfg, seed=5, explore=True)
    c = search(env, prior, cfg, seed=6, explore=True)
    assert torch.equal(torch.random.get_rng_state(), before)
    for field in ("action", "sampled_actions", "weights", "advantages"):
        assert torch.equal(getattr(a, field), getattr(b, field))
    assert not torch.equal(a.sampled_actions, c.sampled_actions)


# 9. masks -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["period", "ess"])
def test_masks_respected_at_every_depth(mode):
    mask = torch.zeros(12, 5, dtype=torch.bool)
    mask[:, 3] = True
    env = random_tree(12, 5, mask=mask)
    cfg = SearchConfig(num_particles=16, depth=4, resample_mode=mode, resample_period=2, root_noise_fraction=0.5)
    result = search(env, random_prior(env), cfg, num_envs=4, explore=True)
    assert all(bool((a == 3).all()) for _, a in env.history)
    assert bool((result.sampled_actions == 3).all())
    assert bool((result.action == 3).all())
    greedy = search(env, random_prior(env), cfg, num_envs=4, greedy=True)
    assert bool((greedy.action == 3).all())


# 10. terminal handling ----------------------------------------------------------------------------------------------
def test_terminated_particle_frozen_after_its_terminal_step():
    """0 → 1 → 2 (terminal, reward 5 on entry) → 3: the δ of d = 1 bootstraps with 0 and nothing is added later."""
    nxt = torch.tensor([[1], [2], [3], [3]])
    reward = torch.tensor([[1.0], [5.0], [7.0], [7.0]])
    values = torch.tensor([2.0, 3.0, 100.0, 100.0])
    env = TableEnv(nxt, reward, terminal=(2,))
    result = search(env, table_prior(env, torch.zeros(4, 1), values), SearchConfig(num_particles=2, depth=4,
                    resample_period=100), num_envs=1, state=0)  # fmt: skip
    # d=0: 1 + V(1) − V(0) = 2; d=1: 5 + 0 − V(1) = 2; afterwards frozen.
    torch.testing.assert_close(result.log_weights, torch.full((1, 2), 4.0))
    assert result.alive[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0]


def test_truncated_particle_bootstraps_from_final_obs():
    nxt = torch.tensor([[1], [2], [2]])
    reward = torch.tensor([[1.0], [1.0], [1.0]])
    values = torch.tensor([0.0, 0.5, 10.0])
    env = TableEnv(nxt, reward, max_steps=2)  # truncates on entering state 2 (after two steps)
    result = search(env, table_prior(env, torch.zeros(3, 1), values), SearchConfig(num_particles=1, depth=3),
                    num_envs=1, state=0)  # fmt: skip
    # d=0: 1 + 0.5 − 0 = 1.5; d=1 (truncated): 1 + V(2)=10 − 0.5 = 10.5; frozen afterwards.
    assert float(result.log_weights[0, 0]) == pytest.approx(12.0)


def test_root_obs_and_state_untouched():
    env = random_tree()
    root_state, root_obs = root(env, 3, 0)
    before = root_state.clone()
    smc_search(env, root_state, root_obs, random_prior(env), SearchConfig(num_particles=4, depth=3), ETA,
               torch.Generator().manual_seed(0))  # fmt: skip
    assert (root_state == before).all()
    assert root_obs.get(keys.OBS, None) is not None


def test_invalid_search_config_names_the_field():
    with pytest.raises(ValueError, match=r"model\.resample_mode='sometimes' is invalid"):
        SearchConfig(resample_mode="sometimes").check()
    with pytest.raises(ValueError, match=r"model\.search_depth=-1"):
        SearchConfig(depth=-1).check()


# root noise ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [0.03, 0.3, 2.0])
def test_gamma_sampler_moments(shape):
    from rl_lightning.algos.spo.prior import gamma_sample

    draws = gamma_sample(torch.full((200_000,), shape), torch.Generator().manual_seed(0))
    assert bool((draws >= 0).all())
    assert float(draws.mean()) == pytest.approx(shape, rel=0.03)
    assert float(draws.var()) == pytest.approx(shape, rel=0.08)  # Gamma(k, 1): mean = var = k


def test_dirichlet_mix_on_probabilities_over_legal_actions():
    env = random_tree(4, 5, mask=torch.tensor([[True, False, True, True, False]] * 4))
    prior = random_prior(env)
    params = prior.params(env.observe(root(env, 50_000, 0)[0]))[0]
    mixed = prior.dirichlet_mix(params, alpha=0.3, fraction=0.25, generator=torch.Generator().manual_seed(0))
    probs = mixed.softmax(-1)
    torch.testing.assert_close(probs.sum(-1), torch.ones(50_000))
    assert float(probs[:, [1, 4]].max()) == 0.0  # illegal actions stay impossible
    expected = 0.75 * params.softmax(-1)[0] + 0.25 * torch.tensor([1, 0, 1, 1, 0]) / 3
    torch.testing.assert_close(probs.mean(0), expected, atol=3e-3, rtol=0)


def test_continuous_root_perturbation_stays_in_bounds():
    from rl_lightning.algos.spo.prior import ActorCriticPrior
    from rl_lightning.envs import Pendulum

    prior = ActorCriticPrior(lambda x: x, lambda x: x, Pendulum().spec)
    action = torch.full((10_000, 1), 1.9)
    moved = prior.perturb(action, 0.5, torch.Generator().manual_seed(0))
    assert bool(((moved >= -2.0) & (moved <= 2.0)).all())
    assert float(moved.mean()) == pytest.approx(0.5 * 1.9, abs=0.05)  # (1 − f)·a + f·E[ε], before clipping


def test_root_noise_is_one_dirichlet_draw_per_env_shared_by_its_particles():
    """Bug 6: all N particles of an env sample their root action from the same noised prior (AlphaZero: one
    Dirichlet draw per root), not from N different ones. With f = 1 the prior is p ~ Dir(α·1_K); two particles of
    one env then pick the same root action with probability E[Σ p_a²] = (α + 1)/(Kα + 1) = 0.84 for α = .05,
    K = 5, whereas per-particle draws make them independent uniform picks (collision rate 1/K = 0.2)."""
    env = random_tree(4, 5)
    prior = table_prior(env, torch.zeros(4, 5), torch.zeros(4))  # uniform prior: any concentration is the noise
    cfg = SearchConfig(num_particles=64, depth=0, dirichlet_alpha=0.05, root_noise_fraction=1.0)
    result = search(env, prior, cfg, num_envs=256, explore=True)
    counts = torch.nn.functional.one_hot(result.sampled_actions, 5).sum(1).float()  # [E, K]
    collision = ((counts * (counts - 1)).sum(-1) / (64 * 63)).mean()
    assert float(collision) == pytest.approx(1.05 / 1.25, abs=0.06)
    # Across envs the noise averages out: every action is the root choice of some env.
    assert bool((counts.argmax(-1).bincount(minlength=5) > 0).all())
    # Without explore (acting for evaluation) there is no noise: uniform picks.
    plain = search(env, prior, cfg, num_envs=256)
    counts = torch.nn.functional.one_hot(plain.sampled_actions, 5).sum(1).float()
    assert float(((counts * (counts - 1)).sum(-1) / (64 * 63)).mean()) == pytest.approx(0.2, abs=0.02)


# precision ----------------------------------------------------------------------------------------------------------
def test_bfloat16_search_runs_the_networks_in_bfloat16_and_keeps_its_outputs_float32():
    from rl_lightning.algos import SPO
    from rl_lightning.envs import BatchedEnv, CartPole

    torch.manual_seed(0)
    module = SPO(env_spec=CartPole().spec, hidden_sizes=(64, 64), num_particles=8, search_depth=3)
    env = BatchedEnv(CartPole(), 4, seed=0)
    obs = env.reset()
    seen: list[torch.dtype] = []
    hooks = [
        net[-1].register_forward_hook(lambda m, i, o: seen.append(o.dtype)) for net in (module.actor, module.critic)
    ]
    results = {}
    for precision in ("float32", "bfloat16"):
        seen.clear()
        config = SearchConfig(num_particles=8, depth=3, precision=precision)
        results[precision] = smc_search(
            env.env, env.state, obs, module.prior, config, torch.tensor(1.0), torch.Generator().manual_seed(0)
        )
        assert set(seen) == {torch.float32 if precision == "float32" else torch.bfloat16}
    for hook in hooks:
        hook.remove()
    fp32, bf16 = results["float32"], results["bfloat16"]
    for field in ("weights", "log_weights", "advantages", "root_value"):
        assert getattr(bf16, field).dtype == torch.float32
    # bfloat16 keeps ~3 significant digits: values agree to that, not bit for bit.
    torch.testing.assert_close(bf16.root_value, fp32.root_value, rtol=2e-2, atol=2e-2)
    assert not torch.equal(bf16.root_value, fp32.root_value)


def test_unknown_search_precision_is_refused_naming_the_field():
    with pytest.raises(ValueError, match=r"model\.search_precision='float16' is invalid.*float32.*bfloat16"):
        SearchConfig(precision="float16").check()
