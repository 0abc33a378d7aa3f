"""The match driver: B games at a time of a multi-seat env, each seat played by a bot, seats rotated, deals repeated.

A player is a bot (``bot(obs, action_mask, seat, generator) -> action [B]``, the protocol of
``rl_lightning.envs.games.bots``) or the policy under test wrapped as one (``PolicyBot``). ``play_games`` plays
one lineup (a player per seat) for N games and returns every seat's ``game_score`` (Hearts: points taken in the
hand; other games: the engine's returns). ``play_match`` judges a tested player against an opponent: for each
seat r the tested player sits in seat r and the opponent in every other seat, so seat order cannot bias the
result, and the baseline is the opponent itself in seat r (a game of opponents only).

Duplicate deals: with ``duplicate=True`` the S rotations and the baseline replay the same deals. A deal is the
chance a game draws from its reset seed: ``TorchEnv.reset_state(n, generator)`` seeds each of its n games from
``generator`` alone (``OpenSpielEnv``: one numpy RNG per game that resolves every chance node, the deal included),
so resetting from a generator seeded the same way reproduces the same deals; no engine hook is needed. An engine
that draws chance from the step generator instead (a dice game written in torch) repeats only its reset state.
Without duplicates every rotation and the baseline get fresh deals, and the scores are independent samples.

Cut games: a game the env truncates (its ``max_episode_steps``) before it ends has no result, only the score so far
(OpenSpiel's ``returns()`` of an unfinished game, 0 in games that pay at the end). Its scores are NaN, and
``rl_lightning.games.summary`` counts such games (``games_cut``) and leaves them out of every result and interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import TorchEnv
from rl_lightning.envs.games.bots import check_engine_players, needs_engine_state
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import check_same_env
from rl_lightning.processes.learner_waits import pause_point

#: A seat's player: ``bot(obs, action_mask, seat, generator) -> action [B]``.
Bot = Callable[[Any, torch.Tensor, torch.Tensor, torch.Generator], torch.Tensor]
#: The step output each game's result is read from (``[B, S]`` on rows whose game ended).
GAME_SCORE = "game_score"


class PolicyBot:
    """A policy module (PPO, SPO's prior, ...) as a bot: its ``act`` on the acting seats' observations and masks.

    SPO plays with its prior alone here: its search steps snapshots of the rl_lightning env, which a bot does not
    hold (a bot may ask for its rows' live OpenSpiel states with ``needs_engine_state``, as ``OpenSpielMCTSBot`` does).

    Args:
        module: an ``RLModule`` (anything with ``act(td, generator, deterministic)`` and ``device``); the caller
            puts it in eval mode for a match.
        deterministic: act with the mode (True) or sample (False); ``None`` takes the module's
            ``eval_deterministic``.
        seed: seeds the bot's own generator, used when the match's generator lives on another device.
    """

    def __init__(self, module: Any, deterministic: bool | None = None, seed: int = 0) -> None:
        self.module = module
        self.deterministic = module.eval_deterministic if deterministic is None else bool(deterministic)
        self.generator = torch.Generator(device=module.device).manual_seed(seed)

    @torch.no_grad()
    def __call__(self, obs: Any, action_mask: torch.Tensor, seat: torch.Tensor, generator: torch.Generator) -> Any:
        device = self.module.device
        td = TensorDict({keys.OBS: obs, keys.ACTION_MASK: action_mask}, batch_size=action_mask.shape[:1])
        gen = generator if generator.device == device else self.generator
        action = self.module.act(td.to(device), gen, deterministic=self.deterministic)[keys.ACTION]
        return action.to(action_mask.device)


def play_games(
    env: TorchEnv,
    lineup: Sequence[Bot],
    num_games: int,
    deal_seed: int,
    seed: int,
    batch_size: int = 256,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Play ``num_games`` games with ``lineup[s]`` in seat s; every seat's ``game_score``, float32 ``[G, S]``
    (NaN for a game the env cut off before it ended).

    Games are played ``batch_size`` at a time; chunk k resets from a generator seeded ``(deal_seed, k)``, so the
    same ``deal_seed`` and ``batch_size`` replay the same deals. ``seed`` seeds the step and bot generators.
    """
    seats = env.spec.num_seats
    if len(lineup) != seats:
        raise ConfigError(f"{env.spec.name} has {seats} seats but the lineup names {len(lineup)} players")
    if num_games < 1 or batch_size < 1:
        raise ConfigError(f"play_games: num_games={num_games} and batch_size={batch_size} must be >= 1")
    check_engine_players(env, lineup, "play_games")
    for seat, player in enumerate(lineup):  # a network of another game would fail at its first move
        trained_on = getattr(getattr(player, "module", None), "env_spec", None)
        check_same_env(trained_on, env.spec, f"play_games: the player of seat {seat} ({type(player).__name__})",
                       f"play a policy trained on {env.spec.name}", here="the match plays")  # fmt: skip
    step_gen = torch.Generator(device=device).manual_seed(seed)
    chunks = []
    for chunk, start in enumerate(range(0, num_games, batch_size)):
        reset_gen = torch.Generator(device=device).manual_seed(deal_seed * 1_000_003 + chunk)
        chunks.append(_play_batch(env, lineup, min(batch_size, num_games - start), reset_gen, step_gen))
    return torch.cat(chunks)


def _play_batch(
    env: TorchEnv, lineup: Sequence[Bot], num: int, reset_gen: torch.Generator, gen: torch.Generator
) -> torch.Tensor:
    """One game per row until every row's game ended; finished rows leave the batch (and are released)."""
    players = list(dict.fromkeys(lineup))  # each distinct player acts once per tick for all its rows
    owner_of_seat = torch.tensor([players.index(p) for p in lineup], device=reset_gen.device)
    scores = torch.full((num, env.spec.num_seats), float("nan"), device=reset_gen.device)
    index = torch.arange(num, device=reset_gen.device)
    state = env.reset_state(num, reset_gen)
    try:
        obs = env.observe(state)
        while len(index):
            pause_point()  # in a background evaluation, each tick waits for the learner to wait for its actors
            action = _act(players, owner_of_seat, obs, gen, lambda rows: [env.engine_state(state, i) for i in rows])
            state, out = env.step_state(state, action, gen, inplace=True)
            ended = out[keys.TERMINATED] | out[keys.TRUNCATED]
            if bool(ended.any()):
                if GAME_SCORE not in out:
                    raise ConfigError(f"{env.spec.name} gives no {GAME_SCORE!r} when a game ends, so a match "
                                      "cannot score it; use a game env of rl_lightning.envs.games")  # fmt: skip
                cut = out[keys.TRUNCATED] & ~out[keys.TERMINATED]  # cut off: no result
                scores[index[ended]] = out[GAME_SCORE][ended].float().masked_fill(cut[ended].unsqueeze(-1), math.nan)
                env.release(state[ended])
                keep = ~ended
                state, obs, index = state[keep], out[keep], index[keep]
            else:
                obs = out
    finally:
        env.release(state)
    return scores


def _act(
    players: list[Bot], owner_of_seat: torch.Tensor, obs: TensorDict, gen: torch.Generator,
    engine_states: Callable[[list[int]], list[Any]],
) -> torch.Tensor:  # fmt: skip
    """Each row's action from the player that owns its acting seat; a player that declares ``needs_engine_state``
    (a search bot) also gets ``engine_states=`` its rows' live engine states."""
    seat, mask, view = obs[keys.SEAT], obs[keys.ACTION_MASK], obs[keys.OBS]
    if len(players) == 1:
        return players[0](view, mask, seat, gen, **_engine(players[0], engine_states, range(len(seat))))
    owner = owner_of_seat[seat]
    action = torch.zeros_like(seat)
    for number, player in enumerate(players):
        rows = (owner == number).nonzero().squeeze(-1)
        if len(rows):
            engine = _engine(player, engine_states, rows.tolist())
            action[rows] = player(view[rows], mask[rows], seat[rows], gen, **engine).to(action.dtype)
    return action


def _engine(player: Any, engine_states: Callable[[list[int]], list[Any]], rows: Sequence[int]) -> dict[str, Any]:
    return {"engine_states": engine_states(list(rows))} if needs_engine_state(player) else {}


@dataclass
class MatchResult:
    """Every seat's score in a match's games, by deal and rotation.

    Attributes:
        tested: ``[D, S, S]``: ``tested[d, r]`` are the seats' scores of deal d with the tested player in seat r
            (NaN: that game was cut off before it ended).
        baseline: ``[D, S, S]``: ``baseline[d, r]`` a game of opponents only (on deal d when duplicate), whose
            seat r is the opponent's score in the tested player's place (NaN: cut off, or not played).
        duplicate: whether the rotations and the baseline share deals (then per-deal differences are paired).
        lower_is_better: the score's direction (Hearts points: lower is better).
        score_name: what the score is (``points``, ``return``).
        baseline_played: whether the baseline games were played (``play_match(baseline=False)``: not).
    """

    tested: torch.Tensor
    baseline: torch.Tensor
    duplicate: bool
    lower_is_better: bool
    score_name: str
    baseline_played: bool = True

    def ended(self, which: str = "tested") -> torch.Tensor:
        """``[D, S]`` bool: whether the game of deal d with the tested player (or the baseline) in seat r ended,
        rather than being cut off (or, for the baseline, not played)."""
        games = self.tested if which == "tested" else self.baseline
        return ~torch.isnan(games).any(-1)

    def seat_scores(self, which: str = "tested") -> torch.Tensor:
        """``[D, S]``: the tested player's (or the baseline's) score in seat r of deal d."""
        games = self.tested if which == "tested" else self.baseline
        seats = torch.arange(games.shape[1], device=games.device)
        return games[:, seats, seats]

    def outcomes(self, which: str = "tested") -> torch.Tensor:
        """``[D, S, S]`` int8: +1 where the seat-r player beat seat s, 0 a tie, -1 a loss (diagonal 0; also 0 in a
        game that was cut off: leave those out with ``ended``)."""
        games = self.tested if which == "tested" else self.baseline
        own = self.seat_scores(which).unsqueeze(-1)  # [D, S, 1]
        better = own < games if self.lower_is_better else own > games
        worse = own > games if self.lower_is_better else own < games
        return better.to(torch.int8) - worse.to(torch.int8)


def play_match(
    env: TorchEnv,
    tested: Bot,
    opponent: Bot,
    num_deals: int,
    seed: int = 0,
    duplicate: bool = True,
    batch_size: int = 256,
    baseline: bool = True,
) -> MatchResult:
    """``tested`` in each seat in turn against ``opponent`` in the others, ``num_deals`` deals per seat.

    Plays ``S * num_deals`` games, plus the baseline: ``num_deals`` games of opponents only when duplicate (one
    game gives the opponent's score in every seat), ``S * num_deals`` otherwise (seat r of the r-th batch).
    ``baseline=False`` skips it (the baseline then holds NaN).
    """
    seats = env.spec.num_seats

    def deal_of(kind: int, r: int) -> int:
        """The deal stream: one shared stream when duplicate, else one per rotation (kind 0) and baseline (1)."""
        return seed if duplicate else seed + 1 + r + kind * seats

    def lineup(r: int) -> list[Bot]:
        return [tested if s == r else opponent for s in range(seats)]

    def play(players: Sequence[Bot], deals: int, n: int) -> torch.Tensor:
        return play_games(env, players, num_deals, deals, seed=seed * 7_919 + 104_729 * n, batch_size=batch_size)

    rotations = torch.stack([play(lineup(r), deal_of(0, r), r) for r in range(seats)], 1)
    if not baseline:
        base = torch.full_like(rotations, float("nan"))
    elif duplicate:
        base = play([opponent] * seats, deal_of(1, 0), seats).unsqueeze(1).expand(-1, seats, -1).clone()
    else:
        base = torch.stack([play([opponent] * seats, deal_of(1, r), seats + 1 + r) for r in range(seats)], 1)
    return MatchResult(
        tested=rotations,
        baseline=base,
        duplicate=duplicate,
        lower_is_better=bool(getattr(env, "score_lower_is_better", False)),
        score_name=str(getattr(env, "score_name", "return")),
        baseline_played=baseline,
    )
