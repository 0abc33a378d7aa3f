"""``rl-lightning record``: play games with a bot in every seat through a config's env and write them as records.

``rl-lightning record --config ppo_hearts.yaml --bot rl_lightning.envs.games.bots.HeartsHeuristic --games 200
--out records/hearts`` builds the env exactly as that config's ``data.init_args.env`` does and writes the
``rl_lightning.records`` format (``rl_lightning/data/records.py``) that ``BCDataModule`` reads.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from typing import Any

import yaml

from rl_lightning.data.records import record_games
from rl_lightning.envs.base import TorchEnv
from rl_lightning.envs.games.bots import load_bot
from rl_lightning.errors import ConfigError
from rl_lightning.settings.cli_args import resolve_config


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rl-lightning record", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a config file or bundled name whose data.env to play")
    parser.add_argument(
        "--bot", required=True, help="bot class path, e.g. rl_lightning.envs.games.bots.HeartsHeuristic"
    )
    parser.add_argument("--games", type=int, required=True, help="games to play (every seat: the bot)")
    parser.add_argument("--out", required=True, help="a new directory for the records")
    parser.add_argument("--seed", type=int, default=0, help="seeds the deals and the bot's random choices")
    parser.add_argument("--batch_size", type=int, default=64, help="games played at once (one shard each)")
    return parser.parse_args(list(argv))


def env_from_config(config: str) -> TorchEnv:
    """The env a config's ``data.init_args.env`` (``class_path`` + ``init_args``) builds."""
    path = resolve_config(config)
    try:
        with open(path) as stream:
            tree = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"--config {config!r}: cannot be read ({' '.join(str(err).split())})") from None
    env = _get(tree, ("data", "init_args", "env"))
    if not isinstance(env, dict) or "class_path" not in env:
        raise ConfigError(f"--config {config!r} has no data.init_args.env with a class_path; pass a game config "
                          "such as ppo_hearts.yaml")  # fmt: skip
    module, _, name = env["class_path"].rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"data.init_args.env.class_path={env['class_path']!r} does not import ({err})") from None
    return cls(**(env.get("init_args") or {}))


def _get(tree: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(part)
    return tree


def main(argv: Sequence[str]) -> None:
    """Parse, check every input before playing, record."""
    args = parse_args(argv)
    if args.games < 1:
        raise ConfigError(f"--games {args.games}: record at least one game")
    bot = load_bot(args.bot, field="--bot")
    env = env_from_config(args.config)
    if not env.spec.has_action_mask:
        raise ConfigError(f"--config {args.config!r}: {env.spec.name} has no action masks; records need a masked "
                          "discrete game (rl_lightning.envs.games)")  # fmt: skip
    out = record_games(env, bot, args.games, args.out, seed=args.seed, batch_size=args.batch_size, bot_name=args.bot)
    print(f"rl-lightning record: {args.games} games of {args.bot} on {env.spec.name} -> {out}")
