"""How noisy a sampled advantage is in a small two-player OpenSpiel game, for each baseline a critic can give.

A policy-gradient update at information set ``I`` moves the taken action's logit by a sampled advantage whose mean
is the exact ``q(I, a) − v(I)``; what it adds around that mean is the sampling noise the step size must average out
(``sampled_magnet_dynamics.py`` models it as one Gaussian ``sigma``). This script computes that noise exactly over
the whole tree for a given policy, per decision and as a reach-weighted root mean square, for four targets:

- ``mc_info``: the game's return minus ``v(I)`` (a critic of the acting seat's view; GAE with λ = γ = 1),
- ``mc_full``: the return minus ``v(h)``, the value of the whole state (a centralised critic that sees every seat's
  cards: PPO's ``critic_input: critic_obs``),
- ``td0_info`` / ``td0_full``: one step of bootstrapping (λ = 0): the value of the seat's next decision (or the
  result, where the game ends first) minus the same baselines, with exact values.

A baseline that depends on the hidden state leaves the gradient unbiased (the action is drawn from ``π(·|I)``
whatever the hidden cards), so the lower noise is free. The policy is uniform, or a PPO checkpoint's (``--ckpt``);
``--buckets`` splits the figures by how often self-play under the policy reaches each set.

    python benchmarks/games/advantage_noise.py --game leduc_poker --ckpt RUN/checkpoints/last.ckpt --buckets
"""

from __future__ import annotations

import argparse

import numpy as np
import pyspiel
import regularised_equilibrium as req

TARGETS = ("mc_info", "mc_full", "td0_info", "td0_full")
BUCKETS = ((1e-2, 1.0), (1e-3, 1e-2), (1e-4, 1e-3), (1e-5, 1e-4), (0.0, 1e-5))


def _edge_weights(tree: req.Tree, policy: list[np.ndarray], node: int) -> list[float]:
    if tree.kind[node] == "chance":
        return [tree.edge_prob[c] for c in tree.children[node]]
    return list(policy[tree.infoset[node]])


def return_moments(tree: req.Tree, policy: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, second moment)`` ``[nodes, 2]`` of each player's return from each node on."""
    n = len(tree.kind)
    mean, square = np.zeros((n, 2)), np.zeros((n, 2))
    for node in range(n - 1, -1, -1):
        if tree.kind[node] == "terminal":
            mean[node] = tree.returns[node]
            square[node] = np.square(tree.returns[node])
            continue
        for weight, child in zip(_edge_weights(tree, policy, node), tree.children[node]):
            mean[node] += weight * mean[child]
            square[node] += weight * square[child]
    return mean, square


def stop_moments(tree: req.Tree, policy: list[np.ndarray], value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, second moment)`` ``[nodes, 2]`` of ``value[stop, p]`` at the first node from each node on where player
    ``p`` decides or the game ends: what one step of bootstrapping reads."""
    n = len(tree.kind)
    mean, square = np.zeros((n, 2)), np.zeros((n, 2))
    for node in range(n - 1, -1, -1):
        for p in range(2):
            if tree.kind[node] == "terminal" or (tree.kind[node] == "decision" and tree.player[node] == p):
                mean[node, p], square[node, p] = value[node, p], value[node, p] ** 2
                continue
            for weight, child in zip(_edge_weights(tree, policy, node), tree.children[node]):
                mean[node, p] += weight * mean[child, p]
                square[node, p] += weight * square[child, p]
    return mean, square


def advantage_noise(tree: req.Tree, policy: list[np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per information set, each target's mean squared deviation from the exact advantage over the set's sampled
    decisions (``{target: [sets]}``), and the sets' self-play reach (the weight of each set's decisions)."""
    n, sets = len(tree.kind), len(tree.infoset_actions)
    mean, square = return_moments(tree, policy)
    reach, others = np.ones(n), np.ones((n, 2))  # self-play reach; reach without the player's own actions
    for node in range(1, n):
        parent = tree.parent[node]
        step = np.full(2, tree.edge_prob[node])
        reach[node] = reach[parent] * tree.edge_prob[node]
        if tree.kind[parent] == "decision":
            pi = policy[tree.infoset[parent]][tree.edge_action[node]]
            reach[node] *= pi
            step[1 - tree.player[parent]] *= pi
        others[node] = others[parent] * step
    v_set, weight = np.zeros(sets), np.zeros(sets)
    q_set = [np.zeros(len(a)) for a in tree.infoset_actions]
    for node in range(n):
        if tree.kind[node] == "decision":
            i, p = tree.infoset[node], tree.player[node]
            w = others[node, p]
            weight[i] += w
            v_set[i] += w * mean[node, p]
            q_set[i] += w * np.array([mean[c, p] for c in tree.children[node]])
    v_set /= np.maximum(weight, 1e-300)
    q_set = [q / max(w, 1e-300) for q, w in zip(q_set, weight)]
    info_value = mean.copy()  # at decisions: the value of the deciding player's information set
    for node in range(n):
        if tree.kind[node] == "decision":
            info_value[node, tree.player[node]] = v_set[tree.infoset[node]]
    full_1, full_2 = stop_moments(tree, policy, mean)
    info_1, info_2 = stop_moments(tree, policy, info_value)
    noise = {target: np.zeros(sets) for target in TARGETS}
    visits = np.zeros(sets)
    for node in range(n):
        if tree.kind[node] != "decision":
            continue
        i, p = tree.infoset[node], tree.player[node]
        visits[i] += reach[node]
        for a, child in enumerate(tree.children[node]):
            w = reach[node] * policy[i][a]
            exact = q_set[i][a] - v_set[i]
            # E[(X − b − exact)²] = E[X²] − 2 E[X] k + k², k = b + exact, for each target X and baseline b
            for target, (x1, x2, base) in {
                "mc_info": (mean[child, p], square[child, p], v_set[i]),
                "mc_full": (mean[child, p], square[child, p], mean[node, p]),
                "td0_info": (info_1[child, p], info_2[child, p], v_set[i]),
                "td0_full": (full_1[child, p], full_2[child, p], mean[node, p]),
            }.items():
                k = base + exact
                noise[target][i] += w * (x2 - 2.0 * x1 * k + k * k)
    return {target: total / np.maximum(visits, 1e-300) for target, total in noise.items()}, visits


def rms(noise: np.ndarray, visits: np.ndarray, inside: np.ndarray | None = None) -> float:
    """The root mean square over the decisions of the sets ``inside`` (all by default), each set by its visits."""
    inside = np.ones(len(visits), dtype=bool) if inside is None else inside
    return float(np.sqrt((noise[inside] * visits[inside]).sum() / max(visits[inside].sum(), 1e-300)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="leduc_poker")
    parser.add_argument("--ckpt", help="a PPO checkpoint of the game (default: the uniform policy)")
    parser.add_argument("--buckets", action="store_true", help="also split by self-play reach")
    args = parser.parse_args()
    tree = req.Tree(pyspiel.load_game(args.game))
    if args.ckpt:
        policy = req.checkpoint_policy(tree, args.ckpt, f"open_spiel:{args.game}")
    else:
        policy = [np.full(len(a), 1.0 / len(a)) for a in tree.infoset_actions]
    noise, visits = advantage_noise(tree, policy)
    print(f"{args.game}, {'uniform policy' if not args.ckpt else args.ckpt}: exploitability "
          f"{req.exploitability(tree, policy):.4f}; noise of a sampled advantage (root mean square, payoff units)")
    print("| decisions | sets | " + " | ".join(TARGETS) + " |")
    print("|---|---:|" + "---:|" * len(TARGETS))
    rows = [("all", np.ones(len(visits), dtype=bool))]
    if args.buckets:
        rows += [(f"reach [{lo:g}, {hi:g})", (visits >= lo) & (visits < hi)) for lo, hi in BUCKETS]
    for name, inside in rows:
        print(f"| {name} | {int(inside.sum())} | " + " | ".join(f"{rms(noise[t], visits, inside):.3f}" for t in TARGETS)
              + " |")


if __name__ == "__main__":
    main()
