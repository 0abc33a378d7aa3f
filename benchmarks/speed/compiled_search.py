"""The PUCT search's compiled form against its Python form on Connect Four (``model.search_backend``), one process,
interleaved.

    python benchmarks/speed/compiled_search.py                       # 64 rows, 32 simulations, both precisions
    python benchmarks/speed/compiled_search.py --rows 64,128 --rounds 9 --precision bf16

A self-play step of ``alphazero_connect_four.yaml``: ``--rows`` live positions (after 0-14 random moves, seeded), the
shipped network (board encoder, ``hidden_sizes: [256]``, untrained: the search's cost does not depend on the
weights), Dirichlet noise at the roots, ``--simulations`` simulations, one torch thread, float32 and the
``bf16-mixed`` autocast the config ships. Per round, the Python search then the compiled one on the same positions
(equal visit counts checked every round); per setting: the median wall and CPU milliseconds per search of each, the
ratio per round and its median, and the network forward's share (one batched forward of ``rows`` leaves, timed
alone, times ``simulations + 1``). First calls (numba's compile or cache load) are outside the timings.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np
import torch


def positions(rows: int, seed: int) -> list:
    import pyspiel

    game, rng = pyspiel.load_game("connect_four"), random.Random(seed)
    states = []
    while len(states) < rows:
        state = game.new_initial_state()
        for _ in range(rng.randint(0, 14)):
            if state.is_terminal():
                break
            state.apply_action(rng.choice(state.legal_actions()))
        if not state.is_terminal():
            states.append(state)
    return states


def timed(call) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    return (time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="64")
    parser.add_argument("--simulations", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--precision", default="fp32,bf16")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from rl_lightning.algos import AlphaZero
    from rl_lightning.algos.alphazero.puct import PUCTSearch
    from rl_lightning.envs.games import OpenSpielEnv

    env = OpenSpielEnv("open_spiel:connect_four")
    torch.manual_seed(0)
    module = AlphaZero(env.spec, encoder="board", hidden_sizes=(256,), simulations=args.simulations)
    print("| rows | precision | Python ms (wall / CPU) | compiled ms (wall / CPU) "
          "| compiled / Python (median of rounds) | forward share of the compiled search |")  # fmt: skip
    print("|---:|---|---|---|---|---:|")
    for rows in (int(r) for r in args.rows.split(",")):
        states = positions(rows, seed=rows)
        for precision in args.precision.split(","):
            bf16 = precision == "bf16"
            searches = {b: PUCTSearch(module.logits_and_value, args.simulations, 1.5, backend=b)
                        for b in ("python", "compiled")}  # fmt: skip
            for search in searches.values():
                search._observation = "observation"

            def run(backend: str, seed: int):
                with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    roots = searches[backend].search(states, (1.0, 0.25, np.random.default_rng(seed)))
                return [root.counts for root in roots]

            run("python", 0), run("compiled", 0)  # warm-up: numba's compile or cache load, oneDNN's kernels
            times: dict[str, list[tuple[float, float]]] = {"python": [], "compiled": []}
            for round_ in range(args.rounds):
                counts = {}
                for backend in ("python", "compiled"):
                    wall, cpu, counts[backend] = timed(lambda b=backend: run(b, round_))
                    times[backend].append((wall, cpu))
                assert counts["python"] == counts["compiled"], "the two searches disagree"
            obs = torch.zeros(rows, *env.spec.obs_shape)
            mask = torch.ones(rows, 7, dtype=torch.bool)
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                module.logits_and_value(obs, mask)
                forward = statistics.median(timed(lambda: module.logits_and_value(obs, mask))[0] for _ in range(20))
            med = {b: [statistics.median(t[i] for t in times[b]) for i in (0, 1)] for b in times}
            ratio = statistics.median(c[0] / p[0] for p, c in zip(times["python"], times["compiled"], strict=True))
            share = forward * (args.simulations + 1) / med["compiled"][0]
            print(f"| {rows} | {precision} | {med['python'][0]:.1f} / {med['python'][1]:.1f} | "
                  f"{med['compiled'][0]:.1f} / {med['compiled'][1]:.1f} | {ratio:.3f} | {share:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
