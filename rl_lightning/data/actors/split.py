"""``SplitCollector``: an actor's envs in two groups, one group stepping while the policy acts for the other.

Sample Factory calls this double-buffered sampling. An env backend that steps outside Python (EnvPool's and
ale-py's C++ thread pools, which release the GIL) runs group A's step on a helper thread while the main thread runs
the policy for group B, and the other way round: per tick the actor waits for ``max(step, act)`` of each group
instead of ``step + act`` of all envs. A backend that steps in Python (Gymnasium's ``SyncVectorEnv``, the torch
envs) holds the GIL and gains nothing.

The split changes when the work happens, not what is collected: group ``k`` is a plain ``Collector`` over its own
``BatchedEnv`` with its own seeds, so a split rollout equals two actors' rollouts side by side (``tests``).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.collector import Collector, Policy


class SplitCollector:
    """Two ``Collector`` groups stepped in turn, each group's env step overlapping the other group's policy call.

    The groups share their finished-episode sums, so ``finished``, ``episode_stats`` and ``last_collect_seconds``
    read as one collector's. ``rollout`` takes one policy per group (a policy may be bound to its group's envs, as
    SPO's search is).

    Args:
        groups: two collectors over disjoint envs, in column order of the rollout.
    """

    def __init__(self, groups: list[Collector]) -> None:
        if len(groups) != 2:
            raise ValueError(f"SplitCollector steps two env groups, got {len(groups)}")
        first, second = groups
        second.finished, second.games, second._game_steps = first.finished, first.games, first._game_steps
        self.groups = groups
        self.finished = first.finished
        self.last_collect_seconds = 0.0
        self._stepper = ThreadPoolExecutor(1, thread_name_prefix="env-step")

    @property
    def num_envs(self) -> int:
        return sum(group.num_envs for group in self.groups)

    @torch.no_grad()
    def rollout(self, policies: list[Policy], num_steps: int, policy_version: int) -> TensorDict:
        """``num_steps`` ticks of both groups; returns their ``[num_steps, num_envs]`` rollouts side by side."""
        start = time.perf_counter()
        (a, b), (act_a, act_b) = self.groups, policies
        for group in self.groups:
            group.begin()
        obs_a, acted_a = a.act(act_a)
        stepping_a = self._step(a, acted_a)
        for tick in range(num_steps):
            obs_b, acted_b = b.act(act_b)  # while group A steps
            out_a = stepping_a.result()
            stepping_b = self._step(b, acted_b)
            a.record(obs_a, acted_a, out_a)
            last = tick == num_steps - 1
            if not last:
                obs_a, acted_a = a.act(act_a)  # while group B steps
            out_b = stepping_b.result()
            if not last:
                stepping_a = self._step(a, acted_a)
            b.record(obs_b, acted_b, out_b)
        batch = torch.cat([a.end(policy_version), b.end(policy_version)], dim=1)
        self.last_collect_seconds = time.perf_counter() - start
        return batch

    def _step(self, group: Collector, acted: TensorDict) -> Future[Any]:
        return self._stepper.submit(_step_without_grad, group, acted[keys.ACTION])

    def episode_stats(self) -> dict[str, torch.Tensor]:
        """Both groups' finished episodes (their sums are shared), as ``Collector.episode_stats``."""
        return self.groups[0].episode_stats()

    @property
    def stat_counts(self) -> dict[str, torch.Tensor]:
        """The counts behind the last ``episode_stats`` means (``CollectorBase.stat_counts``)."""
        return self.groups[0].stat_counts

    def close(self) -> None:
        self._stepper.shutdown(wait=True)  # a step still running finishes before its env is closed
        for group in self.groups:
            group.close()


def _step_without_grad(group: Collector, action: torch.Tensor) -> TensorDict:
    with torch.no_grad():  # grad mode is per thread
        return group.env.step(action)
