"""``CollectorBase``: what both collectors share (generators, open episodes, episode stats, checkpointing)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.episode_stats import FinishedEpisodes, FinishedGames
from rl_lightning.envs.base import BatchedEnv


class CollectorBase:
    """The env, the sampling generator, open-episode sums, finished-episode stats and checkpointing.

    Subclasses keep their live view of the envs (what the policy sees next) in the attributes ``_<key>`` for each
    key in ``live_keys`` (``None`` until the first step); for pure-tensor envs those views, the env state and the
    open episodes are checkpointed, so a resume continues bit for bit.

    Args:
        env: the batched env to step (owned by the collector from now on).
        seed: seeds the action-sampling generator.
    """

    live_keys: tuple[str, ...] = ()

    def __init__(self, env: BatchedEnv, seed: int = 0) -> None:
        self.env = env
        self.generator = torch.Generator(device=env.device).manual_seed(seed)
        device = env.device
        self._episode_return = torch.zeros(env.num_envs, device=device)
        self._episode_length = torch.zeros(env.num_envs, device=device)
        self.finished = FinishedEpisodes(device)
        self.games = FinishedGames(device)
        self._game_steps: list[tuple[torch.Tensor, torch.Tensor]] = []  # (game_score, game_over) not yet summed
        self.last_collect_seconds = 0.0
        #: How many episodes (games, hands) stand behind each mean of the last ``episode_stats`` call, the weight of
        #: that mean in an average over actors or ranks (a game of four lives counts once in ``game_score``).
        self.stat_counts: dict[str, torch.Tensor] = {}
        self._forget_views()

    @property
    def num_envs(self) -> int:
        return self.env.num_envs

    def episode_stats(self) -> dict[str, torch.Tensor]:
        """Mean return/length of episodes finished since the last call (NaN if none), synced over ranks; under an
        Atari preset also ``game_score``, the mean raw score of the whole games finished since then."""
        count = self.finished.count()
        stats = self.finished.compute()
        self.finished.reset()
        self.stat_counts = dict.fromkeys(stats, count)
        if self._game_steps:  # Atari presets: the whole games' raw scores (``rollout/game_score``)
            scores, over = zip(*self._game_steps, strict=True)
            self._game_steps.clear()
            self.games.update(torch.stack(scores), torch.stack(over))  # one metric update, not one per step
            stats.update(self.games.compute())
            self.stat_counts["game_score"] = self.games.count()
            self.games.reset()
        return stats

    def count_games(self, out: TensorDict) -> None:
        """Keep a step's finished Atari games (``keys.GAME_OVER``/``GAME_SCORE``, Atari presets only) for the
        ``game_score`` stat; other envs output neither key. Every collector calls it on each env step's output."""
        if keys.GAME_OVER in out:
            self._game_steps.append((out[keys.GAME_SCORE], out[keys.GAME_OVER]))

    def state_dict(self) -> dict[str, Any]:
        """Generators, and for pure-tensor envs the live env state, views and open episodes."""
        state: dict[str, Any] = {
            "env_generator": self.env.generator.get_state(),
            "sampling_generator": self.generator.get_state(),
        }
        views = {key: getattr(self, f"_{key}") for key in self.live_keys}
        started = all(view is not None for view in views.values())
        if self.env.env.state_is_tensors and started and self.env.state is not None:
            state["env_state"] = self.env.state.to_dict()
            state.update({key: view.to_dict() for key, view in views.items()})
            state["episode_return"] = self._episode_return.clone()
            state["episode_length"] = self._episode_length.clone()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``; without a saved env state every env starts a fresh episode."""
        self.env.generator.set_state(state["env_generator"])
        self.generator.set_state(state["sampling_generator"])
        self.reset_episodes()
        if "env_state" in state:
            device, n = self.env.device, self.env.num_envs
            self.env.state = TensorDict(state["env_state"], batch_size=[n]).to(device)
            for key in self.live_keys:
                setattr(self, f"_{key}", TensorDict(state[key], batch_size=[n]).to(device))
            self._episode_return.copy_(state["episode_return"])
            self._episode_length.copy_(state["episode_length"])

    def reset_episodes(self) -> None:
        """Forget the envs' current episodes (the next step resets every env)."""
        self._forget_views()
        self._episode_return.zero_()
        self._episode_length.zero_()

    def _forget_views(self) -> None:
        for key in self.live_keys:
            setattr(self, f"_{key}", None)

    def close(self) -> None:
        self.env.close()
