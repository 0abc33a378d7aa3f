"""Gumbel AlphaZero's search (Danihelka et al., "Policy improvement by planning with Gumbel", ICLR 2022): the tree of
``PUCTSearch`` (its nodes, batched leaf evaluation and proofs) with Gumbel's choices and policy target, which stay
a policy improvement at a handful of simulations, where PUCT's visit counts are coarse and noisy.

- **root**: ``g ~ Gumbel(0)`` per legal move, times the root's scale (1 in self-play's exploring moves, 0 to play
  greedily); sequential halving over the ``max_considered`` moves with the largest ``g + logits``: simulation ``k``
  follows, among the moves whose visit count equals ``considered_visits(m, n)[k]``, the one with the largest
  ``g + logits + σ(q̂)``. The move played is that argmax among the most visited moves.
- **interior**: deterministic, ``argmax_a π'(a) − N(a) / (1 + Σ_b N(b))`` with ``π' = softmax(logits + σ(q̂))``.
- ``q̂``, the completed Q-values of a node's moves for its mover: a visited move's mean value; an unvisited one's
  the node's mixed value ``(v + Σ N · Σ_visited π·q / Σ_visited π) / (1 + Σ N)`` (``v`` the network's value of the
  node, ``π`` its prior); then rescaled to [0, 1] by their minimum and maximum, and
  ``σ(q̂) = (c_visit + max_b N(b)) · c_scale · q̂`` (the paper's c_visit 50, c_scale 0.1).
- **policy target**: the root's ``π'``, with the moves its proofs rule out (``unrefuted``) given no mass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from rl_lightning.algos.alphazero.puct import Evaluator, PUCTSearch
from rl_lightning.algos.alphazero.tree import Node, unrefuted
from rl_lightning.errors import ConfigError

_TINY = 1e-30  # the smallest prior a logit is taken of (a masked softmax can underflow to 0)


@lru_cache(maxsize=64)
def considered_visits(max_considered: int, simulations: int) -> tuple[int, ...]:
    """The root's sequential halving as a schedule: entry ``k`` is the visit count a move must have for simulation
    ``k`` to follow it. Phases of ``max(1, ⌊n / (⌈log2 m⌉ · considered)⌋)`` visits to each considered move, the
    considered halving after each phase (never below 2), until ``n`` simulations are scheduled."""
    if max_considered <= 1:
        return tuple(range(simulations))
    phases = math.ceil(math.log2(max_considered))
    schedule: list[int] = []
    visits, considered = [0] * max_considered, max_considered
    while len(schedule) < simulations:
        for _ in range(max(1, simulations // (phases * considered))):
            schedule.extend(visits[:considered])
            visits[:considered] = [count + 1 for count in visits[:considered]]
        considered = max(2, considered // 2)
    return tuple(schedule[:simulations])


def transformed_q(node: Node, c_visit: float, c_scale: float, bounds: tuple[float, float] | None = None) -> list[float]:
    """``σ(q̂)`` of each of ``node``'s legal moves (the module docstring), for the seat that moves at ``node``;
    ``bounds``: rescale by the game's worst and best result instead of the node's own minimum and maximum."""
    counts, prior = node.counts, node.prior
    assert prior is not None, "an evaluated node"
    total = node.visits
    if not total and bounds is None:  # every move completed with the node's own value: nothing left after min-max
        return [0.0] * len(counts)
    q = [value / count if count else 0.0 for value, count in zip(node.value_sum, counts, strict=True)]
    weight = weighted = 0.0
    for p, value, count in zip(prior, q, counts, strict=True):
        if count:
            p = max(p, _TINY)
            weight += p
            weighted += p * value
    mixed = (node.value + total * weighted / weight) / (1 + total) if total else node.value
    completed = [value if count else mixed for value, count in zip(q, counts, strict=True)]
    low, high = bounds if bounds is not None else (min(completed), max(completed))
    scale = (c_visit + max(counts)) * c_scale / max(high - low, 1e-8)
    return [scale * (value - low) for value in completed]


def improved_policy(
    node: Node,
    c_visit: float,
    c_scale: float,
    sigma: list[float] | None = None,
    bounds: tuple[float, float] | None = None,
) -> list[float]:
    """``π' = softmax(logits + σ(q̂))`` over ``node``'s legal moves (``sigma``: ``σ(q̂)`` when already computed)."""
    assert node.prior is not None, "an evaluated node"
    if sigma is None:
        sigma = transformed_q(node, c_visit, c_scale, bounds)
    scores = [math.log(max(p, _TINY)) + s for p, s in zip(node.prior, sigma, strict=True)]
    top = max(scores)
    weights = [math.exp(score - top) for score in scores]
    total = sum(weights)
    return [weight / total for weight in weights]


class _GumbelRoot(Node):
    """A root: a node with its Gumbel draw per legal move (already times the root's scale)."""

    __slots__ = ("gumbel",)

    def __init__(self, state: Any) -> None:
        super().__init__(state)
        self.gumbel = [0.0] * len(self.legal)


class GumbelSearch(PUCTSearch):
    """The search of the module docstring over a batch of engine states (``PUCTSearch``'s interface).

    Args:
        evaluator, simulations, rollout_weight, field: as ``PUCTSearch``.
        max_considered: moves the root's sequential halving starts from (the paper's 16; all of Connect Four's 7).
        c_visit, c_scale: ``σ``'s constants.
        q_scaling: how ``q̂`` is brought to [0, 1]: ``minmax``, by each node's own smallest and largest completed Q
            (the paper's and ``mctx``'s; it stretches any difference between a node's moves to the full range), or
            ``bounds``, by the game's worst and best result (a Q difference keeps its size, so ``σ`` moves the prior
            less; weaker on Connect Four at c_scale 0.1: benchmarks/NOTES.md).
        c_puct: not read by Gumbel's choices; kept for a PUCT search of the same network (``NetworkMCTS.of_module``).
    """

    compiled_form = False  # its root and interior choices are its own

    def __init__(
        self,
        evaluator: Evaluator | None,
        simulations: int,
        max_considered: int = 16,
        c_visit: float = 50.0,
        c_scale: float = 0.1,
        q_scaling: str = "minmax",
        c_puct: float = 1.5,
        rollout_weight: float = 0.0,
        field: str = "",
    ) -> None:
        super().__init__(evaluator, simulations, c_puct, rollout_weight=rollout_weight, field=field)
        if not isinstance(max_considered, int) or max_considered < 1:
            raise ConfigError(f"{field}max_considered={max_considered!r} must be an int >= 1 (e.g. 16)")
        if not (c_visit >= 0 and c_scale > 0):
            raise ConfigError(f"{field}gumbel_c_visit={c_visit!r}, gumbel_c_scale={c_scale!r}: use c_visit >= 0 "
                              "and c_scale > 0 (the paper's 50 and 0.1)")  # fmt: skip
        if q_scaling not in ("bounds", "minmax"):
            raise ConfigError(f"{field}gumbel_q_scaling={q_scaling!r}: use bounds (the game's results) or minmax "
                              "(each node's own)")  # fmt: skip
        self.max_considered, self.c_visit, self.c_scale = max_considered, float(c_visit), float(c_scale)
        self.q_scaling = q_scaling
        self._bounds: tuple[float, float] | None = None  # the game's (worst, best) result under ``bounds``

    def search(
        self,
        engine_states: list[Any],
        root_noise: tuple[Sequence[float], np.random.Generator] | None = None,
        read: Callable[[list[Node]], Any] | None = None,
    ) -> Any:
        """Grow one tree per state, as ``PUCTSearch.search``. ``root_noise = (scales, rng)``: root ``i``'s Gumbel
        draws from ``rng``, times ``scales[i]`` (0: none, the greedy search); ``None``: no root draws Gumbel noise."""
        return super().search(engine_states, root_noise, read)  # type: ignore[arg-type]

    _root_type = _GumbelRoot

    def _start(self, game: Any) -> None:
        super()._start(game)
        self._bounds = (game.min_utility(), game.max_utility()) if self.q_scaling == "bounds" else None

    def _add_root_noise(self, roots: list[Node], root_noise: tuple[Sequence[float], np.random.Generator]) -> None:
        """Each root's Gumbel draw, times its scale (``search``'s ``root_noise``)."""
        scales, rng = root_noise
        for root, scale in zip(roots, scales, strict=True):
            assert isinstance(root, _GumbelRoot)
            if scale > 0 and root.legal:
                root.gumbel = (scale * rng.gumbel(size=len(root.legal))).tolist()

    def _edge(self, node: Node, at_root: bool) -> int:
        if not at_root and not node.visits:  # π' is the prior and no move has a visit yet
            assert node.prior is not None
            return node.prior.index(max(node.prior))
        sigma = transformed_q(node, self.c_visit, self.c_scale, self._bounds)
        if not at_root:
            policy = improved_policy(node, self.c_visit, self.c_scale, sigma)
            scale = 1.0 / (1 + node.visits)
            scores = [p - count * scale for p, count in zip(policy, node.counts, strict=True)]
            return scores.index(max(scores))
        assert isinstance(node, _GumbelRoot)
        considered = min(self.max_considered, len(node.legal))
        wanted = considered_visits(considered, self.simulations)[node.visits]
        return _best_of(node, sigma, [i for i, count in enumerate(node.counts) if count == wanted])

    def outputs(self, roots: list[Node], num_actions: int) -> tuple[np.ndarray, np.ndarray]:
        """``(policy [R, num_actions], action [R])``: each root's policy target (``π'`` over the moves no proof rules
        out) and its move (the largest ``g + logits + σ(q̂)`` among those moves' most visited)."""
        policy = np.zeros((len(roots), num_actions), dtype=np.float32)
        action = np.zeros(len(roots), dtype=np.int64)
        for row, root in enumerate(roots):
            keep = unrefuted(root)
            sigma = transformed_q(root, self.c_visit, self.c_scale, self._bounds)
            improved = improved_policy(root, self.c_visit, self.c_scale, sigma)
            mass = sum(improved[i] for i in keep)
            policy[row, [root.legal[i] for i in keep]] = [improved[i] / mass for i in keep]
            most = max(root.counts[i] for i in keep)
            action[row] = root.legal[_best_of(root, sigma, [i for i in keep if root.counts[i] == most])]
        return policy, action


def _best_of(root: Node, sigma: list[float], candidates: list[int]) -> int:
    """The candidate (an index into ``root.legal``) with the largest ``g + logits + σ(q̂)`` (ties: the first)."""
    gumbel = getattr(root, "gumbel", None) or [0.0] * len(root.legal)
    assert root.prior is not None, "an evaluated root"
    assert candidates, "a move to consider"
    return max(candidates, key=lambda i: gumbel[i] + math.log(max(root.prior[i], _TINY)) + sigma[i])
