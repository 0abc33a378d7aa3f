"""The exploitability floor of a uniform magnet: the exact regularised equilibrium of a small OpenSpiel game.

PPO with ``magnet: {kind: uniform, coef: α}`` adds ``α · KL(π(·|s) ‖ uniform over the legal actions)`` at every
decision it samples, so what it can converge to is the equilibrium of the game in which each player pays ``α · KL`` at
each of its own decisions, weighted by how often the decision is reached (by both players and chance): an agent
quantal-response equilibrium, ``π(I) ∝ ρ(I) · exp(q(I) / α)`` with ``q`` the reach-normalised regularised action values.
This script computes that equilibrium exactly (tabular Magnetic Mirror Descent with exact values over the whole tree,
iterated to a fixed point) for each ``α`` and prints its exploitability in the unregularised game (OpenSpiel's
NashConv / 2): the bias floor of a magnet weight, whatever the sampling. ``α`` is in payoff units (chips for Leduc);
PPO with ``norm_adv: true`` divides advantages by their per-minibatch std, so its ``coef`` is α in units of that std.

    python benchmarks/games/regularised_equilibrium.py --game leduc_poker --alphas 1,0.3,0.1,0.03,0.01

With ``--ckpt`` (a PPO checkpoint of the game) and one ``--alphas`` value it says where that policy's exploitability
comes from: information sets bucketed by how often self-play under the policy reaches them, each bucket's distance
to the regularised equilibrium, and the exploitability of the policy with the equilibrium put in its place below or
above each reach threshold:

    python benchmarks/games/regularised_equilibrium.py --ckpt RUN/checkpoints/last.ckpt --alphas 0.2

OpenSpiel's ``mmd_dilated`` is not this: its dilated entropy weights an information set's KL by the player's own reach
only, so at a rarely dealt card its regulariser is far stronger than a sampled learner's.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pyspiel


class Tree:
    """The game tree flattened into arrays, parents before children."""

    def __init__(self, game: pyspiel.Game) -> None:
        self.game = game
        self.kind: list[str] = []  # "chance", "decision" or "terminal"
        self.parent: list[int] = []
        self.edge_prob: list[float] = []  # chance probability of the edge from the parent (1 for decisions)
        self.edge_action: list[int] = []  # index into the parent's legal actions (-1 after chance)
        self.player: list[int] = []
        self.infoset: list[int] = []
        self.children: list[list[int]] = []
        self.returns: list[tuple[float, float]] = []
        self.infoset_index: dict[str, int] = {}
        self.infoset_player: list[int] = []
        self.infoset_actions: list[list[int]] = []
        self._add(game.new_initial_state(), -1, 1.0, -1)

    def _add(self, state: pyspiel.State, parent: int, prob: float, action_index: int) -> int:
        node = len(self.kind)
        self.parent.append(parent)
        self.edge_prob.append(prob)
        self.edge_action.append(action_index)
        self.children.append([])
        if state.is_terminal():
            self.kind.append("terminal")
            self.player.append(-1)
            self.infoset.append(-1)
            r = state.returns()
            self.returns.append((r[0], r[1]))
            return node
        self.returns.append((0.0, 0.0))
        if state.is_chance_node():
            self.kind.append("chance")
            self.player.append(-1)
            self.infoset.append(-1)
            for action, p in state.chance_outcomes():
                self.children[node].append(self._add(state.child(action), node, p, -1))
            return node
        player = state.current_player()
        key = state.information_state_string(player)
        if key not in self.infoset_index:
            self.infoset_index[key] = len(self.infoset_player)
            self.infoset_player.append(player)
            self.infoset_actions.append(state.legal_actions())
        self.kind.append("decision")
        self.player.append(player)
        self.infoset.append(self.infoset_index[key])
        for i, action in enumerate(state.legal_actions()):
            self.children[node].append(self._add(state.child(action), node, 1.0, i))
        return node


def action_values(tree: Tree, policy: list[np.ndarray], alpha: float) -> list[np.ndarray]:
    """``q[I][a]``: the regularised value to I's player of taking a at I, averaged over I's histories by their
    reach under the opponent and chance (the player's own reach is the same for every history in I)."""
    n = len(tree.kind)
    others_reach = np.zeros((n, 2))  # reach of node excluding player p's own actions, per p
    others_reach[0] = 1.0
    for node in range(1, n):
        parent = tree.parent[node]
        step = np.full(2, tree.edge_prob[node])
        if tree.kind[parent] == "decision":
            p = tree.player[parent]
            step[1 - p] *= policy[tree.infoset[parent]][tree.edge_action[node]]
        others_reach[node] = others_reach[parent] * step
    value = np.zeros((n, 2))  # each player's regularised value from the node on
    for node in range(n - 1, -1, -1):
        kind = tree.kind[node]
        if kind == "terminal":
            value[node] = tree.returns[node]
        elif kind == "chance":
            value[node] = sum(tree.edge_prob[c] * value[c] for c in tree.children[node])
        else:
            pi = policy[tree.infoset[node]]
            p = tree.player[node]
            value[node] = sum(pi[i] * value[c] for i, c in enumerate(tree.children[node]))
            uniform = 1.0 / len(pi)
            value[node, p] -= alpha * float(np.sum(pi * (np.log(np.maximum(pi, 1e-300)) - math.log(uniform))))
    numerator = [np.zeros(len(a)) for a in tree.infoset_actions]
    denominator = np.zeros(len(tree.infoset_actions))
    for node in range(n):
        if tree.kind[node] != "decision":
            continue
        infoset, p = tree.infoset[node], tree.player[node]
        weight = others_reach[node, p]
        denominator[infoset] += weight
        numerator[infoset] += weight * np.array([value[c, p] for c in tree.children[node]])
    return [num / max(den, 1e-300) for num, den in zip(numerator, denominator)]


def regularised_equilibrium(tree: Tree, alpha: float, step: float, iterations: int,
                            start: list[np.ndarray] | None = None,
                            future_kl: bool = True) -> tuple[list[np.ndarray], float]:
    """Tabular MMD toward the uniform magnet with exact values; returns the policy and the last step's largest
    change in any action probability (how close to the fixed point it stopped). ``future_kl=False``: the values
    leave out the player's later KL terms, as PPO's magnet loss does (a KL gradient at each sampled state, none in the
    advantages): the fixed point PPO itself can reach."""
    policy = start or [np.full(len(a), 1.0 / len(a)) for a in tree.infoset_actions]
    change = math.inf
    for _ in range(iterations):
        q = action_values(tree, policy, alpha if future_kl else 0.0)
        new = []
        for pi, qi in zip(policy, q):
            logits = (step * qi + np.log(np.maximum(pi, 1e-300))) / (1.0 + step * alpha)  # uniform magnet: log ρ const
            logits -= logits.max()
            e = np.exp(logits)
            new.append(e / e.sum())
        change = max(float(np.abs(a - b).max()) for a, b in zip(new, policy))
        policy = new
    return policy, change


def exploitability(tree: Tree, policy: list[np.ndarray]) -> float:
    table = {key: list(zip(tree.infoset_actions[index], map(float, policy[index])))
             for key, index in tree.infoset_index.items()}
    return float(pyspiel.nash_conv(tree.game, table)) / 2.0


def self_play_reach(tree: Tree, policy: list[np.ndarray]) -> np.ndarray:
    """Per information set: the probability that one game of self-play under ``policy`` reaches it."""
    reach = np.ones(len(tree.kind))
    for node in range(1, len(tree.kind)):
        parent = tree.parent[node]
        reach[node] = reach[parent] * tree.edge_prob[node]
        if tree.kind[parent] == "decision":
            reach[node] *= policy[tree.infoset[parent]][tree.edge_action[node]]
    visits = np.zeros(len(tree.infoset_actions))
    for node in range(len(tree.kind)):
        if tree.kind[node] == "decision":
            visits[tree.infoset[node]] += reach[node]
    return visits


def checkpoint_policy(tree: Tree, ckpt: str, env_id: str) -> list[np.ndarray]:
    """A PPO checkpoint's action probabilities at every information set of the tree."""
    from rl_lightning.algos import PPO
    from rl_lightning.envs.games import OpenSpielEnv
    from rl_lightning.games.exploitability import InfoStateTable, policy_probabilities

    module = PPO.load_from_checkpoint(ckpt, map_location="cpu").eval()
    table = InfoStateTable(OpenSpielEnv(env_id=env_id, observation="info_state"))
    rows = policy_probabilities(module, table.batch).numpy()
    policy: list[np.ndarray] = [np.empty(0)] * len(tree.infoset_actions)
    for key, row in zip(table._keys, rows):
        index = tree.infoset_index[key]
        legal = row[tree.infoset_actions[index]]
        policy[index] = legal / legal.sum()
    return policy


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max())
    return e / e.sum()


def _entropy(probabilities: np.ndarray) -> float:
    inside = probabilities[probabilities > 0]
    return float(-(inside * np.log(inside)).sum())


def diagnose(tree: Tree, policy: list[np.ndarray], equilibrium: list[np.ndarray], alpha: float) -> None:
    """Where ``policy``'s exploitability comes from, against the regularised ``equilibrium`` of weight ``alpha``."""
    visits = self_play_reach(tree, policy)
    distance = np.array([0.5 * np.abs(a - b).sum() for a, b in zip(policy, equilibrium)])
    print(f"policy: exploitability {exploitability(tree, policy):.4f}; equilibrium: "
          f"{exploitability(tree, equilibrium):.4f}")
    # Which way the error points: an under-trained set stays nearer its uniform start (more entropy than the
    # equilibrium); an over-shooting or noisy one is as often sharper as flatter.
    entropy_gap = np.array([_entropy(a) - _entropy(b) for a, b in zip(policy, equilibrium)])
    # How far each set is from the regularised response to the policy's own exact values, softmax(q / alpha): zero at
    # every set only at the equilibrium. Large where the learner fails to follow its values; small where it follows
    # them and the error comes from the other sets' play.
    response = [_softmax(q / alpha) for q in action_values(tree, policy, alpha)]
    own_gap = np.array([0.5 * np.abs(a - b).sum() for a, b in zip(policy, response)])
    print("| self-play reach of the information set | sets | total variation to the equilibrium: mean | max "
          "| entropy minus the equilibrium's (nats): mean | share flatter than the equilibrium "
          "| total variation to softmax(own values / weight): mean |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    edges = [1.0, 1e-2, 1e-3, 1e-4, 1e-5, 0.0]
    for high, low in zip(edges, edges[1:]):
        inside = (visits >= low) & (visits < high) if high < 1.0 else visits >= low
        if inside.any():
            mean, worst = distance[inside].mean(), distance[inside].max()
            flatter = (entropy_gap[inside] > 0).mean()
            print(f"| [{low:g}, {high:g}) | {inside.sum()} | {mean:.3f} | {worst:.3f} | "
                  f"{entropy_gap[inside].mean():+.3f} | {flatter:.2f} | {own_gap[inside].mean():.3f} |")
    print("| reach threshold | exploitability: policy at or above it, equilibrium below | equilibrium at or above, "
          "policy below |")
    print("|---:|---:|---:|")
    for threshold in edges[1:-1]:
        above = [p if v >= threshold else q for p, q, v in zip(policy, equilibrium, visits)]
        below = [q if v >= threshold else p for p, q, v in zip(policy, equilibrium, visits)]
        print(f"| {threshold:g} | {exploitability(tree, above):.4f} | {exploitability(tree, below):.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="leduc_poker")
    parser.add_argument("--alphas", default="1,0.3,0.1,0.05,0.03,0.01", help="magnet weights, largest first")
    parser.add_argument("--step", type=float, default=0.03,
                        help="MMD step size η; too large for a weight and the iteration cycles instead of converging "
                             "(Leduc: 0.03 converges down to α 0.1, 0.5 cycles at α 0.3)")
    parser.add_argument("--iterations", type=int, default=400, help="per weight, each warm-started from the last")
    parser.add_argument("--ckpt", help="a PPO checkpoint of the game: where its exploitability comes from")
    args = parser.parse_args()
    started = time.perf_counter()
    tree = Tree(pyspiel.load_game(args.game))
    if args.ckpt:
        alpha = float(args.alphas.split(",")[0])
        equilibrium = None
        for weight in [w for w in (1.0, 0.5, 0.3) if w > alpha] + [alpha]:  # warm-started down the weights, as above
            equilibrium, change = regularised_equilibrium(tree, weight, args.step, args.iterations, equilibrium)
        print(f"equilibrium at weight {alpha:g}: last step's change {change:.1e}")
        diagnose(tree, checkpoint_policy(tree, args.ckpt, f"open_spiel:{args.game}"), equilibrium, alpha)
        return
    print(f"{args.game}: {len(tree.kind)} nodes, {len(tree.infoset_actions)} information sets "
          f"({time.perf_counter() - started:.1f} s)")
    print("| magnet weight α (payoff units) | exploitability: regularised equilibrium | last step's change "
          "| PPO's fixed point (no later KL in the values) | last step's change | s |")
    print("|---:|---:|---:|---:|---:|---:|")
    policy = local = None
    for alpha in (float(a) for a in args.alphas.split(",")):
        started = time.perf_counter()
        policy, change = regularised_equilibrium(tree, alpha, args.step, args.iterations, policy)
        local, local_change = regularised_equilibrium(tree, alpha, args.step, args.iterations, local, future_kl=False)
        print(f"| {alpha:g} | {exploitability(tree, policy):.4f} | {change:.1e} | {exploitability(tree, local):.4f} "
              f"| {local_change:.1e} | {time.perf_counter() - started:.0f} |")


if __name__ == "__main__":
    main()
