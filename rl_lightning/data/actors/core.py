"""``ActorCore``: one actor's envs, collector and acting module, whatever carries its weights and rollouts."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning.data.actors.split import SplitCollector
from rl_lightning.envs.base import BatchedEnv


class ActorCore:
    """Builds an actor from its ``ActorSpec`` and collects rollouts with the weights it is given.

    The process actor (``worker.py``) drives it: it copies published weights into ``weights`` (which aliases the
    module's parameters and buffers), says so with ``loaded``, and calls ``collect``. Another transport (a Ray
    actor) can drive it the same way.

    Args:
        spec: the actor's ``ActorSpec`` (env, seeds, policy recipe, collector recipe).
        beat: called at every env tick (a heartbeat), or ``None``.
    """

    def __init__(self, spec: Any, beat: Callable[[], None] | None = None) -> None:
        self.spec = spec
        self.module = spec.policy.build()
        self.splits = getattr(spec, "env_splits", 1)
        if self.splits == 1:
            self.env = BatchedEnv(spec.env, spec.num_envs, "cpu", spec.env_seed, spec.check_env, spec.check_finite)
            self.collector = spec.recipe.build(self.env, spec.sampling_seed, self.module)
        else:
            self.collector = self._split_collector()
        self.weights = self.module.state_dict()  # aliases the parameters and buffers: copying into it loads them
        self.version = -1
        self._beat = beat
        self._policy: Any = None

    def loaded(self, version: int) -> None:
        """Say that weights of ``version`` were just copied into ``self.weights``."""
        self.version = self.module.updates = self.module.policy_version = version  # the clock a league reads
        self.spec.recipe.before_rollout(self.module)

    def _split_collector(self) -> SplitCollector:
        """Two env groups with the seeds two actors of ``num_envs / 2`` envs would have (``SplitCollector``), each
        with its own acting policy bound to its envs."""
        spec, half = self.spec, self.spec.num_envs // 2
        groups = []
        for k in range(2):
            core = spec.env if k == 0 else copy.deepcopy(spec.env)  # a backend holds its live pool in the core
            env = BatchedEnv(core, half, "cpu", spec.env_seed + k * half, spec.check_env, spec.check_finite)
            groups.append(spec.recipe.build(env, spec.sampling_seed + k * half, self.module))
        self._group_policies = [self._beating(group.env) for group in groups]
        return SplitCollector(groups)

    def _beating(self, env: BatchedEnv) -> Callable[[TensorDict, torch.Generator], TensorDict]:
        policy = self.module.acting_policy(env, deterministic=False, training=True)

        def acting(obs: TensorDict, generator: torch.Generator) -> TensorDict:
            if self._beat is not None:
                self._beat()
            return policy(obs, generator)

        return acting

    def collect(self) -> tuple[TensorDict, dict[str, tuple[float, float]], float]:
        """One rollout with the current weights: ``(batch, {stat: (mean, count behind it)}, collect seconds)``; in
        the spec's ``autocast_dtype`` where it has one (one autocast region per rollout: its cached low-precision
        weights are those just loaded)."""
        dtype = getattr(self.spec, "autocast_dtype", None)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            if self.splits > 1:
                batch = self.collector.rollout(self._group_policies, self.spec.num_steps, self.version)
            else:
                self._policy = self.spec.recipe.policy(self.module, self.env)
                batch = self.collector.rollout(self._acting, self.spec.num_steps, self.version)
        means = self.collector.episode_stats()
        counts = self.collector.stat_counts  # each mean's weight across actors: episodes, games or hands
        stats = {name: (float(value), float(counts[name])) for name, value in means.items()}
        return batch, stats, self.collector.last_collect_seconds

    def _acting(self, obs: TensorDict, generator: torch.Generator) -> TensorDict:
        if self._beat is not None:
            self._beat()  # a hung env stops these beats: whoever watches replaces the actor
        return self._policy(obs, generator)

    def close(self) -> None:
        self.collector.close()


def now() -> float:
    """The heartbeat clock (``time.monotonic``: one clock for every process on the machine)."""
    return time.monotonic()
