"""``BCDataModule``: recorded decisions (``rl_lightning/data/records.py``) as shuffled minibatches for ``BC``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

from rl_lightning import keys
from rl_lightning.data.records import load_records, record_games
from rl_lightning.envs.base import EnvSpec, TorchEnv
from rl_lightning.envs.games.bots import load_bot
from rl_lightning.errors import ConfigError


class _Rows(Dataset):
    """Rows of the record arrays, fetched a whole minibatch of indices at a time (no per-row collate)."""

    def __init__(self, columns: dict[str, torch.Tensor], obs_dtype: torch.dtype) -> None:
        self.columns = columns
        self.obs_dtype = obs_dtype

    def __len__(self) -> int:
        return len(self.columns[keys.ACTION])

    def __getitem__(self, rows: list[int]) -> dict[str, torch.Tensor]:
        index = torch.as_tensor(rows)
        batch = {name: column[index] for name, column in self.columns.items()}
        batch[keys.OBS] = batch[keys.OBS].to(self.obs_dtype)  # held compactly (e.g. uint8 0/1 cards)
        return batch


class BCDataModule(pl.LightningDataModule):
    """Recorded (observation, action mask, action) rows of a game, split by game into training and held-out rows.

    Args:
        env: the game env (``rl_lightning.envs.games.OpenSpielEnv``, ...): its spec builds the policy network (the
            same network PPO builds for this env, so the weights load into PPO) and is checked against the records.
        path: a records directory (or one ``.npz`` file) in the ``rl_lightning.records`` format.
        bot: a bot class path; when ``path`` does not exist, ``record_games`` games of this bot in every seat are
            recorded there first (seeded by ``record_seed``). ``None``: ``path`` must exist.
        record_games: games to record when ``path`` is missing and ``bot`` is set.
        record_seed: seed of the recorded deals and of the bot's random choices.
        batch_size: rows per gradient step.
        val_fraction: share of the games (of the rows, when the records have no ``game`` array) held out.
        seed: seeds the split and the shuffling (default: the run's ``seed_everything``).
    """

    def __init__(
        self,
        env: TorchEnv,
        path: str = "records",
        bot: str | None = None,
        record_games: int = 0,
        record_seed: int = 0,
        batch_size: int = 256,
        val_fraction: float = 0.1,
        seed: int | None = None,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ConfigError(f"data.batch_size={batch_size}: must be >= 1, e.g. 256")
        if not 0.0 < val_fraction < 1.0:
            raise ConfigError(f"data.val_fraction={val_fraction}: must be in (0, 1), e.g. 0.1")
        if not Path(path).exists() and (bot is None or record_games < 1):
            raise ConfigError(f"data.path={path!r}: no such records; record them with `rl-lightning record`, or set "
                              "data.bot and data.record_games to record them at start-up")  # fmt: skip
        self.env = env
        self.path = path
        self.bot = bot
        self.record_games = record_games
        self.record_seed = record_seed
        self.batch_size = batch_size
        self.val_fraction = val_fraction
        self.seed = seed
        self.train_rows: _Rows | None = None
        self.val_rows: _Rows | None = None

    @property
    def env_spec(self) -> EnvSpec:
        """Linked into the model by the CLI (``data.env_spec`` → ``model.env_spec``)."""
        return self.env.spec

    def prepare_data(self) -> None:
        if not Path(self.path).exists():  # checked in __init__: a bot and a game count are set
            bot = load_bot(self.bot, field="data.bot")
            record_games(self.env, bot, self.record_games, self.path, seed=self.record_seed, bot_name=self.bot)

    def setup(self, stage: str) -> None:
        if self.train_rows is not None:
            return
        arrays, meta = load_records(self.path)
        self._check(arrays, meta)
        seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
        held_out = _held_out(arrays, self.val_fraction, seed)
        columns = {keys.OBS: _compact(arrays["obs"]), keys.ACTION_MASK: torch.from_numpy(arrays["action_mask"]),
                   keys.ACTION: torch.from_numpy(arrays["action"].astype(np.int64))}  # fmt: skip
        dtype = self.env.spec.obs_dtype
        self.train_rows = _Rows({k: v[~held_out] for k, v in columns.items()}, dtype)
        self.val_rows = _Rows({k: v[held_out] for k, v in columns.items()}, dtype)

    def _check(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """The records fit the env: observation shape, mask width, every action legal under its mask."""
        spec, where = self.env.spec, f"data.path={self.path!r}"
        obs_shape, mask = tuple(arrays["obs"].shape[1:]), arrays["action_mask"]
        if obs_shape != tuple(spec.obs_shape):
            recorded = meta.get("env", "unknown env")
            raise ConfigError(f"{where}: observations are {obs_shape} ({recorded}) but data.env gives "
                              f"{tuple(spec.obs_shape)} ({spec.name}); record this env's games")  # fmt: skip
        if mask.ndim != 2 or mask.dtype != np.bool_ or mask.shape[1] != spec.num_actions:
            raise ConfigError(f"{where}: action_mask is {mask.dtype} {mask.shape[1:]}, not bool "
                              f"({spec.num_actions},) as {spec.name}'s actions")  # fmt: skip
        action = arrays["action"]
        inside = (action >= 0) & (action < spec.num_actions)
        legal = inside & mask[np.arange(len(action)), np.clip(action, 0, spec.num_actions - 1)]
        if len(action) < 2 or not legal.all():
            bad = int(np.argmin(legal)) if len(action) else 0
            raise ConfigError(f"{where}: needs >= 2 rows whose action is legal under its action_mask (row {bad} of "
                              f"{len(action)} is not); fix the records")  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        seed = (self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))) + 1
        sampler = RandomSampler(self.train_rows, generator=torch.Generator().manual_seed(seed))
        return DataLoader(self.train_rows, sampler=BatchSampler(sampler, self.batch_size, False), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        sampler = BatchSampler(SequentialSampler(self.val_rows), max(self.batch_size, 1024), False)
        return DataLoader(self.val_rows, sampler=sampler, batch_size=None)


def _held_out(arrays: dict[str, np.ndarray], fraction: float, seed: int) -> torch.Tensor:
    """Bool ``[N]``: the held-out rows, whole games where the records name them (no game on both sides)."""
    rng = np.random.default_rng(seed)
    if "game" in arrays:
        games = np.unique(arrays["game"])
        count = min(max(1, round(fraction * len(games))), len(games) - 1) if len(games) > 1 else 0
        if count:
            chosen = rng.choice(games, size=count, replace=False)
            return torch.from_numpy(np.isin(arrays["game"], chosen))
    rows = len(arrays["action"])
    count = min(max(1, round(fraction * rows)), rows - 1)
    held = np.zeros(rows, dtype=bool)
    held[rng.choice(rows, size=count, replace=False)] = True
    return torch.from_numpy(held)


def _compact(obs: np.ndarray) -> torch.Tensor:
    """Observations as uint8 where that loses nothing (card games' 0/1 planes: a quarter of float32's memory)."""
    if obs.dtype != np.uint8 and obs.size and np.issubdtype(obs.dtype, np.number):
        small = obs.astype(np.uint8)
        if np.array_equal(small, obs):
            return torch.from_numpy(small)
    return torch.from_numpy(obs)
