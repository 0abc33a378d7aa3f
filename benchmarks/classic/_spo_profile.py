"""``benchmarks/classic/spo.py --profile``: where one SMC search's time goes, and where a fit's time goes.

1. **One search, piece by piece.** Each piece of ``smc_search`` is timed alone, at the shapes one search gives it
   (``E`` envs × ``N`` particles × ``depth``), as many times as one search calls it: the critic forward (the root's
   ``V(s_0)`` on ``E`` rows, then ``V(final_obs)`` on ``E·N`` rows per step), the actor forward and the sampling
   (the root draws, then one proposal per step but the last), the env step (``step_state(inplace=False)``), the
   resampling (multinomial draw and the gathers of states, actions and weights) and the TensorDict work around
   them (the root states repeated per particle, the observation ``select``). The whole search is timed the same
   way; what the pieces do not cover (weights, ESS, masks, the read-out, Python) is the last row.
2. **A fit**: ``configs/spo.yaml`` under cProfile (``_profile.profile_fit``): collection (search, env step),
   replay sampling, the gradient steps (forward and losses, backward, optimiser), target updates, logging.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import lightning.pytorch as pl
import torch
from _profile import Part, profile_fit
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import SPO
from rl_lightning.algos.spo import draws
from rl_lightning.algos.spo import search as smc
from rl_lightning.algos.spo.prior import ActorCriticPrior
from rl_lightning.callbacks import Evaluation
from rl_lightning.data.collector import Collector
from rl_lightning.data.replay import ReplayRing
from rl_lightning.envs import CartPole
from rl_lightning.envs.base import BatchedEnv, TorchEnv
from rl_lightning.objectives import spo as spo_losses


def _per_call(fn: Callable[[], object], calls: int) -> float:
    """Best seconds per call of ``fn`` over three rounds of ``calls`` calls (after a warm-up)."""
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


@torch.no_grad()
def search_breakdown(num_envs: int = 16, searches: int = 100) -> None:
    """Print one search's time per piece, each timed alone at the search's own shapes and call counts."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = SPO(env_spec=CartPole().spec)
    module.eval()
    config = module.search_config
    n, depth = config.num_particles, config.depth
    rows = num_envs * n
    env = BatchedEnv(CartPole(), num_envs, "cpu", seed=0)
    obs = env.reset()
    prior: ActorCriticPrior = module.prior
    core: TorchEnv = env.env
    g = torch.Generator().manual_seed(1)
    policy = module.acting_policy(env, deterministic=False, training=True)
    temperature = module.search_temperature()

    repeat = torch.arange(num_envs).repeat_interleave(n)
    states = env.state[repeat]
    actions = torch.randint(0, 2, (rows,), generator=g)
    _, step_out = core.step_state(states, actions, g, inplace=False)
    many = TensorDict({keys.OBS: step_out[keys.OBS]}, [rows])
    params = prior.params(many)
    root_params = prior.params(obs)
    log_w = torch.randn(num_envs, n, generator=g)
    offsets = torch.arange(num_envs).unsqueeze(-1) * n

    def resample() -> None:
        flat = (draws.resample_indices(log_w, temperature, g) + offsets).reshape(-1)
        states[flat], actions[flat], log_w.reshape(-1)[flat], actions[flat]

    resamples = sum(1 for d in range(depth) if (d + 1) % config.resample_period == 0) if n > 1 else 0
    pieces = [
        ("critic forward", 0.0, None),
        ("  root V(s_0) on E rows", _per_call(lambda: prior.value(obs[keys.OBS]), searches), 1),
        ("  V(final_obs) on E·N rows", _per_call(lambda: prior.value(step_out[keys.FINAL_OBS]), searches), depth),
        ("actor forward", 0.0, None),
        ("  root π(s_0) on E rows", _per_call(lambda: prior.params(obs), searches), 1),
        ("  proposals π(s_d) on E·N rows", _per_call(lambda: prior.params(many), searches), depth - 1),
        ("sampling", 0.0, None),
        ("  root draws, N per env", _per_call(lambda: prior.sample(prior.repeat(root_params, n), g), searches), 1),
        ("  proposal draws on E·N rows", _per_call(lambda: prior.sample(params, g), searches), depth - 1),
        ("env step (step_state, E·N rows)", _per_call(lambda: core.step_state(states, actions, g), searches), depth),
        ("resampling (draw + gathers)", _per_call(resample, searches), resamples),
        ("TensorDict work", 0.0, None),
        ("  root states repeated per particle", _per_call(lambda: env.state[repeat], searches), 1),
        (
            "  next observations select",
            _per_call(lambda: step_out.select(keys.OBS, keys.ACTION_MASK, strict=False), searches),
            depth - 1,
        ),  # fmt: skip
    ]
    whole = _per_call(lambda: policy(obs, g), searches)
    print(f"\n== One SMC search on CartPole, E = {num_envs} envs × N = {n} particles × depth {depth} (1 thread) ==")
    print(f"  {'piece (each timed alone at the search shapes)':<44} {'calls':>5} {'µs/call':>9} {'µs/search':>10} "
          f"{'share':>6}")  # fmt: skip
    covered = 0.0
    for label, seconds, calls in pieces:
        if calls is None:
            print(f"  {label}")
            continue
        total = seconds * calls
        covered += total
        print(f"  {label:<44} {calls:>5} {seconds * 1e6:>9.1f} {total * 1e6:>10.1f} {total / whole:>6.1%}")
    rest = whole - covered
    print(f"  {'the rest (weights, ESS, masks, read-out, Python)':<44} {'':>5} {'':>9} {rest * 1e6:>10.1f} "
          f"{rest / whole:>6.1%}")  # fmt: skip
    rate = rows * depth / whole
    print(f"  {'whole search (acting_policy, training=True)':<44} {'':>5} {'':>9} {whole * 1e6:>10.1f} {1:>6.0%}")
    print(f"  = {rate:,.0f} particle-steps/s")
    env.close()


FIT_PARTS = [
    Part("collection (Collector.rollout)", [Collector.rollout]),
    Part("search (smc_search)", [smc.smc_search], 1),
    Part("critic forward (prior.value)", [ActorCriticPrior.value], 2),
    Part("actor forward (prior.params)", [ActorCriticPrior.params], 2),
    Part("sampling (prior.sample)", [ActorCriticPrior.sample], 2),
    Part("env step (step_state)", [CartPole.step_from_noise], 2),
    Part("resampling draw", [draws.resample_indices], 2),
    Part("replay (ReplayRing.add, sample_sequences)", [ReplayRing.add, ReplayRing.sample_sequences]),
    Part("gradient steps (SPO.update)", [SPO.update]),
    Part("forward and losses", [SPO.losses], 1),
    Part("policy and dual losses", [spo_losses.spo_discrete_policy_loss], 2),
    Part("critic loss and targets", [SPO._critic_terms], 2),
    Part("logging (SPO._log_update)", [SPO._log_update]),
    Part("evaluation callback", [Evaluation.evaluate]),
    Part("checkpoints", [pl.Trainer.save_checkpoint]),
]


def profile(extra: list[str] | None = None, config: str = "spo.yaml") -> None:
    search_breakdown(16)
    search_breakdown(64, searches=30)
    profile_fit(config, FIT_PARTS, updates=20, extra=extra)
