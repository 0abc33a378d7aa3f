"""The collector: steps a ``BatchedEnv`` with a module's acting policy and returns time-major transitions."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.collector_base import CollectorBase
from rl_lightning.processes import stop

Policy = Callable[[TensorDict, torch.Generator], TensorDict]

_STEP_KEYS = (keys.REWARD, keys.TERMINATED, keys.TRUNCATED, keys.FINAL_OBS)


class Collector(CollectorBase):
    """Collects ``num_steps × num_envs`` transitions per call and tracks finished episodes.

    Every row of a rollout holds what the agent saw (``obs``, ``is_first``, ``action_mask``), what it did
    (the policy's outputs: ``action``, ``logprob``, ``value``...), what followed (``reward``, ``terminated``,
    ``truncated``, ``final_obs``) and the ``policy_version`` that acted. Episode returns and lengths go into
    sums of finished episodes (``FinishedEpisodes``), synced across ranks when read.

    Args:
        env: the batched env to step (owned by the collector from now on).
        seed: seeds the action-sampling generator.
    """

    live_keys = ("obs",)
    _obs: TensorDict | None

    @torch.no_grad()
    def rollout(self, policy: Policy, num_steps: int, policy_version: int) -> TensorDict:
        """Run ``num_steps`` batched env steps with ``policy``; returns a ``[num_steps, num_envs]`` TensorDict."""
        start = time.perf_counter()
        self.begin()
        for _ in range(num_steps):
            obs, acted = self.act(policy)
            self.record(obs, acted, self.env.step(acted[keys.ACTION]))
        batch = self.end(policy_version)
        self.last_collect_seconds = time.perf_counter() - start
        return batch

    # A rollout in its phases, for a caller that steps the env elsewhere (``SplitCollector``): ``begin``, then per
    # tick ``act``, ``env.step(acted["action"])`` and ``record``, then ``end``.
    def begin(self) -> None:
        """Start a rollout (the first one resets every env)."""
        if self._obs is None:
            self._obs = self.env.reset()
        self._rows: list[dict[str, torch.Tensor | TensorDict]] = []
        self._done_flags: list[torch.Tensor] = []
        self._done_returns: list[torch.Tensor] = []
        self._done_lengths: list[torch.Tensor] = []

    def act(self, policy: Policy) -> tuple[TensorDict, TensorDict]:
        """What the envs show now and what ``policy`` does about it."""
        stop.check()  # a stop request ends the rollout here; the checkpoint is the last update's
        obs = self._obs
        assert obs is not None, "act() before begin()"
        return obs, policy(obs, self.generator)

    def record(self, obs: TensorDict, acted: TensorDict, out: TensorDict) -> None:
        """Keep one tick's transition (``out``: the env step's output for ``acted``) and move the live view on."""
        self.count_games(out)
        row = {**dict(obs.items()), **dict(acted.items())}  # nested TensorDicts (Dict obs) stay whole
        for key in _STEP_KEYS:
            row[key] = out[key]
        self._rows.append(row)
        done = out[keys.TERMINATED] | out[keys.TRUNCATED]
        self._episode_return += out[keys.REWARD]
        self._episode_length += 1
        self._done_flags.append(done)
        self._done_returns.append(self._episode_return.clone())
        self._done_lengths.append(self._episode_length.clone())
        self._episode_return.masked_fill_(done, 0.0)
        self._episode_length.masked_fill_(done, 0.0)
        next_obs = out.select(*obs.keys(include_nested=False), strict=False)
        next_obs[keys.IS_FIRST] = out[keys.IS_FIRST]
        if keys.NEXT_RECURRENT_STATE in acted:  # a recurrent policy's state rides in the live view
            next_obs[keys.RECURRENT_STATE] = acted[keys.NEXT_RECURRENT_STATE]
        self._obs = next_obs

    def end(self, policy_version: int) -> TensorDict:
        """The rollout's ``[num_steps, num_envs]`` transitions, checked, tagged with ``policy_version``."""
        self.finished.update(
            torch.stack(self._done_returns), torch.stack(self._done_lengths), torch.stack(self._done_flags)
        )
        batch = _stack_rows(self._rows, self.env.num_envs, self.env.device)
        self._rows, self._done_flags, self._done_returns, self._done_lengths = [], [], [], []
        self.env.watch(batch)
        self.env.check_outputs()  # NaN/inf from the env: one host sync per rollout, before anyone learns from it
        batch[keys.POLICY_VERSION] = torch.full(
            batch.batch_size, policy_version, dtype=torch.int64, device=self.env.device
        )
        return batch


def _stack_rows(rows: list[dict[str, torch.Tensor | TensorDict]], num_envs: int, device: torch.device) -> TensorDict:
    stacked = {key: torch.stack([row[key] for row in rows]) for key in rows[0]}
    return TensorDict(stacked, batch_size=[len(rows), num_envs], device=device)
