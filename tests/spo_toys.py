"""Tiny deterministic "model envs" with known tables, and fixed priors, for exact SMC search tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.spo.prior import ActorCriticPrior
from rl_lightning.envs.base import EnvSpec, TorchEnv


class TableEnv(TorchEnv):
    """States ``0..S-1``; ``next[s, a]``, ``reward[s, a]``; terminates on entering a state in ``terminal``.

    Observation: one-hot state. Optional ``mask[s]`` (bool ``[S, A]``); ``strict`` raises on a masked action,
    so a search that applies an illegal action anywhere fails loudly. ``max_steps`` truncates (0: never).
    Every stepped action is recorded in ``history`` (state, action) for inspection.
    """

    def __init__(
        self,
        next_state: torch.Tensor,
        reward: torch.Tensor,
        terminal: tuple[int, ...] = (),
        mask: torch.Tensor | None = None,
        max_steps: int = 0,
        start: int = 0,
        strict: bool = True,
    ) -> None:
        self.next_state, self.reward = next_state, reward.float()
        num_states, num_actions = next_state.shape
        self.terminal = torch.zeros(num_states, dtype=torch.bool)
        self.terminal[list(terminal)] = True
        self.mask, self.max_steps, self.start, self.strict = mask, max_steps, start, strict
        self.spec = EnvSpec(
            name="Table", obs_shape=(num_states,), discrete=True, num_actions=num_actions,
            has_action_mask=mask is not None, max_episode_steps=max_steps,
        )  # fmt: skip
        self.history: list[tuple[torch.Tensor, torch.Tensor]] = []

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        s = torch.full((num,), self.start, dtype=torch.int64)
        return TensorDict({"s": s, "t": torch.zeros(num, dtype=torch.int64)}, batch_size=[num])

    def _view(self, s: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {keys.OBS: F.one_hot(s, self.spec.obs_shape[0]).float()}
        if self.mask is not None:
            out[keys.ACTION_MASK] = self.mask[s]
        return out

    def observe(self, state: TensorDict) -> TensorDict:
        return TensorDict(self._view(state["s"]), batch_size=state.batch_size)

    def step_state(self, state, action, generator, inplace=False):
        s = state["s"]
        if self.strict and self.mask is not None and not bool(self.mask[s, action].all()):
            raise AssertionError(f"masked action applied: states {s.tolist()} actions {action.tolist()}")
        self.history.append((s.clone(), action.clone()))
        nxt = self.next_state[s, action]
        reward = self.reward[s, action]
        terminated = self.terminal[nxt]
        t = state["t"] + 1
        truncated = (t >= self.max_steps) & ~terminated if self.max_steps else torch.zeros_like(terminated)
        done = terminated | truncated
        fresh = torch.full_like(nxt, self.start)
        after = torch.where(done, fresh, nxt)
        out = {**self._view(after), keys.FINAL_OBS: F.one_hot(nxt, self.spec.obs_shape[0]).float()}
        out.update({keys.REWARD: reward, keys.TERMINATED: terminated, keys.TRUNCATED: truncated, keys.IS_FIRST: done})
        new_state = TensorDict({"s": after, "t": torch.where(done, 0, t)}, batch_size=state.batch_size)
        return new_state, TensorDict(out, batch_size=state.batch_size)


def table_prior(env: TableEnv, logits: torch.Tensor, values: torch.Tensor) -> ActorCriticPrior:
    """A fixed prior: π(·|s) = softmax(logits[s]) and V(s) = values[s] (one-hot features select rows)."""
    logits, values = logits.float(), values.float()
    return ActorCriticPrior(lambda x: x @ logits, lambda x: x @ values, env.spec)


def root(env: TableEnv, num_envs: int, state: int | None = None) -> tuple[TensorDict, TensorDict]:
    """``num_envs`` root states (all at ``state``, default the env's start) and their observations."""
    root_state = env.reset_state(num_envs, torch.Generator())
    if state is not None:
        root_state["s"].fill_(state)
    return root_state, env.observe(root_state)


def chain(num_states: int, rewards: list[float]) -> TableEnv:
    """A chain ``0 → 1 → … → S-1`` (every action moves right; the last state loops) with per-state rewards."""
    nxt = torch.arange(num_states).clamp_max(num_states - 1)
    nxt = torch.stack([(nxt + 1).clamp_max(num_states - 1)] * 2, dim=-1)
    reward = torch.tensor(rewards).unsqueeze(-1).expand(num_states, 2).clone()
    return TableEnv(nxt, reward)
