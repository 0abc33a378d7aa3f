"""A panel of opponents for a game agent: who they are (``resolve_panel``), the matches against them
(``play_panel``) and the rating table of everyone against everyone (``rating_table``).

An opponent entry is ``random`` (uniform over legal actions), ``heuristic`` (the game's bundled heuristic bot:
``HEURISTICS``), ``league`` (every snapshot in the run's league, each its own player ``league_v<policy version>``),
a checkpoint file (``*.ckpt``, any rl_lightning algorithm, frozen; named by its file stem) or a bot class path
(``pkg.mod.Class`` / ``pkg.mod:Class``, built without arguments; named by the class name).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations, permutations
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rl_lightning.algos import FAMILIES
from rl_lightning.envs.base import TorchEnv
from rl_lightning.envs.games.bots import load_bot
from rl_lightning.envs.games.bots.probe import check_bot_fits
from rl_lightning.errors import ConfigError
from rl_lightning.games.match import Bot, MatchResult, PolicyBot, check_engine_players, play_match
from rl_lightning.games.rating import fit_elo
from rl_lightning.games.summary import pairwise_counts
from rl_lightning.lineage import REVISION_KEY, check_checkpoint_plays, check_same_env, read_checkpoint

RANDOM, HEURISTIC, LEAGUE = "random", "heuristic", "league"
#: The name of the policy under test in the rating table.
POLICY = "policy"
#: The bundled heuristic bot of each game, which ``heuristic`` names; keyed by the game's bare name (``game_key``).
HEURISTICS = {
    "hearts": "rl_lightning.envs.games.bots.HeartsHeuristic",
    "connect_four": "rl_lightning.envs.games.bots.ConnectFourHeuristic",
}


def game_key(name: str) -> str:
    """A game's bare name from its ``EnvSpec.name``: ``open_spiel:hearts`` -> ``hearts``,
    ``classic/connect_four-v3`` or ``pettingzoo.classic.connect_four_v3`` -> ``connect_four``."""
    return re.sub(r"[-_]v\d+$", "", re.split(r"[:/.]", name)[-1])


@dataclass
class Player:
    """A named bot: the name keys its metrics (``eval/vs_<name>/...``, ``eval/rating/<name>``)."""

    name: str
    bot: Bot


def check_opponents(opponents: Sequence[str], owner: str) -> list[str]:
    """The entries, stripped; one-line ``ConfigError`` for one that names no kind of opponent, or a missing file."""
    checked = []
    for index, entry in enumerate(opponents):
        spec = str(entry).strip()
        if spec.endswith(".ckpt"):
            if not Path(spec).is_file():
                raise ConfigError(f"{owner}: opponents[{index}]={spec!r}: no such checkpoint file; give a .ckpt path")
        elif spec not in (RANDOM, HEURISTIC, LEAGUE) and "." not in spec and ":" not in spec:
            raise ConfigError(f"{owner}: opponents[{index}]={spec!r} is not an opponent; use random, heuristic, "
                              "league, a checkpoint file (*.ckpt) or a bot class path (pkg.module:Class)")  # fmt: skip
        checked.append(spec)
    if not checked:
        raise ConfigError(f"{owner}: opponents is empty; list at least one, e.g. [random, heuristic]")
    return checked


def check_checkpoint_opponents(opponents: Sequence[str], env: TorchEnv, owner: str = "GameEvaluation") -> None:
    """Refuse, in one line before any work, a checkpoint opponent trained on another game than ``env``'s (its
    network could not read this game's observations); reads each file's env spec, builds no network."""
    for spec in opponents:
        if spec.endswith(".ckpt"):
            check_checkpoint_plays(spec, env.spec, f"{owner}: opponents entry", here=f"{owner} plays")


def default_opponents(env: TorchEnv) -> list[str]:
    """``random``, and ``heuristic`` where the game has a bundled one."""
    return [RANDOM, HEURISTIC] if game_key(env.spec.name) in HEURISTICS else [RANDOM]


def _import_bot(path: str, owner: str) -> Bot:
    return load_bot(path, f"{owner}: opponent")  # type: ignore[return-value]


def _load_module(path: str, device: torch.device) -> Any:
    family = (read_checkpoint(path, source="GameEvaluation").get(REVISION_KEY) or {}).get("family")
    if family not in FAMILIES:
        raise ConfigError(f"GameEvaluation: opponent {path!r} has algorithm family {family!r}; rl_lightning "
                          f"checkpoints are one of {sorted(FAMILIES)}")  # fmt: skip
    module = FAMILIES[family].load_from_checkpoint(path, map_location=device, weights_only=False)
    return module.requires_grad_(False).eval()


def resolve_panel(
    opponents: Sequence[str], env: TorchEnv, league: Any, deterministic: bool | None, device: torch.device,
    owner: str = "GameEvaluation",
) -> list[Player]:  # fmt: skip
    """The players ``opponents`` names for ``env`` (``league``: the run's ``League`` or ``None``)."""
    players: list[Player] = []
    for spec in opponents:
        if spec == RANDOM:
            players.append(Player(RANDOM, _import_bot("rl_lightning.envs.games.bots.RandomBot", owner)))
        elif spec == HEURISTIC:
            if game_key(env.spec.name) not in HEURISTICS:
                raise ConfigError(
                    f"{owner}: opponents lists 'heuristic' but {env.spec.name} has no bundled "
                    f"heuristic (games with one: {sorted(HEURISTICS)}); name a bot class instead"
                )
            players.append(Player(HEURISTIC, _import_bot(HEURISTICS[game_key(env.spec.name)], owner)))
            check_bot_fits(env, players[-1].bot, f"{owner}: opponents entry {spec!r}")
        elif spec == LEAGUE:
            if league is None:
                raise ConfigError(f"{owner}: opponents lists 'league' but the run has no league; set data.league "
                                  "(e.g. {size: 5, snapshot_every_n_updates: 10}) or drop 'league'")  # fmt: skip
            for slot, version in sorted(zip(league.slots, league.versions), key=lambda pair: pair[1]):
                players.append(Player(f"league_v{version}", PolicyBot(slot, deterministic)))
        elif spec.endswith(".ckpt"):
            module = _load_module(spec, device)
            check_same_env(module.env_spec, env.spec, f"{owner}: opponents entry {spec!r}",
                           f"give a checkpoint of a run on {env.spec.name}", here=f"{owner} plays")  # fmt: skip
            players.append(Player(_name(Path(spec).stem), PolicyBot(module, deterministic)))
        else:
            players.append(Player(_name(re.split(r"[.:]", spec)[-1]), _import_bot(spec, owner)))
            check_bot_fits(env, players[-1].bot, f"{owner}: opponents entry {spec!r}")
    check_engine_players(env, [p.bot for p in players], owner)  # a search bot refuses an env it cannot search
    names = [POLICY] + [p.name for p in players]
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError(f"{owner}: opponents name the player(s) {twice} more than once (names: {names}); list "
                          "each opponent once and give checkpoints distinct file names")  # fmt: skip
    return players


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def play_panel(
    env: TorchEnv, tested: Player, panel: Sequence[Player], num_deals: int, seed: int, duplicate: bool,
    batch_size: int, baseline: bool = True,
) -> dict[str, MatchResult]:  # fmt: skip
    """``tested`` against each panel player (``play_match``, with the baseline unless ``baseline=False``), keyed by
    the opponent's name."""
    return {
        player.name: play_match(env, tested.bot, player.bot, num_deals, seed, duplicate, batch_size, baseline)
        for player in panel
    }


def rating_table(
    env: TorchEnv, players: Sequence[Player], played: dict[tuple[str, str], MatchResult], num_deals: int, seed: int,
    duplicate: bool, batch_size: int,
) -> dict[str, float]:  # fmt: skip
    """Elo ratings of ``players`` from a round robin; ``played[(a, b)]`` (a tested against b) are reused.

    Every ordered pair plays (each in the tested seat against the other in every other seat); in two-seat games
    the two orders are the same games, so unordered pairs only. Anchored at ``random`` = 0 when it plays.
    """
    names = [p.name for p in players]
    pairs = combinations(range(len(players)), 2) if env.spec.num_seats == 2 else permutations(range(len(players)), 2)
    wins, draws = np.zeros((len(names),) * 2), np.zeros((len(names),) * 2)
    for i, j in pairs:
        result = played.get((names[i], names[j]))
        if result is None:
            result = play_match(env, players[i].bot, players[j].bot, num_deals, seed + 31 * (i * len(names) + j),
                                duplicate, batch_size, baseline=False)  # fmt: skip
        won, tied, lost = pairwise_counts(result)
        wins[i, j] += won
        wins[j, i] += lost
        draws[i, j] += tied
        draws[j, i] += tied
    return fit_elo(names, wins, draws, anchor=RANDOM if RANDOM in names else None)
