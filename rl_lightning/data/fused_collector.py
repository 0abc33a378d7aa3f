"""``FusedCollector``: the collector whose tick is one ``fused_step`` call, eager or ``torch.compile``d."""

from __future__ import annotations

import time
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.collector_base import CollectorBase
from rl_lightning.data.fused_step import (
    LENGTH_SUM,
    RETURN_SUM,
    Carry,
    compile_step,
    fused_step,
    require_fusable,
    tick_outputs,
)
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.processes import stop


class FusedCollector(CollectorBase):
    """Collects ``num_steps × num_envs`` transitions per call with one fused step per tick (docs/guides/speed.md).

    The rollout has ``Collector``'s layout (``obs``, ``is_first``, ``action_mask`` where the env has one, the
    policy's ``action``/``logprob``/``value``, ``reward``, ``terminated``, ``truncated``, ``final_obs``,
    ``policy_version``), the same episode statistics, NaN/inf watch and checkpoint state. It needs a module that
    acts from pre-drawn noise and an env that steps from it (``require_fusable``).

    Randomness: each rollout draws its noise in one block per generator, ``[T, B, ...]`` from ``generator``
    (sampling) and from the env's generator (auto-resets), before the first tick; the same seeds give the same
    rollouts. Against the per-step ``Collector``: on CPU a block of uniform (or integer) draws is the same stream as
    ``T`` per-step draws, so with ``compile=False`` this collector reproduces ``Collector`` bit for bit for Discrete
    actions on CartPole and Catch (tested); torch's CPU normal sampler fills a block differently from row-by-row
    draws, so Box actions (Pendulum) follow a different stream (on CUDA, with Philox counters, expect no block to
    match per-step draws; not tested here). With
    ``compile=True`` the results agree with the eager fused step to float tolerance (inductor fuses and reorders
    float ops; a sampled action could differ where two perturbed logits tie within that tolerance).

    The first compiled call compiles (``compile_seconds`` records it; inductor's on-disk graph cache makes later
    processes faster). A run must keep its shapes, grad mode and the module's train/eval mode to avoid recompiles.

    Args:
        env: the batched env to step (owned by the collector from now on).
        seed: seeds the action-sampling generator.
        compile: run the step under ``torch.compile(fullgraph=True, dynamic=False)``.
    """

    live_keys = ("obs",)
    _obs: TensorDict | None

    def __init__(self, env: BatchedEnv, seed: int = 0, compile: bool = False) -> None:
        super().__init__(env, seed)
        self.compile = compile
        self.compile_seconds = 0.0
        self._step: Any = None
        self._step_module: Any = None
        self._row_specs: dict[str, tuple[torch.Size, torch.dtype]] | None = None

    def step_function(self, module: Any) -> Any:
        """The tick ``(carry, store, act_noise, env_noise) -> None`` for ``module``, built (and compiled) once."""
        if self._step_module is not module:
            require_fusable(module, self.env.env, self.env.check)
            env = self.env.env

            def step(carry: Carry, store: dict[str, torch.Tensor], act: torch.Tensor, noise: torch.Tensor) -> None:
                fused_step(module, env, carry, store, act, noise)

            self._step = compile_step(step, self.env.device) if self.compile else step
            self._step_module = module
            self._row_specs = None
            self.compile_seconds = 0.0
        return self._step

    @torch.no_grad()
    def rollout(self, module: Any, num_steps: int, policy_version: int) -> TensorDict:
        """Run ``num_steps`` fused ticks with ``module``'s ``act_from_noise``; returns a ``[num_steps, num_envs]``
        TensorDict."""
        start = time.perf_counter()
        step = self.step_function(module)
        if self._obs is None:
            self._obs = self.env.reset()
        lead = (num_steps, self.num_envs)
        act_noise = module.act_noise(self.generator, lead, self.env.device)
        env_noise = self.env.env.step_noise(self.env.generator, lead)
        carry = self._carry()
        store = self._allocate(module, carry, act_noise[0], env_noise[0], num_steps)
        first_compile = self.compile and self.compile_seconds == 0.0
        for _ in range(num_steps):
            stop.check()  # a stop request ends the rollout here; the checkpoint is the last update's
            step(carry, store, act_noise, env_noise)
            if first_compile:  # the first compiled call compiles; the rest of the rollout is timed with the rollout
                self.compile_seconds = time.perf_counter() - start
                first_compile = False
        self._keep(carry)
        episode_return, episode_length = store.pop(RETURN_SUM), store.pop(LENGTH_SUM)
        batch = TensorDict(store, batch_size=list(lead), device=self.env.device)
        self.finished.update(episode_return, episode_length, batch[keys.TERMINATED] | batch[keys.TRUNCATED])
        self.env.watch(batch)
        self.env.check_outputs()  # NaN/inf from the env: one host sync per rollout, before anyone learns from it
        version = torch.full(batch.batch_size, policy_version, dtype=torch.int64, device=batch.device)
        batch[keys.POLICY_VERSION] = version
        self.last_collect_seconds = time.perf_counter() - start
        return batch

    def _carry(self) -> Carry:
        """Private copies of the live view, env state and open episodes (no two carry tensors share memory)."""
        assert self._obs is not None
        assert self.env.state is not None
        return {
            "view": {key: value.clone() for key, value in self._obs.items()},
            "state": {key: value.clone() for key, value in self.env.state.items()},
            "episode_return": self._episode_return.clone(),
            "episode_length": self._episode_length.clone(),
            "tick": torch.zeros(1, dtype=torch.int64, device=self.env.device),
        }

    def _keep(self, carry: Carry) -> None:
        """Make the carry after the last tick the collector's live view, env state and open episodes."""
        device, batch = self.env.device, [self.num_envs]
        self._obs = TensorDict(carry["view"], batch_size=batch, device=device)
        self.env.state = TensorDict(carry["state"], batch_size=batch, device=device)
        self._episode_return = carry["episode_return"]
        self._episode_length = carry["episode_length"]

    def _allocate(
        self, module: Any, carry: Carry, act_noise: torch.Tensor, env_noise: torch.Tensor, num_steps: int
    ) -> dict[str, torch.Tensor]:
        """Empty ``[num_steps, B, ...]`` store tensors, shaped like one tick's row (found once by a side-effect-free
        eager tick)."""
        if self._row_specs is None:
            row = tick_outputs(module, self.env.env, carry, act_noise, env_noise)[0]
            self._row_specs = {key: (value.shape, value.dtype) for key, value in row.items()}
        device = self.env.device
        return {
            key: torch.empty((num_steps, *shape), dtype=dtype, device=device)
            for key, (shape, dtype) in self._row_specs.items()
        }
