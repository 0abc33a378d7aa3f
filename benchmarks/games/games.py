"""Multi-seat games (issue 21): bundled bots' strength and the game envs' throughput, one function per section.

    python benchmarks/games/games.py --sections bots,throughput
    python benchmarks/games/games.py --sections bots --hands 2000
    python benchmarks/games/games.py --sections throughput --games 64 --seconds 3 --rounds 5

bots: the Hearts heuristic in seat 0 against three uniformly random seats (points taken per hand, mean and 95%
interval over ``--hands`` hands; four random seats beside it) and the Connect Four heuristic against random (win /
draw / loss over ``--c4-games`` games, seats alternated), both through ``OpenSpielEnv``.

throughput: OpenSpiel Hearts with ``--games`` games in parallel and uniformly random legal actions, decisions per
second through ``OpenSpielEnv`` (``BatchedEnv.step``; actions drawn in torch from the mask) against a bare
``pyspiel`` loop over the same number of states (``random.choice(state.legal_actions())``, chance drawn from
``random.random`` by the env's own ``sample_chance``), in interleaved rounds of ``--seconds`` each; the ratio is
per round, its median printed.

panel: the evaluation match driver (``rl_lightning.games``) on Hearts with duplicate deals and seats rotated:
HeartsHeuristic against three random seats, and a random seat against three heuristics, over ``--hands`` hands
each; points per hand with a 95% interval, the opponent's own points in the same seats and deals, the paired p.
    python benchmarks/games/games.py --sections panel --hands 2000

selfplay_throughput: self-play collection (``SelfPlayCollector``, a PPO with ppo_hearts.yaml's network acting for
all four seats) on Hearts with ``--games`` games against the bare pyspiel random loop, interleaved rounds.
credit_cost: the per-seat credit's share of a PPO update on one Hearts rollout (``--games`` x 32 ticks).
    python benchmarks/games/games.py --sections selfplay_throughput,credit_cost --games 64

spo_vs_ppo: SPO self-play (configs/spo_connect_four.yaml) against PPO self-play (configs/ppo_connect_four.yaml) on
Connect Four, both trained to ``--c4-steps`` env steps, ``--c4-match-games`` games with seats alternated (SPO's
win rate with its Wilson interval), and each against random.
    python benchmarks/games/games.py --sections spo_vs_ppo --c4-steps 30720 --c4-match-games 400

bc: behaviour cloning as PPO's starting point on Hearts (``benchmarks/games/_games_bc.py``): BC on HeartsHeuristic's
games, then PPO self-play from its weights and from scratch side by side; points per hand against three random seats at
each checkpoint.
    python benchmarks/games/games.py --sections bc --bc-games 300 --ppo-steps 204800 --seconds 900

mcts: a Connect Four PPO checkpoint (or ppo_connect_four.yaml trained for ``--mcts-train-minutes``) against OpenSpiel's
MCTSBot with random rollouts and against random, seats alternated (``benchmarks/games/_games_mcts.py``).
    python benchmarks/games/games.py --sections mcts --mcts-ckpt PATH/last.ckpt --mcts-games 200 --mcts-simulations 100
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from rl_lightning import keys  # noqa: E402
from rl_lightning.envs.base import BatchedEnv  # noqa: E402
from rl_lightning.envs.games import GAME_SCORE, OpenSpielEnv  # noqa: E402
from rl_lightning.envs.games.bots import ConnectFourHeuristic, HeartsHeuristic, RandomBot  # noqa: E402
from rl_lightning.envs.games.open_spiel import sample_chance  # noqa: E402


def play(env: BatchedEnv, bots: list[Any], games: int, generator: torch.Generator) -> torch.Tensor:
    """Play ``games`` complete games with ``bots[seat]`` acting for each seat; each ended game's ``game_score``."""
    out = env.reset()
    scores: list[torch.Tensor] = []
    done = 0
    while done < games:
        seat = out[keys.SEAT]
        action = torch.zeros_like(seat)
        for index, bot in enumerate(bots):
            rows = seat == index
            if bool(rows.any()):
                action[rows] = bot(out[keys.OBS][rows], out[keys.ACTION_MASK][rows], seat[rows], generator)
        out = env.step(action)
        ended = out[keys.TERMINATED] | out[keys.TRUNCATED]
        if bool(ended.any()):
            scores.append(out[GAME_SCORE][ended])
            done += int(ended.sum())
    return torch.cat(scores)[:games]


def _interval(values: torch.Tensor) -> str:
    mean = float(values.mean())
    half = 1.96 * float(values.std()) / math.sqrt(len(values))
    return f"{mean:.2f} ± {half:.2f}"


def run_bots(hands: int, c4_games: int, num_envs: int, seed: int) -> None:
    """Hearts heuristic vs three random seats (points per hand); Connect Four heuristic vs random (W/D/L)."""
    generator = torch.Generator().manual_seed(seed)
    random_bot, heuristic = RandomBot(), HeartsHeuristic()
    print(f"Hearts, {hands} hands per line, points taken per hand (mean, 95% interval):")
    for game_kwargs in ({}, {"pass_cards": False}):
        hearts = BatchedEnv(OpenSpielEnv("open_spiel:hearts", game_kwargs), num_envs, seed=seed)
        start = time.perf_counter()
        with_heuristic = play(hearts, [heuristic, random_bot, random_bot, random_bot], hands, generator)
        all_random = play(hearts, [random_bot] * 4, hands, generator)
        print(f"  game_kwargs={game_kwargs} ({time.perf_counter() - start:.0f} s): HeartsHeuristic in seat 0 vs 3 "
              f"random {_interval(with_heuristic[:, 0])} (the random seats {_interval(with_heuristic[:, 1:].flatten())}"
              f"); 4 random seats, seat 0: {_interval(all_random[:, 0])}")  # fmt: skip
    c4 = BatchedEnv(OpenSpielEnv("open_spiel:connect_four"), num_envs, seed=seed)
    heuristic_c4 = ConnectFourHeuristic()
    half = c4_games // 2
    first = play(c4, [heuristic_c4, random_bot], half, generator)[:, 0]
    second = play(c4, [random_bot, heuristic_c4], c4_games - half, generator)[:, 1]
    result = torch.cat([first, second])
    rates = [float((result == v).float().mean()) for v in (1.0, 0.0, -1.0)]
    print(f"Connect Four, ConnectFourHeuristic vs random over {len(result)} games (seats alternated): "
          f"win {rates[0]:.3f}, draw {rates[1]:.3f}, loss {rates[2]:.3f}")  # fmt: skip


def _bare_rate(game: Any, num_games: int, seconds: float, rng: random.Random) -> float:
    """Decisions per second of a plain pyspiel loop over ``num_games`` states with uniformly random actions."""

    def settle(state: Any) -> None:  # chance drawn as OpenSpielEnv draws it
        while state.is_chance_node():
            state.apply_action(sample_chance(state.chance_outcomes(), rng.random()))

    states = [game.new_initial_state() for _ in range(num_games)]
    for state in states:
        settle(state)
    decisions, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for index, state in enumerate(states):
            state.apply_action(rng.choice(state.legal_actions()))
            settle(state)
            if state.is_terminal():
                states[index] = state = game.new_initial_state()
                settle(state)
        decisions += num_games
    return decisions / (time.perf_counter() - start)


def _env_rate(env: BatchedEnv, seconds: float, generator: torch.Generator) -> float:
    """Decisions per second through ``BatchedEnv.step`` with uniformly random legal actions drawn in torch."""
    out = env.reset()
    decisions, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        mask = out[keys.ACTION_MASK]
        noise = torch.rand(mask.shape, generator=generator)
        out = env.step(torch.where(mask, noise, -1.0).argmax(-1))
        decisions += env.num_envs
    return decisions / (time.perf_counter() - start)


def run_throughput(num_games: int, seconds: float, rounds: int, seed: int) -> None:
    """OpenSpielEnv vs a bare pyspiel loop on Hearts, random actions, interleaved rounds."""
    env = BatchedEnv(OpenSpielEnv("open_spiel:hearts"), num_games, seed=seed)
    game = env.env.game
    generator, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    ratios = []
    print(f"Hearts throughput, {num_games} games in parallel, random legal actions (decisions/s):")
    for index in range(rounds):
        bare = _bare_rate(game, num_games, seconds, rng)
        ours = _env_rate(env, seconds, generator)
        ratios.append(ours / bare)
        print(f"  round {index}: bare pyspiel {bare:,.0f}  OpenSpielEnv {ours:,.0f}  ratio {ours / bare:.2f}")
    print(f"  median ratio OpenSpielEnv / bare loop: {statistics.median(ratios):.2f}")


def run_panel(hands: int, num_envs: int, seed: int) -> None:
    """The match driver on the bundled bots (``rl_lightning.games``): Hearts, seats rotated, duplicate deals.

    HeartsHeuristic as the tested player against three random seats, and a random player against three
    heuristics; each with its baseline (the opponent itself in the tested seat over the same deals) and the
    paired p-value over deals.
    """
    from rl_lightning.games import match_metrics, play_match

    env = OpenSpielEnv("open_spiel:hearts")
    deals = hands // env.spec.num_seats
    print(f"Hearts panel, {deals} duplicate deals x 4 seat rotations = {4 * deals} hands per match, points per "
          "hand (95% t interval over deals):")  # fmt: skip
    for name, tested, opponent in (("HeartsHeuristic vs 3 random", HeartsHeuristic(), RandomBot()),
                                   ("random vs 3 HeartsHeuristic", RandomBot(), HeartsHeuristic())):  # fmt: skip
        start = time.perf_counter()
        m = match_metrics(play_match(env, tested, opponent, deals, seed=seed, batch_size=num_envs))
        print(f"  {name}: {m['points_per_hand']:.2f} [{m['points_per_hand_low']:.2f}, "
              f"{m['points_per_hand_high']:.2f}]; the opponent in the same seats {m['baseline_points_per_hand']:.2f};"
              f" paired p = {m['p_value']:.2g} ({time.perf_counter() - start:.0f} s)")  # fmt: skip


def _selfplay_parts(num_games: int, seed: int) -> tuple[Any, Any, Any]:
    """A PPO with ``configs/ppo_hearts.yaml``'s network and update settings, its Hearts collector (all seats
    ``self``), and the acting policy."""
    from rl_lightning.algos import PPO
    from rl_lightning.data.league import SeatPlayers
    from rl_lightning.data.selfplay import SelfPlayCollector

    torch.manual_seed(seed)
    env = BatchedEnv(OpenSpielEnv("open_spiel:hearts"), num_games, seed=seed)
    module = PPO(env_spec=env.spec, hidden_sizes=(256, 256), update_epochs=4, num_minibatches=4, ent_coef=0.01)
    collector = SelfPlayCollector(env, SeatPlayers(["self"] * 4, None, env.device), seed=seed)
    return module, collector, module.acting_policy(env.env, deterministic=False, training=True)


def run_selfplay_throughput(num_games: int, seconds: float, rounds: int, seed: int) -> None:
    """Self-play collection on Hearts (the PPO policy acting for all four seats, one batched forward per tick)
    against the bare pyspiel random loop, decisions per second, interleaved rounds."""
    from tensordict import TensorDict

    from rl_lightning.data.league import random_actor

    module, collector, policy = _selfplay_parts(num_games, seed)
    game, rng = collector.env.env.game, random.Random(seed)

    def uniform(obs: TensorDict, generator: torch.Generator) -> TensorDict:  # the collector without a network
        return TensorDict({keys.ACTION: random_actor(obs, generator)}, batch_size=obs.batch_size)

    def rate(acting: Any) -> float:
        collector.reset_episodes()  # fresh games: the carried rows of one policy do not fit the other's rows
        collector.rollout(acting, 1, module.policy_version)
        decisions, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            collector.rollout(acting, 16, module.policy_version)
            decisions += 16 * num_games
        return decisions / (time.perf_counter() - start)

    ratios, uniform_ratios = [], []
    print(f"Hearts self-play collection, {num_games} games, 4 seats self (decisions/s):")
    for index in range(rounds):
        bare = _bare_rate(game, num_games, seconds, rng)
        ours, plain = rate(policy), rate(uniform)
        ratios.append(ours / bare)
        uniform_ratios.append(plain / bare)
        print(f"  round {index}: bare pyspiel {bare:,.0f}  SelfPlayCollector with PPO [256, 256] {ours:,.0f} "
              f"(ratio {ours / bare:.2f}), with a uniform policy {plain:,.0f} (ratio {plain / bare:.2f})")  # fmt: skip
    print(f"  median ratio self-play collection / bare random loop: {statistics.median(ratios):.2f} with the PPO "
          f"policy, {statistics.median(uniform_ratios):.2f} with a uniform policy (target >= 0.5)")  # fmt: skip


def run_credit_cost(num_games: int, num_steps: int, repeats: int, seed: int) -> None:
    """The per-seat credit (``seat_credit`` + ``seat_gae``) against a whole PPO update on one Hearts rollout
    (``process_rollout`` with its critic forward and the credit, then 4 epochs x 4 minibatches), median times."""
    from rl_lightning.algos.ppo import TRAIN_KEY
    from rl_lightning.objectives.seat_credit import seat_credit, seat_gae

    module, collector, policy = _selfplay_parts(num_games, seed)
    optimizer = torch.optim.Adam(module.parameters(), lr=3e-4, eps=1e-5)
    collector.rollout(policy, num_steps, 0)  # a first rollout, so that the timed ones carry open decisions
    credit_times, update_times = [], []
    for _ in range(repeats):
        batch = collector.rollout(policy, num_steps, module.policy_version)
        start = time.perf_counter()
        processed = module.process_rollout(batch.clone())
        module.update(processed.reshape(-1)[processed.reshape(-1)[TRAIN_KEY]], optimizer)
        update_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        credit = seat_credit(processed[keys.SEAT], processed[keys.REWARD], processed[keys.TERMINATED],
                             processed[keys.TRUNCATED], processed[keys.VALUE])  # fmt: skip
        seat_gae(credit, processed[keys.VALUE], 1.0, 0.95)
        credit_times.append(time.perf_counter() - start)
    credit, update = statistics.median(credit_times), statistics.median(update_times)
    print(f"Per-seat credit on a Hearts rollout of [{4 + num_steps}, {num_games}] rows: {credit * 1e3:.1f} ms; the "
          f"whole update {update * 1e3:.0f} ms; share {credit / update:.1%} (target < 5%)")  # fmt: skip


def _c4_record(module: Any, opponent: Any, games: int, seed: int) -> tuple[int, int, int]:
    """``(wins, draws, losses)`` of ``module`` (sampling from its policy network) in ``games`` Connect Four games
    against ``opponent``, seats alternated (the match driver, half the games in each seat)."""
    from rl_lightning.games import PolicyBot, play_match

    env = OpenSpielEnv("open_spiel:connect_four")
    module.eval()
    result = play_match(env, PolicyBot(module, deterministic=False, seed=seed), opponent, games // 2, seed=seed,
                        duplicate=False, baseline=False)  # fmt: skip
    score = result.seat_scores()  # [games / 2, 2]: the tested player's return in seat 0, then in seat 1
    return int((score > 0).sum()), int((score == 0).sum()), int((score < 0).sum())


def _rate(record: tuple[int, int, int]) -> str:
    from rl_lightning.games.stats import wilson_interval

    wins, draws, losses = record
    rate = wilson_interval(wins, wins + draws + losses)
    return f"win {rate.mean:.3f} [{rate.low:.3f}, {rate.high:.3f}] (W/D/L {wins}/{draws}/{losses})"


def run_spo_vs_ppo(env_steps: int, games: int, workdir: str, spo_ckpt: str, ppo_ckpt: str, seed: int) -> None:
    """SPO self-play against PPO self-play on Connect Four at equal env steps (decisions of both seats).

    Trains ``configs/spo_connect_four.yaml`` and ``configs/ppo_connect_four.yaml`` to ``env_steps`` each (one after
    the other, shipped settings otherwise), unless their checkpoints are given, then plays SPO's policy network
    against PPO's (both sampling, seats alternated) and each against uniformly random play. SPO plays its prior
    alone here: SPO's search steps snapshots of the rl_lightning env, which the match driver's players do not hold.
    """
    import subprocess

    from rl_lightning.games.panel import _load_module

    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[2]
    checkpoints = {"spo": spo_ckpt, "ppo": ppo_ckpt}
    for algo in ("spo", "ppo"):
        if checkpoints[algo]:
            continue
        args = ["fit", "--config", str(root / "configs" / f"{algo}_connect_four.yaml"),
                "--data.init_args.total_env_steps", str(env_steps), "--trainer.logger.init_args.save_dir",
                str(work / "runs"), "--trainer.logger.init_args.version", f"steps_{env_steps}",
                "--trainer.enable_progress_bar", "false"]  # fmt: skip
        start = time.perf_counter()
        with open(work / f"{algo}.log", "w") as log:
            code = subprocess.run([sys.executable, "-m", "rl_lightning.cli", *args], cwd=work, stdout=log,
                                  stderr=subprocess.STDOUT, check=False).returncode  # fmt: skip
        if code != 0:
            raise SystemExit(f"{algo} training failed; see {work / f'{algo}.log'}")
        print(f"{algo}: trained {env_steps} env steps in {time.perf_counter() - start:.0f} s: rl-lightning "
              f"{' '.join(args)}")  # fmt: skip
        checkpoints[algo] = str(work / "runs" / f"{algo}_connect_four" / f"steps_{env_steps}" / "checkpoints" /
                                "last.ckpt")  # fmt: skip
    spo, ppo = (_load_module(checkpoints[a], torch.device("cpu")) for a in ("spo", "ppo"))
    print(f"SPO vs PPO, {games} games, seats alternated: SPO {_rate(_c4_record(spo, _policy_bot(ppo), games, seed))}")
    for name, module in (("SPO", spo), ("PPO", ppo)):
        print(f"{name} vs random, {games} games: {name} {_rate(_c4_record(module, RandomBot(), games, seed + 1))}")
    searched = _c4_search_record(spo, _policy_bot(ppo), games, seed + 2)
    print(f"SPO with its search (its acting form) vs PPO, {games} games, seats alternated: SPO {_rate(searched)}")
    searched = _c4_search_record(spo, RandomBot(), games, seed + 3)
    print(f"SPO with its search vs random, {games} games: SPO {_rate(searched)}")
    greedy = _policy_bot(ppo, deterministic=True)  # PPO's evaluation form (its GameEvaluation plays greedy)
    print(f"SPO vs greedy PPO, {games} games: SPO {_rate(_c4_record(spo, greedy, games, seed + 4))}")
    searched = _c4_search_record(spo, greedy, games, seed + 5)
    print(f"SPO with its search vs greedy PPO, {games} games: SPO {_rate(searched)}")
    searched = _c4_search_record(spo, greedy, games, seed + 6, greedy=True)
    print(f"SPO with its search, greedy read-out, vs greedy PPO, {games} games: SPO {_rate(searched)}")


def _c4_search_record(spo: Any, opponent: Any, games: int, seed: int, greedy: bool = False) -> tuple[int, int, int]:
    """``(wins, draws, losses)`` of SPO acting through its search (a draw from the target, as its evaluation plays;
    ``greedy``: the target's argmax, its ``eval_greedy`` form) in ``games`` Connect Four games against the bot
    ``opponent``, seats alternated; a loop of its own, since SPO's search steps snapshots of the rl_lightning env,
    which the match driver's players do not hold."""
    from rl_lightning.algos.spo.search import smc_search

    env = OpenSpielEnv("open_spiel:connect_four")
    spo.eval()
    gen = torch.Generator().manual_seed(seed)
    scores = []
    for seat in (0, 1):
        state = env.reset_state(games // 2, gen)
        obs, index = env.observe(state), torch.arange(games // 2)
        score = torch.zeros(games // 2)
        while len(index):
            action = opponent(obs[keys.OBS], obs[keys.ACTION_MASK], obs[keys.SEAT], gen)
            rows = (obs[keys.SEAT] == seat).nonzero().squeeze(-1)
            if len(rows):
                found = smc_search(env, state[rows], obs[rows], spo.prior, spo.search_config,
                                   spo.search_temperature(), gen, greedy=greedy)  # fmt: skip
                action[rows] = found.action
            state, out = env.step_state(state, action, gen, inplace=True)
            ended = out[keys.TERMINATED] | out[keys.TRUNCATED]
            score[index[ended]] = out[GAME_SCORE][ended, seat]
            env.release(state[ended])
            state, obs, index = state[~ended], out[~ended], index[~ended]
        scores.append(score)
    score = torch.cat(scores)
    return int((score > 0).sum()), int((score == 0).sum()), int((score < 0).sum())


def _policy_bot(module: Any, deterministic: bool = False) -> Any:
    from rl_lightning.games import PolicyBot

    module.eval()
    return PolicyBot(module, deterministic=deterministic, seed=7)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="bots,throughput",
                        help="comma list of bots,throughput,panel,selfplay_throughput,credit_cost")  # fmt: skip
    parser.add_argument("--hands", type=int, default=2000, help="Hearts hands per bots match")
    parser.add_argument("--c4-games", type=int, default=400, help="Connect Four games for the bots section")
    parser.add_argument("--num-envs", type=int, default=64, help="games in parallel in the bots section")
    parser.add_argument("--games", type=int, default=64, help="games in parallel in the throughput section")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per throughput measurement")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved throughput rounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--c4-steps", type=int, default=30_720, help="spo_vs_ppo: env steps each algorithm trains")
    parser.add_argument("--c4-match-games", type=int, default=400, help="spo_vs_ppo: games per match")
    parser.add_argument("--c4-workdir", default="bench_spo_vs_ppo", help="spo_vs_ppo: runs and logs go here")
    parser.add_argument("--spo-ckpt", default="", help="spo_vs_ppo: an SPO checkpoint to play (skips training)")
    parser.add_argument("--ppo-ckpt", default="", help="spo_vs_ppo: a PPO checkpoint to play (skips training)")
    parser.add_argument("--bc-games", type=int, default=300, help="bc: HeartsHeuristic games recorded")
    parser.add_argument("--bc-epochs", type=int, default=5, help="bc: BC training epochs")
    parser.add_argument("--ppo-steps", type=int, default=204_800, help="bc: env-step budget of each PPO run")
    parser.add_argument("--ckpt-every", type=int, default=20_480, help="bc: env steps between scored checkpoints")
    parser.add_argument("--eval-hands", type=int, default=400, help="bc: hands per checkpoint evaluation")
    parser.add_argument("--target", type=float, default=5.0, help="bc: points-per-hand level against random")
    parser.add_argument("--workdir", default="bench_bc", help="bc: records, runs and logs go here")
    parser.add_argument("--mcts-ckpt", default="", help="mcts: the PPO checkpoint to play (else one is trained)")
    parser.add_argument("--mcts-games", type=int, default=200, help="mcts: games per match, seats alternated")
    parser.add_argument("--mcts-simulations", type=int, default=100, help="mcts: MCTSBot simulations per move")
    parser.add_argument("--mcts-train-minutes", type=int, default=10, help="mcts: wall clock of the PPO fit")
    parser.add_argument("--mcts-workdir", default="bench_mcts", help="mcts: the fit's runs and log go here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    known = {"bots", "throughput", "panel", "selfplay_throughput", "credit_cost"}
    known.add("spo_vs_ppo")
    known.add("bc")
    known.add("mcts")
    unknown = sections - known
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; choose from {','.join(sorted(known))}")
    if "bots" in sections:
        run_bots(args.hands, args.c4_games, args.num_envs, args.seed)
    if "throughput" in sections:
        run_throughput(args.games, args.seconds, args.rounds, args.seed)
    if "panel" in sections:
        run_panel(args.hands, args.num_envs, args.seed)
    if "selfplay_throughput" in sections:
        run_selfplay_throughput(args.games, args.seconds, args.rounds, args.seed)
    if "credit_cost" in sections:
        run_credit_cost(args.games, 32, args.rounds, args.seed)
    if "spo_vs_ppo" in sections:
        run_spo_vs_ppo(args.c4_steps, args.c4_match_games, args.c4_workdir, args.spo_ckpt, args.ppo_ckpt, args.seed)
    if "bc" in sections:
        from _games_bc import run_bc

        run_bc(args.bc_games, args.bc_epochs, args.ppo_steps, args.ckpt_every, args.seconds, args.eval_hands,
               args.target, args.workdir, args.seed)  # fmt: skip
    if "mcts" in sections:
        from _games_mcts import run_mcts

        run_mcts(args.mcts_ckpt, args.mcts_games, args.mcts_simulations, args.mcts_train_minutes, args.mcts_workdir,
                 args.seed)  # fmt: skip


if __name__ == "__main__":
    main()
