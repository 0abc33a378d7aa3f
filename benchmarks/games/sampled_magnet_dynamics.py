"""How close a sampled learner can get: PPO's uniform-magnet update on a small OpenSpiel game, made tabular.

A softmax policy with one table of logits per information set follows what PPO with ``magnet: {kind: uniform}`` and
``norm_adv: false`` does in expectation: each update moves a set's logits by its share of the rollout's rows (its
self-play reach, so a rarely reached set moves rarely) times the policy gradient of ``q − α · KL(π ‖ uniform)``, ``q``
the exact action values under the current policy (no later KL in them, as PPO's magnet loss has none). The sampling
noise is modelled, not simulated game by game: per update the set is visited ``Poisson(games · reach · π(a))`` times
per action, and each visit's advantage is the exact one plus Gaussian noise of ``sigma`` payoff units (Leduc's
sampled advantages have a standard deviation of ~3.5 chips at the regularised equilibria, ~2.4 with exact one-step
values: benchmarks/NOTES.md). No network, no critic error, no optimiser: what the samples alone allow, to read a PPO
run's exploitability against.

    python benchmarks/games/sampled_magnet_dynamics.py --game leduc_poker --updates 3000 --games 3800 --sigma 3.5

``--games`` per update: Leduc's 16,384-row rollout holds ~3,800 games. ``--step`` is the logit step per unit of
gradient; the magnet weight falls geometrically from ``--weight-start`` to ``--weight`` over ``--weight-decay`` of the
updates, and the step from ``--step-decay-from`` of them linearly to zero (``ppo_leduc.yaml``'s schedules).
``--sigma 0 --exact``: expected counts and no noise, the deterministic dynamics.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyspiel
import regularised_equilibrium as req


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max())
    return z / z.sum()


def set_gradient(pi: np.ndarray, q: np.ndarray, reach: float, alpha: float, games: float, sigma: float,
                 rng: np.random.Generator | None) -> np.ndarray:
    """One update's gradient on one set's logits, per game of the rollout: ``(1 / games) · Σ_visits [A_k (e_{a_k} −
    π) − α ∇KL(π ‖ uniform)]``, the visits drawn (``rng``) or their expected counts (``rng=None``, no noise)."""
    expected = games * reach * pi
    counts = expected if rng is None else rng.poisson(expected).astype(float)
    advantage = q - np.dot(pi, q)
    summed = counts * advantage  # Σ over the visits of A_k, per action taken
    if rng is not None and sigma > 0.0:
        summed = summed + rng.normal(0.0, sigma, size=len(pi)) * np.sqrt(counts)
    policy_term = summed - pi * summed.sum()
    log_ratio = np.log(np.maximum(pi, 1e-300))
    magnet_term = pi * (log_ratio - np.dot(pi, log_ratio))  # ∇ KL(π ‖ uniform) on the logits, per visit
    return (policy_term - alpha * counts.sum() * magnet_term) / games


def run(tree: req.Tree, updates: int, games: float, sigma: float, step: float, weight_start: float, weight: float,
        weight_decay: float = 0.43, step_decay_from: float = 0.6, seed: int = 0, exact: bool = False,
        report_every: int = 0, equilibrium: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """The tabular learner from the uniform policy; returns its last policy, printing the exploitability (and, with
    ``equilibrium``, the mean total variation to it by self-play reach) every ``report_every`` updates."""
    rng = None if exact else np.random.default_rng(seed)
    logits = [np.zeros(len(actions)) for actions in tree.infoset_actions]
    decay_updates = max(1, int(updates * weight_decay))
    started = time.perf_counter()
    for update in range(updates + 1):
        alpha = weight_start * (weight / weight_start) ** min(1.0, update / decay_updates)
        progress = update / updates
        lr = step * min(1.0, (1.0 - progress) / (1.0 - step_decay_from)) if step_decay_from < 1.0 else step
        policy = [_softmax(z) for z in logits]
        if report_every and (update % report_every == 0 or update == updates):
            line = f"| {update} | {alpha:.3f} | {lr:.2f} | {req.exploitability(tree, policy):.4f} |"
            if equilibrium is not None:
                line += " " + " / ".join(f"{d:.3f}" for d in _distance_by_reach(tree, policy, equilibrium)) + " |"
            print(f"{line} {time.perf_counter() - started:.0f} |", flush=True)
        if update == updates:
            return policy
        q = req.action_values(tree, policy, 0.0)
        reach = req.self_play_reach(tree, policy)
        for i, (pi, qi) in enumerate(zip(policy, q)):
            logits[i] = logits[i] + lr * set_gradient(pi, qi, reach[i], alpha, games, sigma, rng)
    return policy


REACH_EDGES = (1.0, 1e-2, 1e-3, 1e-4, 0.0)


def _distance_by_reach(tree: req.Tree, policy: list[np.ndarray], equilibrium: list[np.ndarray]) -> list[float]:
    """Mean total variation to ``equilibrium`` in the reach buckets >= 1e-2, 1e-3-1e-2, 1e-4-1e-3, < 1e-4."""
    reach = req.self_play_reach(tree, policy)
    distance = np.array([0.5 * np.abs(a - b).sum() for a, b in zip(policy, equilibrium)])
    means = []
    for high, low in zip(REACH_EDGES, REACH_EDGES[1:]):
        inside = (reach >= low) & (reach < high) if high < 1.0 else reach >= low
        means.append(float(distance[inside].mean()) if inside.any() else float("nan"))
    return means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--game", default="leduc_poker")
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--games", type=float, default=3800.0, help="games per update (its rollout)")
    parser.add_argument("--sigma", type=float, default=3.5, help="advantage noise per visit, payoff units")
    parser.add_argument("--step", type=float, default=20.0)
    parser.add_argument("--weight-start", type=float, default=3.0)
    parser.add_argument("--weight", type=float, default=0.2, help="the magnet weight at the end, payoff units")
    parser.add_argument("--weight-decay", type=float, default=0.43, help="share of the updates the weight falls over")
    parser.add_argument("--step-decay-from", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exact", action="store_true", help="expected visit counts, no noise")
    parser.add_argument("--report-every", type=int, default=250)
    args = parser.parse_args()
    tree = req.Tree(pyspiel.load_game(args.game))
    equilibrium = None
    for w in [w for w in (1.0, 0.5, 0.3) if w > args.weight] + [args.weight]:  # PPO's fixed point at the weight
        equilibrium, _ = req.regularised_equilibrium(tree, w, 0.03, 400, equilibrium, future_kl=False)
    print(f"{args.game}: PPO's fixed point at weight {args.weight:g} is exploitable by "
          f"{req.exploitability(tree, equilibrium):.4f}")
    print("| update | weight | step | exploitability | total variation to the fixed point by self-play reach "
          "(>= 1e-2 / 1e-3-1e-2 / 1e-4-1e-3 / < 1e-4) | s |")
    print("|---:|---:|---:|---:|---|---:|")
    run(tree, args.updates, args.games, args.sigma, args.step, args.weight_start, args.weight, args.weight_decay,
        args.step_decay_from, args.seed, args.exact, args.report_every, equilibrium)


if __name__ == "__main__":
    main()
