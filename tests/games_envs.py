"""Tiny PettingZoo envs for the multi-seat contract tests, named from configs as ``tests.games_envs:Name``.

``PassTheParcel`` (AEC, three agents, masked): the acting agent passes ``a`` in {0, 1, 2}; the *next* agent is
paid ``a + 1`` (a seat rewarded while another acts); action 2 is legal on even turns only; the game ends after
``length`` moves, so with the default 5 it ends on agent 1's move. ``SimultaneousSum`` (Parallel, two agents, no
mask): both choose 0/1 each round and each is paid the other's choice; it ends after three rounds.
``LastOneStanding`` (AEC, three agents, masked): action 2 leaves the game (that agent is terminated there and then,
paid -1, while the others play on; with ``leave="truncated"`` it is truncated instead, as by its own time limit);
the last agent left is paid +1. ``InfoMaskParallel`` (Parallel, two agents):
its mask is in ``infos[agent]["action_mask"]`` and an illegal action raises. The others are malformed on purpose:
mismatched observations, a Dict observation without a mask, Box actions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv


class _ThreeSeatToy(AECEnv):
    """Three agents ``a, b, c``, each seeing 3 floats and a 3-action mask: the spaces and the per-game books the
    toy AEC games below share."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.length = length
        self.possible_agents = ["a", "b", "c"]
        obs = spaces.Box(0.0, 100.0, (3,), np.float32)
        self.observation_spaces = {
            agent: spaces.Dict({"observation": obs, "action_mask": spaces.Box(0, 1, (3,), np.int8)})
            for agent in self.possible_agents
        }
        self.action_spaces = {agent: spaces.Discrete(3) for agent in self.possible_agents}

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    def _open_books(self) -> None:
        """Every agent in play, nothing paid, ended or said yet, turn 0."""
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {agent: {} for agent in self.agents}
        self.turn = 0


class PassTheParcel(_ThreeSeatToy):
    metadata = {"name": "pass_the_parcel_v0", "is_parallelizable": False}

    def __init__(self, length: int = 5) -> None:
        super().__init__(length)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._open_books()
        self.last = 0.0
        self.start = np.random.default_rng(seed).integers(3)  # which agent moves first: the reset seed matters
        self.agent_selection = self.agents[self.start]

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        mask = np.array([1, 1, self.turn % 2 == 0], dtype=np.int8)
        index = self.possible_agents.index(agent)
        return {"observation": np.array([self.turn, index, self.last], dtype=np.float32), "action_mask": mask}

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if action == 2 and self.turn % 2:
            raise ValueError(f"illegal action 2 on turn {self.turn}")
        self._cumulative_rewards[agent] = 0
        self._clear_rewards()
        nxt = self.agents[(self.agents.index(agent) + 1) % len(self.agents)]
        self.rewards[nxt] = float(action + 1)
        self.turn += 1
        self.last = float(action)
        if self.turn >= self.length:
            self.terminations = dict.fromkeys(self.agents, True)
        self.agent_selection = nxt
        self._accumulate_rewards()


class SimultaneousSum(ParallelEnv):
    metadata = {"name": "simultaneous_sum_v0"}
    render_mode = None  # parallel_to_aec warns about envs without one

    def __init__(self, rounds: int = 3) -> None:
        self.rounds = rounds
        self.possible_agents = ["left", "right"]

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0.0, 10.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = list(self.possible_agents)
        self.round = 0
        obs = {agent: np.zeros(2, dtype=np.float32) for agent in self.agents}
        return obs, {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, int]) -> tuple[dict, dict, dict, dict, dict]:
        self.round += 1
        left, right = int(actions["left"]), int(actions["right"])
        rewards = {"left": float(right), "right": float(left)}
        done = self.round >= self.rounds
        obs = {"left": np.array([self.round, right], np.float32), "right": np.array([self.round, left], np.float32)}
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, False)
        infos = {agent: {} for agent in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos


class LastOneStanding(_ThreeSeatToy):
    metadata = {"name": "last_one_standing_v0", "is_parallelizable": False}

    def __init__(self, length: int = 30, leave: str = "terminated") -> None:
        super().__init__(length)
        self.leave = {"terminated": "terminations", "truncated": "truncations"}[leave]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._open_books()
        self.agent_selection = self.agents[0]

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        index = self.possible_agents.index(agent)
        view = np.array([self.turn, index, len(self.agents)], dtype=np.float32)
        return {"observation": view, "action_mask": np.ones(3, dtype=np.int8)}

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0
        self._clear_rewards()
        self.turn += 1
        if action == 2:
            getattr(self, self.leave)[agent] = True
            self.rewards[agent] = -1.0
        live = [a for a in self.agents if not (self.terminations[a] or self.truncations[a])]
        if len(live) == 1:
            self.rewards[live[0]] += 1.0
        if len(live) <= 1 or self.turn >= self.length:
            self.terminations = dict.fromkeys(self.agents, True)
        order = self.agents[self.agents.index(agent) + 1 :] + self.agents[: self.agents.index(agent) + 1]
        self.agent_selection = next((a for a in order if not (self.terminations[a] or self.truncations[a])), order[0])
        self._accumulate_rewards()
        self._deads_step_first()  # the agent that left is stepped out (None) before the next one acts


class InfoMaskParallel(ParallelEnv):
    metadata = {"name": "info_mask_parallel_v0"}
    render_mode = None

    def __init__(self, rounds: int = 4) -> None:
        self.rounds = rounds
        self.possible_agents = ["left", "right"]

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0.0, 10.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3)

    def _infos(self) -> dict[str, dict]:
        mask = np.array([1, 1, self.round % 2 == 0], dtype=np.int8)  # action 2 is legal on even rounds only
        return {agent: {"action_mask": mask.copy()} for agent in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = list(self.possible_agents)
        self.round = 0
        return {agent: np.zeros(2, dtype=np.float32) for agent in self.agents}, self._infos()

    def step(self, actions: dict[str, int]) -> tuple[dict, dict, dict, dict, dict]:
        if any(int(a) == 2 for a in actions.values()) and self.round % 2:
            raise ValueError(f"illegal action 2 in round {self.round}")
        self.round += 1
        obs = {agent: np.array([self.round, int(actions[agent])], np.float32) for agent in self.agents}
        rewards = {agent: float(actions[agent]) for agent in self.agents}
        done = self.round >= self.rounds
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, False)
        infos = self._infos()
        if done:
            self.agents = []
        return obs, rewards, terminations, truncations, infos


class _Broken(PassTheParcel):
    """PassTheParcel with one space changed by a subclass."""


class MismatchedObs(_Broken):
    def observation_space(self, agent: str) -> spaces.Space:
        size = 3 if agent == "a" else 4
        return spaces.Dict({"observation": spaces.Box(0.0, 1.0, (size,), np.float32),
                            "action_mask": spaces.Box(0, 1, (3,), np.int8)})  # fmt: skip


class NoMask(_Broken):
    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Dict({"observation": spaces.Box(0.0, 100.0, (3,), np.float32)})


class BoxActions(_Broken):
    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (2,), np.float32)


def env(**kwargs: Any) -> PassTheParcel:
    """What makes ``tests.games_envs`` usable as a module path (``env_id: tests.games_envs``)."""
    return PassTheParcel(**kwargs)
