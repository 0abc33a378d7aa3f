"""Connect Four: the searching agent and the network alone against OpenSpiel's MCTSBot (issue 27).

Trains ``--config`` (default ``configs/alphazero_connect_four.yaml``: AlphaZero self-play on the convolutional
board encoder; ``ppo_connect_four_board.yaml``: PPO self-play) for at most ``--train-minutes`` of wall clock, the
whole fit (``--trainer.max_time``), unless ``--ckpt`` names a checkpoint;
then plays, seats alternated (half the games in each seat), ``--games`` games each:

* the searching agent: ``NetworkMCTS`` (``rl_lightning.games.search``), PUCT with the network's policy as prior and
  its value head at the leaves, ``--simulations`` simulations per move, greedy (most visited move);
* the network alone, greedy (what ``GameEvaluation`` plays by default);
* with ``--players ...,onnx``: the network alone through the ONNX graph ``rl-lightning export`` writes (into
  ``--workdir``), run by onnxruntime: its most probable legal move, outside the trainer;

against ``OpenSpielMCTSBot`` (OpenSpiel's ``MCTSBot``: UCT c = 2, ``--mcts-simulations`` simulations, one random
rollout per leaf, MCTS-Solver backups). Each line: win / draw / loss, the win rate with its 95% Wilson interval, the
sign test, and each side's seconds per move as played (the search evaluates the leaves of all games in play in one
batched forward, so its time per move is amortised over them), then both players' time per move one position at a
time (``--timing-positions`` positions from the opening and middle game, one at a time).

``--jobs K`` plays the games in K processes (one torch thread each; deals and MCTS seeds differ per process), so a
16-core machine plays 400 games in minutes; only this repository and its venv are needed.

``--spo-profile``: SPO's search on Connect Four (``configs/spo_connect_four.yaml``'s search, 32 games), acting
ticks per second before (a copy of every particle at every step, each copying its row's RNG) and after (one copy
per particle, stepped in place; deterministic games share the never-drawn RNG), interleaved rounds in one run; the
ratio per round and its median.

    python benchmarks/games/connect_four_search.py --train-minutes 30 --games 400 --simulations 800 --jobs 16
    python benchmarks/games/connect_four_search.py --ckpt PATH/last.ckpt --games 40 --jobs 2
    python benchmarks/games/connect_four_search.py --spo-profile --rounds 5
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.envs.games.bots import OpenSpielMCTSBot  # noqa: E402
from rl_lightning.games import MatchResult, PolicyBot, match_metrics, play_match  # noqa: E402
from rl_lightning.games.search import NetworkMCTS, load_searchable  # noqa: E402


class Timed:
    """A bot that counts its seconds and the moves it made (rows it was called for)."""

    def __init__(self, bot: Any) -> None:
        self.bot = bot
        self.needs_engine_state = getattr(bot, "needs_engine_state", False)
        self.seconds, self.moves = 0.0, 0

    def check_env(self, env: Any, field: str) -> None:
        self.bot.check_env(env, field)

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        start = time.perf_counter()
        action = self.bot(*args, **kwargs)
        self.seconds += time.perf_counter() - start
        self.moves += len(action)
        return action


class CopyEveryStep:
    """The env seen as a tensor-state env, so SPO's search copies every particle at every step (before issue 27)."""

    state_is_tensors = True

    def __init__(self, env: Any) -> None:
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def train(minutes: int, workdir: Path, nice: int, config: str) -> str:
    """``rl-lightning fit --config CONFIG`` stopped after ``minutes``; its last.ckpt."""
    args = ["fit", "--config", str(ROOT / "configs" / config),
            "--trainer.max_time", f"00:00:{minutes:02d}:00", "--trainer.logger.init_args.save_dir",
            str(workdir / "runs"), "--trainer.logger.init_args.version", "search_bench",
            "--trainer.enable_progress_bar", "false"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    name = Path(config).stem
    with open(workdir / f"{name}.log", "w") as log:
        command = ["nice", "-n", str(nice)] if nice else []
        code = subprocess.run([*command, sys.executable, "-m", "rl_lightning.cli", *args], cwd=workdir, stdout=log,
                              stderr=subprocess.STDOUT, env=env, check=False).returncode  # fmt: skip
    if code != 0:
        raise SystemExit(f"training failed; see {workdir / (name + '.log')}")
    print(f"trained for {time.perf_counter() - start:.0f} s (whole fit): rl-lightning {' '.join(args)}")
    return str(workdir / "runs" / name / "search_bench" / "checkpoints" / "last.ckpt")


class OnnxPolicy:
    """The network alone as ``rl-lightning export`` writes it, run by onnxruntime (one thread): the graph's
    ``action`` output, its most probable legal move."""

    def __init__(self, path: str) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]  # obs, action_mask

    def check_env(self, env: Any, field: str) -> None:
        shape = self.session.get_inputs()[0].shape[1:]
        if list(shape) != list(env.spec.obs_shape):
            raise SystemExit(f"{field}: the exported graph reads {shape}, the env gives {list(env.spec.obs_shape)}")

    def __call__(self, obs: Any, action_mask: torch.Tensor, seat: torch.Tensor, generator: Any) -> torch.Tensor:
        feed = {self.inputs[0]: obs.cpu().numpy().astype("float32"), self.inputs[1]: action_mask.cpu().numpy()}
        return torch.from_numpy(self.session.run(["action"], feed)[0]).long()


def _player(kind: str, ckpt: str, simulations: int, c_puct: float) -> Any:
    if kind == "onnx":
        return OnnxPolicy(ckpt)
    module = load_searchable(ckpt)
    if kind == "search":
        return NetworkMCTS(module, simulations=simulations, c_puct=c_puct)
    return PolicyBot(module, deterministic=True)


def _job(task: tuple[str, str, int, float, int, int, int]) -> tuple[torch.Tensor, float, int, float, int]:
    """One process's share of a match: ``deals`` games per seat; its tested scores and both sides' timings."""
    kind, ckpt, simulations, c_puct, mcts_simulations, deals, seed = task
    torch.set_num_threads(1)
    env = OpenSpielEnv("open_spiel:connect_four")
    tested = Timed(_player(kind, ckpt, simulations, c_puct))
    mcts = Timed(OpenSpielMCTSBot(simulations=mcts_simulations, seed=seed))
    result = play_match(env, tested, mcts, deals, seed=seed, duplicate=False, baseline=False)
    return result.tested, tested.seconds, tested.moves, mcts.seconds, mcts.moves


def match(kind: str, ckpt: str, args: argparse.Namespace) -> dict[str, float]:
    """``kind`` (search or net) against MCTSBot over ``args.games`` games in ``args.jobs`` processes."""
    jobs = max(1, min(args.jobs, args.games // 2))
    shares = [args.games // 2 // jobs + (j < args.games // 2 % jobs) for j in range(jobs)]
    tasks = [(kind, ckpt, args.simulations, args.c_puct, args.mcts_simulations, deals, args.seed + 1_000 * j)
             for j, deals in enumerate(shares) if deals]  # fmt: skip
    start = time.perf_counter()
    if jobs == 1:
        parts = [_job(task) for task in tasks]
    else:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            parts = pool.map(_job, tasks)
    tested = torch.cat([p[0] for p in parts])
    result = MatchResult(tested, torch.full_like(tested, float("nan")), False, False, "return")
    metrics = match_metrics(result)
    metrics["seconds"] = time.perf_counter() - start
    metrics["move_s"] = sum(p[1] for p in parts) / max(sum(p[2] for p in parts), 1)
    metrics["mcts_move_s"] = sum(p[3] for p in parts) / max(sum(p[4] for p in parts), 1)
    return metrics


def _line(name: str, m: dict[str, float]) -> str:
    games = int(m["games"])
    wins, draws = round(m["win_rate"] * games), round(m["draw_rate"] * games)
    return (f"| {name} | {m['win_rate']:.3f} [{m['win_rate_low']:.3f}, {m['win_rate_high']:.3f}] | "
            f"{wins} / {draws} / {games - wins - draws} | {m['p_value_win_rate']:.1g} | {m['move_s'] * 1e3:.1f} | "
            f"{m['mcts_move_s'] * 1e3:.1f} | {m['seconds']:.0f} |")  # fmt: skip


def positions(count: int, seed: int) -> list[Any]:
    """``count`` Connect Four positions 0-19 random moves in (none finished)."""
    import pyspiel

    game, rng, found = pyspiel.load_game("connect_four"), random.Random(seed), []
    while len(found) < count:
        state = game.new_initial_state()
        for _ in range(rng.randrange(20)):
            state.apply_action(rng.choice(state.legal_actions()))
            if state.is_terminal():
                break
        if not state.is_terminal():
            found.append(state)
    return found


def time_per_move(ckpt: str, args: argparse.Namespace) -> tuple[float, float]:
    """Seconds per move of the search and of MCTSBot, one position at a time (no batching), same positions."""
    torch.set_num_threads(1)
    search = NetworkMCTS(load_searchable(ckpt), simulations=args.simulations, c_puct=args.c_puct)
    mcts = OpenSpielMCTSBot(simulations=args.mcts_simulations, seed=args.seed)
    gen, out = torch.Generator().manual_seed(args.seed), []
    states = positions(args.timing_positions, args.seed)

    def move(bot: Any, state: Any) -> None:
        mask = torch.zeros(1, 7, dtype=torch.bool)
        mask[0, state.legal_actions()] = True
        bot(None, mask, torch.tensor([state.current_player()]), gen, engine_states=[state])

    for bot in (search, mcts):
        move(bot, states[0])  # warm-up (first forward, imports)
        start = time.perf_counter()
        for state in states:
            move(bot, state)
        out.append((time.perf_counter() - start) / len(states))
    return out[0], out[1]


def run_matches(args: argparse.Namespace) -> None:
    ckpt = args.ckpt
    if not ckpt:
        work = Path(args.workdir).resolve()
        work.mkdir(parents=True, exist_ok=True)
        ckpt = train(args.train_minutes, work, args.nice, args.config)
    print(f"checkpoint {ckpt}: {args.games} games per line, seats alternated, against OpenSpiel MCTSBot "
          f"({args.mcts_simulations} simulations, random rollouts, uct_c 2, solver); jobs {args.jobs}; "
          f"machine load {os.getloadavg()[0]:.1f}")  # fmt: skip
    print("| player | win rate [95% Wilson] | W / D / L | sign-test p | its s/move (ms) | MCTSBot ms/move | wall s |")
    print("|---|---|---|---|---|---|---|")
    names = {"search": f"NetworkMCTS {args.simulations} sims (c_puct {args.c_puct})",
             "net": "network alone (greedy)", "onnx": "network alone, exported ONNX (onnxruntime, greedy)"}  # fmt: skip
    for kind in args.players.split(","):
        played = ckpt
        if kind == "onnx":
            from rl_lightning.export import export_policy

            Path(args.workdir).mkdir(parents=True, exist_ok=True)
            played = str(export_policy(ckpt, "onnx", Path(args.workdir).resolve() / f"{Path(ckpt).stem}.onnx")[0])
        print(_line(names[kind], match(kind, played, args)), flush=True)
    search_s, mcts_s = time_per_move(ckpt, args)
    print(
        f"one position at a time ({args.timing_positions} positions): NetworkMCTS {args.simulations} sims "
        f"{search_s * 1e3:.1f} ms/move, MCTSBot {args.mcts_simulations} sims {mcts_s * 1e3:.1f} ms/move"
    )


def spo_profile(args: argparse.Namespace) -> None:
    """SPO's acting tick on Connect Four, before and after, interleaved rounds (the module docstring)."""
    from rl_lightning.algos import SPO
    from rl_lightning.envs.base import BatchedEnv

    torch.set_num_threads(1)
    env = BatchedEnv(OpenSpielEnv("open_spiel:connect_four"), 32, "cpu", seed=0)
    module = SPO(env_spec=env.spec, hidden_sizes=(256, 256), num_particles=16, search_depth=4, resample_period=4,
                 init_log_temperature=0.5).eval()  # fmt: skip
    core = env.env
    new_copy = type(core)._copy_row

    def old_copy(self: Any, row: Any) -> Any:  # the copy before issue 27: the RNG copied for every game
        rng = random.Random()
        rng.setstate(row.rng.getstate())
        return type(row)(row.state.clone(), rng, row.steps)

    obs = env.reset()
    gen = torch.Generator().manual_seed(0)
    ratios = []
    for round_ in range(args.rounds):
        rates = {}
        for name in ("before", "after"):
            type(core)._copy_row = old_copy if name == "before" else new_copy
            view = CopyEveryStep(core) if name == "before" else core
            start, ticks = time.perf_counter(), 0
            while time.perf_counter() - start < args.seconds:
                result = module._search(view, env.state, obs, module.prior, module.search_config,
                                        module.search_temperature(), gen, explore=True)  # fmt: skip
                obs = env.step(result.action)
                ticks += 1
            rates[name] = ticks / (time.perf_counter() - start)
        type(core)._copy_row = new_copy
        ratios.append(rates["after"] / rates["before"])
        print(
            f"round {round_}: before {rates['before']:.2f} ticks/s, after {rates['after']:.2f} ticks/s "
            f"(32 games x 16 particles x depth 4), ratio {ratios[-1]:.2f}",
            flush=True,
        )
    print(
        f"median ratio after/before: {statistics.median(ratios):.2f} over {args.rounds} rounds; live games "
        f"{core.live_count} (32: nothing leaked); load {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", default="", help="an AlphaZero, PPO or SPO Connect Four checkpoint (default: train "
                        "one)")
    parser.add_argument("--train-minutes", type=int, default=30)
    parser.add_argument("--config", default="alphazero_connect_four.yaml",
                        help="the configs/ file trained without --ckpt (ppo_connect_four_board.yaml: PPO self-play)")
    parser.add_argument("--workdir", default="connect_four_search_runs")
    parser.add_argument("--nice", type=int, default=0, help="train under nice -n N (a shared machine)")
    parser.add_argument("--games", type=int, default=400)
    parser.add_argument("--simulations", type=int, default=800, help="NetworkMCTS simulations per move")
    parser.add_argument("--c-puct", type=float, default=1.5, help="PUCT constant (the PPO board network: 3)")
    parser.add_argument("--mcts-simulations", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=1, help="processes playing the games (1 torch thread each)")
    parser.add_argument("--players", default="search,net", help="which players meet MCTSBot, in order: search "
                        "(NetworkMCTS), net (the network alone, greedy), onnx (the network alone through the graph "
                        "rl-lightning export writes, run by onnxruntime)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing-positions", type=int, default=20)
    parser.add_argument("--spo-profile", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0, help="--spo-profile: seconds per side per round")
    args = parser.parse_args()
    if args.games < 2 or args.games % 2:
        raise SystemExit(f"--games={args.games}: give an even number >= 2 (seats alternated)")
    unknown = set(args.players.split(",")) - {"search", "net", "onnx"}
    if unknown:
        raise SystemExit(f"--players={args.players}: {sorted(unknown)} unknown; use search, net, onnx")
    spo_profile(args) if args.spo_profile else run_matches(args)


if __name__ == "__main__":
    main()
