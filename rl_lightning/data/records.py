"""Recorded decisions of a multi-seat game: a bot's games written as ``.npz`` shards, read back for behaviour cloning.

Format (``rl_lightning.records`` version 1), a directory holding:

- ``shard_00000.npz``, ``shard_00001.npz``, ...: NumPy ``.npz`` archives, one row per decision, in game order and,
  within a game, in tick order. Arrays (``N`` rows; ``obs``, ``action_mask`` and ``action`` are required, the rest
  are written by ``record_games`` and optional in a user's dataset):

  ============== =================== ==================================================================
  ``obs``        ``[N, *obs_shape]`` the acting seat's observation, exactly as the env gives it
  ``action_mask``  ``[N, A]`` bool   that seat's legal actions
  ``action``     ``[N]`` int64       the action taken (legal under ``action_mask``)
  ``seat``       ``[N]`` int64       the seat that acted
  ``reward``     ``[N, S]`` float32  what every seat received on this tick (``keys.REWARD`` of the step)
  ``terminated`` ``[N]`` bool        the game ended with this decision
  ``game``       ``[N]`` int64       which recorded game the row belongs to (the held-out split is by game)
  ============== =================== ==================================================================

- ``meta.json`` (optional for a user's dataset): ``format``, ``version``, ``env`` (the env spec's name),
  ``obs_shape``, ``obs_dtype``, ``num_actions``, ``num_seats``, ``bot``, ``games``, ``seed``, ``records`` and
  ``shards``. Where present, ``obs_shape`` and ``num_actions`` are checked against the configured env.

Why not Minari (Farama's offline-RL format): a Minari episode is one agent's stream (``T + 1`` observations,
``T`` scalar rewards) tied to a Gymnasium env spec, stored through an extra backend (h5py or pyarrow). A multi-seat
game interleaves the seats' decisions and pays a ``[S]`` reward vector on any tick; its seat and mask would have to
hide in ``infos`` or a ``Dict`` observation that no other Minari reader interprets. Plain ``.npz`` shards with the
schema above are read by NumPy alone, in any language with an npz reader.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rl_lightning import keys
from rl_lightning.envs.base import TorchEnv
from rl_lightning.errors import ConfigError

FORMAT = "rl_lightning.records"
VERSION = 1
REQUIRED = ("obs", "action_mask", "action")
OPTIONAL = ("seat", "reward", "terminated", "game")


def record_games(
    env: TorchEnv, bot: Any, num_games: int, out: str | Path, seed: int = 0, batch_size: int = 64, bot_name: str = ""
) -> Path:
    """Play ``num_games`` games of ``env`` with ``bot`` in every seat and write their decisions to ``out``.

    Games are played ``batch_size`` at a time, one shard each; chunk k resets from a generator seeded
    ``(seed, k)`` and the bot draws from one seeded by ``seed``, so the same call writes the same records. The
    shards are written to ``out.partial`` and moved to ``out`` at the end: a failure leaves no half dataset.

    Raises:
        ConfigError: ``out`` exists already, or ``num_games``/``batch_size`` < 1 (before any game is played).
    """
    out = Path(out)
    if out.exists():
        raise ConfigError(f"--out {str(out)!r} exists already; pass a new directory (records are never overwritten)")
    if num_games < 1 or batch_size < 1:
        raise ConfigError(f"--games {num_games}: record at least one game (and batch_size={batch_size} >= 1)")
    if env.spec.obs_keys:
        raise ConfigError(f"{env.spec.name} has Dict observations; records hold one observation array per decision "
                          "(wrap the env to flatten them)")  # fmt: skip
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    step_gen = torch.Generator().manual_seed(seed)
    shards, records = [], 0
    try:
        for chunk, start in enumerate(range(0, num_games, batch_size)):
            reset_gen = torch.Generator().manual_seed(seed * 1_000_003 + chunk)
            arrays = _play_recorded(env, bot, min(batch_size, num_games - start), reset_gen, step_gen)
            arrays["game"] += start
            name = f"shard_{chunk:05d}.npz"
            np.savez_compressed(partial / name, **arrays)
            shards.append(name)
            records += len(arrays["action"])
        spec = env.spec
        meta = {"format": FORMAT, "version": VERSION, "env": spec.name, "obs_shape": list(spec.obs_shape),
                "obs_dtype": str(spec.obs_dtype).removeprefix("torch."), "num_actions": spec.num_actions,
                "num_seats": spec.num_seats, "bot": bot_name or type(bot).__name__, "games": num_games,
                "seed": seed, "records": records, "shards": shards}  # fmt: skip
        (partial / "meta.json").write_text(json.dumps(meta, indent=1))
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out


def _play_recorded(
    env: TorchEnv, bot: Any, num: int, reset_gen: torch.Generator, gen: torch.Generator
) -> dict[str, np.ndarray]:
    """``num`` games to their end, every decision kept; rows sorted by (game, tick)."""
    ticks: list[dict[str, torch.Tensor]] = []
    index = torch.arange(num)
    state = env.reset_state(num, reset_gen)
    try:
        obs = env.observe(state)
        while len(index):
            seat = obs.get(keys.SEAT, torch.zeros(len(index), dtype=torch.int64))
            action = bot(obs[keys.OBS], obs[keys.ACTION_MASK], seat, gen).to(torch.int64)
            state, out = env.step_state(state, action, gen, inplace=True)
            ended = out[keys.TERMINATED] | out[keys.TRUNCATED]
            reward = out[keys.REWARD].reshape(len(index), -1).float()
            ticks.append({"obs": obs[keys.OBS].clone(), "action_mask": obs[keys.ACTION_MASK].clone(),
                          "action": action, "seat": seat.to(torch.int64), "reward": reward,
                          "terminated": out[keys.TERMINATED].clone(), "game": index.clone()})  # fmt: skip
            if bool(ended.any()):
                env.release(state[ended])
                keep = ~ended
                state, obs, index = state[keep], out[keep], index[keep]
            else:
                obs = out
    finally:
        env.release(state)
    arrays = {name: torch.cat([tick[name] for tick in ticks]) for name in ticks[0]}
    order = torch.sort(arrays["game"], stable=True).indices  # ticks were appended in order: stable keeps it
    return {name: value[order].numpy() for name, value in arrays.items()}


def load_records(path: str | Path, field: str = "data.path") -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Every shard of a records directory (or one ``.npz`` file), concatenated; and its ``meta.json`` (or ``{}``).

    Raises:
        ConfigError: one line naming ``field``, the file and the fix: no such path, no shards, a shard without a
            required array, arrays of different lengths, or an unreadable file.
    """
    path = Path(path)
    where = f"{field}={str(path)!r}"
    if not path.exists():
        raise ConfigError(f"{where}: no such file or directory; record one with `rl-lightning record` or pass an "
                          "existing records directory")  # fmt: skip
    meta: dict[str, Any] = {}
    if path.is_dir():
        meta_file = path / "meta.json"
        if meta_file.is_file():
            meta = _read_meta(meta_file, where)
        files = [path / name for name in meta["shards"]] if "shards" in meta else sorted(path.glob("*.npz"))
    else:
        files = [path]
    if not files:
        raise ConfigError(f"{where}: holds no .npz shards; record one with `rl-lightning record`")
    shards = [_read_shard(file, where) for file in files]
    names = [name for name in (*REQUIRED, *OPTIONAL) if all(name in shard for shard in shards)]
    return {name: np.concatenate([shard[name] for shard in shards]) for name in names}, meta


def _read_meta(file: Path, where: str) -> dict[str, Any]:
    try:
        meta = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{where}: meta.json cannot be read ({err}); fix or remove it") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{where}: meta.json is not a JSON object; fix or remove it")
    return meta


def _read_shard(file: Path, where: str) -> dict[str, np.ndarray]:
    try:
        with np.load(file, allow_pickle=False) as archive:
            shard = {name: archive[name] for name in archive.files if name in (*REQUIRED, *OPTIONAL)}
    except (OSError, ValueError) as err:
        reason = " ".join(str(err).split())
        raise ConfigError(f"{where}: {file.name} cannot be read as .npz ({reason}); re-record it") from None
    missing = [name for name in REQUIRED if name not in shard]
    if missing:
        raise ConfigError(f"{where}: {file.name} has no {missing[0]!r} array; a shard needs {list(REQUIRED)} "
                          "(docs/guides/games.md: Behaviour cloning)")  # fmt: skip
    lengths = {name: len(value) for name, value in shard.items()}
    if len(set(lengths.values())) > 1:
        raise ConfigError(f"{where}: {file.name} has arrays of different lengths {lengths}; one row per decision")
    return shard
