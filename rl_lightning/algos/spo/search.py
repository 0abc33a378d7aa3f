"""Sequential Monte Carlo search of SPO (Macfarlane et al., NeurIPS 2024, §4.2, Alg. 1) on functional env states.

For each of ``E`` real envs, ``N`` particles start from a copy of the env's state with a root action sampled
from the prior π_θ, then take ``depth`` steps in the env (the model), proposing each next action from π_θ.
A particle's log-weight is the sum of its one-step TD advantages since the last resample,

    w ← w + δ_t,   δ_t = r_t + γ_s·(1 − term_t)·V(s'_t) − v_t,   v_t = the previous step's bootstrap (V(s_0) at d=0)

so with no resample in a window ``w = Σ r + γ_s V(s_k) − v_start`` (spo.md §1.3). Weights are normalised
as ``softmax(w / η)``; particles are resampled (multinomial, per env) every ``resample_period`` steps or when
the effective sample size falls below ``ess_threshold · N``, and the target q̂(a|s) is the weighted
histogram of the survivors' root actions. Particles that terminate or truncate stop accumulating weight
(their states keep stepping through the env's auto-reset, which is cheaper than branching; nothing they
do afterwards is counted). Unlike the reference code, the next actions are gathered with the particles on
resample (spo.md §6.1), the search advantages are masked after termination (§6.3) and frozen at an env's
first resample (§6.5, App. D.1). In a two-seat zero-sum game the particles are scored from the root's seat
to act: its reward and its side of every value (``seats.py``); the prior proposes every seat's moves.

Timing of one search step (particle ``i``, depth ``d``)::

    state_d ──a_d──▶ env.step_state ──▶ r_d, term_d, trunc_d, final_obs_d (→ V), obs_d+1 (→ a_d+1 ~ π)
                                     └─ w_i += δ_d·alive_i ;  alive_i &= ¬(term_d ∨ trunc_d) ;  resample?

Every env state the search creates is released (snapshot ids of the Gymnasium adapter), also on errors. Registry
envs are copied once per particle and then stepped in place (a copy per particle and step cost Connect Four's
search most of its time: ``benchmarks/games/connect_four_search.py --spo-profile``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.spo.draws import GeneratorDraws, NoiseDraws, NoiseSource
from rl_lightning.algos.spo.prior import ActorCriticPrior
from rl_lightning.algos.spo.seats import searching_seats, seat_step_score
from rl_lightning.envs.base import TorchEnv, data_device
from rl_lightning.errors import check_fields

RESAMPLE_MODES = ("period", "ess")
#: Precisions the search's network forwards may run in (``bfloat16``: autocast, float32 accumulation and outputs).
SEARCH_PRECISIONS = {"float32": None, "bfloat16": torch.bfloat16}


@dataclass
class SearchConfig:
    """SMC search settings (names as in the SPO paper and Stoix; defaults: Stoix discrete).

    Attributes:
        num_particles: particles ``N`` per env.
        depth: search depth ``h`` (0: the target is ``N`` prior samples, uniformly weighted).
        resample_mode: ``"period"`` (every ``resample_period`` steps, all envs) or ``"ess"`` (per env, when
            ESS < ``ess_threshold · N``).
        resample_period: steps between resamples in ``period`` mode (``depth``: one resample, at the end).
        ess_threshold: fraction of ``N`` below which ``ess`` mode resamples an env.
        gamma: search discount γ_s (1.0 as in the paper's Â; below 1 see spo.md §1.3).
        gae_lambda: search λ_s for the per-particle advantages the temperature dual is trained on.
        dirichlet_alpha: root Dirichlet concentration (discrete actions).
        root_noise_fraction: root exploration mix ``f`` (discrete: Dirichlet on probabilities; continuous:
            ``(1 − f)·a + f·N(0, 1)``, clipped); applied when acting for training only.
        precision: ``float32``, or ``bfloat16`` to run the actor's and critic's matmuls and convolutions under
            ``torch.autocast`` (inputs rounded to bfloat16, float32 accumulation; values and logits come back as
            float32, so weights, resampling and the target stay float32). Training is unaffected.
    """

    num_particles: int = 16
    depth: int = 4
    resample_mode: str = "period"
    resample_period: int = 4
    ess_threshold: float = 0.5
    gamma: float = 1.0
    gae_lambda: float = 1.0
    dirichlet_alpha: float = 0.03
    root_noise_fraction: float = 0.0
    precision: str = "float32"

    def check(self, prefix: str = "model") -> None:
        """Raise a one-line ``ConfigError`` naming the first invalid field."""
        checks = [
            ("num_particles", self.num_particles >= 1, "use >= 1, e.g. 16"),
            ("search_depth", self.depth >= 0, "use >= 0, e.g. 4"),
            ("resample_mode", self.resample_mode in RESAMPLE_MODES, f"choose one of {list(RESAMPLE_MODES)}"),
            ("resample_period", self.resample_period >= 1, "use >= 1 (e.g. the search depth)"),
            ("ess_threshold", 0.0 <= self.ess_threshold <= 1.0, "use a fraction in [0, 1], e.g. 0.5"),
            ("search_gamma", 0.0 <= self.gamma <= 1.0, "use a discount in [0, 1] (default 1.0)"),
            ("search_gae_lambda", 0.0 <= self.gae_lambda <= 1.0, "use λ in [0, 1] (default 1.0)"),
            ("dirichlet_alpha", self.dirichlet_alpha > 0, "use a positive concentration, e.g. 0.03"),
            ("root_noise_fraction", 0.0 <= self.root_noise_fraction <= 1.0, "use a fraction in [0, 1]"),
            ("search_precision", self.precision in SEARCH_PRECISIONS, f"choose one of {list(SEARCH_PRECISIONS)}"),
        ]
        values = {**vars(self), "search_depth": self.depth, "search_gamma": self.gamma}
        values.update(search_gae_lambda=self.gae_lambda, search_precision=self.precision)
        check_fields(checks, values, prefix)


@dataclass
class SearchResult:
    """What one search returns for ``E`` envs and ``N`` particles.

    Attributes:
        action: executed action ``[E(, D)]``, drawn from the target (or its greedy choice).
        sampled_actions: the survivors' root actions ``[E, N(, D)]`` (the target's support).
        weights: their normalised weights ``softmax(w / η)`` ``[E, N]`` (the target q̂).
        log_weights: the unnormalised log-weights ``w`` ``[E, N]`` (0 right after a resample).
        advantages: per-particle search advantages ``[E, N]`` for the temperature dual (stop-grad data).
        root_value: ``V(s_0)`` ``[E]``.
        ess: effective sample size before each resample decision ``[depth, E]``.
        alive: fraction of particles not yet terminated or truncated after each step ``[depth, E]``.
        resampled: whether each env resampled at each depth ``[depth, E]``.
    """

    action: torch.Tensor
    sampled_actions: torch.Tensor
    weights: torch.Tensor
    log_weights: torch.Tensor
    advantages: torch.Tensor
    root_value: torch.Tensor
    ess: torch.Tensor
    alive: torch.Tensor
    resampled: torch.Tensor


def effective_sample_size(weights: torch.Tensor) -> torch.Tensor:
    """``1 / Σ_i w̄_i²`` over the last dim of normalised weights: ``N`` when uniform, 1 when one-hot."""
    return weights.square().sum(-1).reciprocal()


@torch.no_grad()
def smc_search(
    env: TorchEnv,
    root_state: TensorDict,
    root_obs: TensorDict,
    prior: ActorCriticPrior,
    config: SearchConfig,
    temperature: torch.Tensor,
    generator: torch.Generator | None,
    explore: bool = False,
    greedy: bool = False,
    noise: NoiseDraws | None = None,
) -> SearchResult:
    """Run SMC search from ``root_state`` (``E`` envs; left untouched) and read out the target.

    Args:
        env: the functional env used as a perfect model: ``step_state(..., inplace=False)`` for tensor states; an
            env whose states live in a registry (``state_is_tensors = False``: game engines, Gymnasium copies)
            is copied once per particle (``snapshot``) and stepped in place, a resample releasing the states
            it drops (survivors sharing a state are copied by the next in-place step).
        root_state: the real envs' states ``[E]``.
        root_obs: their observations (``obs``, ``action_mask``) ``[E]``.
        prior: proposal policy and bootstrap critic (the online networks).
        config: search settings.
        temperature: η > 0 (scalar tensor).
        generator: the only source of randomness (roots, proposals, model noise, resampling, read-out).
        explore: add root noise (``config.root_noise_fraction``), for acting in training.
        greedy: execute argmax_a q̂(a) (discrete) or the highest-weight particle (continuous) instead of a draw.
        noise: every draw made beforehand (``NoiseDraws.draw``; ``env`` a ``NoiseSteppedEnv``): ``generator`` is
            then unused and the search is a pure function of its inputs (what ``compiled_search`` compiles).
    """
    draws = GeneratorDraws(generator) if noise is None else NoiseSource(noise)
    low = SEARCH_PRECISIONS[config.precision]
    with torch.autocast(data_device(root_obs).type, dtype=low or torch.bfloat16, enabled=low is not None):
        return _search(env, root_state, root_obs, prior, config, temperature, draws, explore, greedy)


class _Particles(NamedTuple):
    """What travels with each of the ``E * N`` particles (flat ``[E * N]``) and is gathered when they resample."""

    action: torch.Tensor  # the action each takes next
    root_action: torch.Tensor  # the root action it descends from: what the target q̂ is a histogram of
    value: torch.Tensor  # v_t: the last step's bootstrap (V(s_0) at d=0)
    alive: torch.Tensor  # not yet terminated or truncated: only live particles accumulate weight
    searcher: torch.Tensor | None  # games: the seat to act at the root, whose side every score takes


def _search(
    env: TorchEnv,
    root_state: TensorDict,
    root_obs: TensorDict,
    prior: ActorCriticPrior,
    config: SearchConfig,
    temperature: torch.Tensor,
    draws: GeneratorDraws | NoiseSource,
    explore: bool,
    greedy: bool,
) -> SearchResult:
    n, depth = config.num_particles, config.depth
    num_envs = root_state.batch_size[0]
    device = data_device(root_obs)  # root_obs.device is None when the TensorDict was built without one
    particles, root_value = _root_particles(prior, root_obs, config, draws, explore)
    offsets = torch.arange(num_envs, device=device).unsqueeze(-1) * n  # [E, 1]
    state = root_state[torch.arange(num_envs, device=device).repeat_interleave(n)]
    # Registry envs (game engines, Gymnasium copies): one copy per particle, then every step in place; tensor states
    # step functionally (a copy there is a cheap batched op, and compiled searches need the pure form).
    in_place = not env.state_is_tensors and isinstance(draws, GeneratorDraws)
    log_w = torch.zeros(num_envs, n, device=device)
    advantages = torch.zeros(num_envs, n, device=device)
    adv_open = torch.ones(num_envs, 1, device=device)  # 0 after an env's first resample
    ess, alive_frac, resampled = [], [], []
    owned: TensorDict | None = None  # the search's own states (released when replaced)
    try:
        if in_place and depth > 0:
            state = owned = env.snapshot(state)
        for d in range(depth):
            next_state, out = draws.step(env, d, state, particles.action, inplace=True) if in_place else draws.step(
                env, d, state, particles.action)  # fmt: skip
            if owned is not None and not in_place:
                env.release(owned)
            owned = next_state  # in place: the stepped states and the copies made for particles sharing one
            reward, bootstrap = _step_score(prior, out, particles.searcher, config.gamma)
            delta = torch.where(particles.alive, reward + bootstrap - particles.value, 0.0).view(num_envs, n)
            log_w = log_w + delta
            advantages = advantages + (config.gamma * config.gae_lambda) ** d * adv_open * delta
            alive = particles.alive & ~(out[keys.TERMINATED] | out[keys.TRUNCATED])
            next_action = particles.action  # the last step's proposals would never be applied
            if d + 1 < depth:
                next_obs = out.select(keys.OBS, keys.ACTION_MASK, strict=False)
                next_action = draws.proposal(prior, d, prior.params(next_obs))
            particles = _Particles(next_action, particles.root_action, bootstrap, alive, particles.searcher)

            ess_d = effective_sample_size((log_w / temperature).softmax(-1))
            due = _resample_due(config, d, ess_d)
            ess.append(ess_d)
            alive_frac.append(alive.view(num_envs, n).float().mean(-1))
            if due is None:
                resampled.append(torch.zeros(num_envs, dtype=torch.bool, device=device))
                state = next_state
                continue
            resampled.append(due.expand(num_envs))
            flat = _survivors(draws, d, log_w, temperature, due, offsets)
            state = next_state[flat]
            if in_place:  # the particles no survivor copies are freed now; survivors sharing a state fork next step
                _release_dropped(env, next_state, flat)
                owned = state
            particles = _gather(particles, flat)
            log_w = torch.where(due.unsqueeze(-1), torch.zeros_like(log_w), log_w)
            adv_open = adv_open * (~due).unsqueeze(-1)
    finally:
        if owned is not None:
            env.release(owned)

    return _read_out(
        prior, particles.root_action, log_w, advantages, root_value, temperature, draws, greedy,
        _stack(ess, num_envs, device), _stack(alive_frac, num_envs, device), _stack(resampled, num_envs, device),
    )  # fmt: skip


def _root_particles(
    prior: ActorCriticPrior,
    root_obs: TensorDict,
    config: SearchConfig,
    draws: GeneratorDraws | NoiseSource,
    explore: bool,
) -> tuple[_Particles, torch.Tensor]:
    """The ``E * N`` particles at the root, each with a root action from the prior, and ``V(s_0)`` ``[E]``."""
    n = config.num_particles
    root_value = prior.value(root_obs[keys.OBS])
    root_actions = _root_actions(prior, root_obs, config, draws, explore)
    searcher = searching_seats(root_obs, n) if prior.spec.num_seats > 1 else None  # games: score from root's seat
    alive = torch.ones(root_obs.batch_size[0] * n, dtype=torch.bool, device=data_device(root_obs))
    return _Particles(root_actions, root_actions, root_value.repeat_interleave(n), alive, searcher), root_value


def _step_score(
    prior: ActorCriticPrior, out: TensorDict, searcher: torch.Tensor | None, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """A step's reward and the discounted value it bootstraps from (0 after termination): the searching seat's own,
    in a game."""
    if searcher is None:
        return out[keys.REWARD], (~out[keys.TERMINATED]) * gamma * prior.value(out[keys.FINAL_OBS])
    return seat_step_score(prior.value, out, searcher, gamma)


def _survivors(
    draws: GeneratorDraws | NoiseSource,
    d: int,
    log_w: torch.Tensor,
    temperature: torch.Tensor,
    due: torch.Tensor,
    offsets: torch.Tensor,
) -> torch.Tensor:
    """Flat indices ``[E * N]`` of the particles each slot continues from: resampled in the envs ``due`` (a bool
    ``[E]`` or a scalar), kept in the others."""
    n = log_w.shape[-1]
    idx = draws.resample(d, log_w, temperature)
    idx = torch.where(due.unsqueeze(-1), idx, torch.arange(n, device=log_w.device))
    return (idx + offsets).reshape(-1)


def _release_dropped(env: TorchEnv, states: TensorDict, flat: torch.Tensor) -> None:
    """Release the registry states of the particles that no survivor continues from."""
    dropped = torch.ones(states.batch_size[0], dtype=torch.bool, device=flat.device)
    dropped[flat] = False
    env.release(states[dropped])


def _gather(particles: _Particles, flat: torch.Tensor) -> _Particles:
    searcher = None if particles.searcher is None else particles.searcher[flat]
    return _Particles(
        particles.action[flat], particles.root_action[flat], particles.value[flat], particles.alive[flat], searcher
    )


def _root_actions(
    prior: ActorCriticPrior,
    root_obs: TensorDict,
    config: SearchConfig,
    draws: GeneratorDraws | NoiseSource,
    explore: bool,
) -> torch.Tensor:
    """``N`` prior samples per env, ``[E·N(, D)]`` (env ``e`` owns rows ``e·N … e·N + N − 1``), with root noise.

    Discrete root noise is one Dirichlet draw per env, mixed into that env's prior before it is repeated over
    the particles: every particle of a root samples from the same noised prior (AlphaZero's root noise).
    Continuous noise perturbs each sampled action (spo.md §1.2).
    """
    noisy = explore and config.root_noise_fraction > 0
    params = prior.params(root_obs)
    fraction = config.root_noise_fraction
    if noisy and prior.spec.discrete:
        params = (prior.dirichlet_mix_with(params[0], draws.dirichlet(params[0], config.dirichlet_alpha), fraction),)
    actions = draws.root(prior, prior.repeat(params, config.num_particles))
    if noisy and not prior.spec.discrete:
        actions = prior.perturb_with(actions, draws.perturbation(actions), fraction)
    return actions


def _resample_due(config: SearchConfig, d: int, ess: torch.Tensor) -> torch.Tensor | None:
    """Per-env bool ``[E]`` (or ``[1]``) of whether to resample after step ``d``; ``None`` when none can."""
    if config.num_particles == 1:
        return None  # a single particle always selects itself
    if config.resample_mode == "period":
        if (d + 1) % config.resample_period != 0:
            return None
        return torch.ones(1, dtype=torch.bool, device=ess.device)
    return ess < config.ess_threshold * config.num_particles


def _read_out(
    prior: ActorCriticPrior,
    root_actions: torch.Tensor,
    log_w: torch.Tensor,
    advantages: torch.Tensor,
    root_value: torch.Tensor,
    temperature: torch.Tensor,
    draws: GeneratorDraws | NoiseSource,
    greedy: bool,
    ess: torch.Tensor,
    alive: torch.Tensor,
    resampled: torch.Tensor,
) -> SearchResult:
    num_envs, n = log_w.shape
    logits = log_w / temperature
    weights = logits.softmax(-1)
    sampled = root_actions.view(num_envs, n, *root_actions.shape[1:])
    if greedy and prior.spec.discrete:
        histogram = torch.zeros(num_envs, prior.spec.num_actions, device=weights.device)
        histogram.scatter_add_(1, sampled, weights)
        action = histogram.argmax(-1)
    else:
        choice = weights.argmax(-1) if greedy else draws.readout(logits)
        action = sampled[torch.arange(num_envs, device=weights.device), choice]
    return SearchResult(action, sampled, weights, log_w, advantages, root_value, ess, alive, resampled)


def _stack(rows: list[torch.Tensor], num_envs: int, device: torch.device) -> torch.Tensor:
    if not rows:
        return torch.empty(0, num_envs, device=device)
    return torch.stack([r.float() if r.dtype != torch.bool else r for r in rows])
