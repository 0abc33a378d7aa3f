"""PUCT tree search over an engine's game states (AlphaZero's search), guided by a network's prior and value.

``PUCTSearch`` grows one tree per given ``pyspiel.State`` (cloned; the states themselves are never changed):
``simulations`` leaves each, every simulation descending by PUCT,

    a* = argmax_a  Q(s, a) + c_puct · P(s, a) · √max(N(s), 1) / (1 + N(s, a)),

where ``Q(s, a)`` is the mean value of the child for the seat that moves at ``s`` (0 while unvisited), ``P`` the
prior over the legal actions (softmax of the network's masked logits) and ``N`` visit counts; it stops at a node
not yet evaluated or at a finished game. A finished game is scored exactly (``state.returns()``); any other leaf
by the network, ``V(obs)`` for the seat to act there, which in a two-seat zero-sum game is ``-V`` for the other
seat. Every node on the path adds the leaf's value for the seat that moved at it, so opponents' turns are played
by the same search and every choice is scored from its mover's side. The leaves of all trees are evaluated in one
batched forward per simulation.

Results are proven as in MCTS-Solver (Winands et al., 2008): a node is solved when one of its moves reaches the
game's best result for its mover, or when all its children are solved; the search then stops at it as at a
finished game. ``unrefuted`` gives the moves no proof rules out (no proven loss while another move is unproven or
proven better): ``visit_targets`` turns the roots' visit counts over them into AlphaZero's policy targets, and
``NetworkMCTS`` chooses among them; ``root_noise`` mixes Dirichlet noise into the roots' priors (AlphaZero's
exploration in self-play).

The tree's nodes, their backup with proofs and what is read off the roots live in ``algos/alphazero/tree.py``. Used by
``AlphaZero`` (``algos/alphazero/module.py``) to act and to make its targets, and by the ``NetworkMCTS`` bot
(``games/search.py``).
"""

from __future__ import annotations

import gc
import importlib.util
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rl_lightning.algos.alphazero.tree import Node, backup
from rl_lightning.errors import ConfigError

#: ``(obs [L, *obs], mask [L, A] bool) -> (logits [L, A], value [L])``: the network as the search reads it.
Evaluator = Any


def _normalised(probs: np.ndarray) -> list[float]:
    """The prior over the legal actions, summing to 1 (masked logits leave ~0 mass elsewhere)."""
    return (probs / probs.sum()).tolist()


def check_searchable(env: Any, field: str, who: str = "the search") -> str:
    """Refuse, in one line naming ``field``, an env whose games the search cannot play (before any game is played):
    no engine states (PettingZoo), hidden information (a search of the true state would read it), chance nodes,
    rewards during the game, or seats whose values a network cannot give (more than two, or two not zero-sum).
    Returns the env's observation choice (what the search's leaves must observe)."""
    name = getattr(getattr(env, "spec", None), "name", type(env).__name__)
    game = getattr(env, "game", None)
    if not callable(getattr(env, "engine_state", None)) or game is None:
        raise ConfigError(f"{field}: {who} searches the engine's game state, which {name} ({type(env).__name__}) "
                          "does not expose; play it on an OpenSpiel game (rl_lightning.envs.games.OpenSpielEnv, "
                          "env_id: open_spiel:connect_four)")  # fmt: skip
    if not env.spec.perfect_information:
        raise ConfigError(f"{field}: {name} hides information, and a search of the true state would read it; "
                          f"{who} plays perfect-information games (connect_four, tic_tac_toe)")  # fmt: skip
    game_type = game.get_type()
    problems = {
        "has chance nodes": game_type.chance_mode.name != "DETERMINISTIC",
        "pays rewards during the game": game_type.reward_model.name != "TERMINAL",
        f"has {env.spec.num_seats} seats that are not two zero-sum ones": env.spec.num_seats > 2
        or (env.spec.num_seats == 2 and game_type.utility.name != "ZERO_SUM"),
    }
    for problem, found in problems.items():
        if found:
            raise ConfigError(f"{field}: {name} {problem}; {who} searches deterministic games with terminal rewards "
                              "and one seat or two zero-sum seats (connect_four, tic_tac_toe)")  # fmt: skip
    return getattr(env, "observation", "auto")


class PUCTSearch:
    """The search of the module docstring over a batch of engine states.

    Args:
        evaluator: ``(obs, mask) -> (logits, value)`` of the network (``None``: uniform prior and zero leaf value,
            a plain tree search on exact game results).
        simulations: leaves expanded per tree and call (each one batched network forward over the trees).
        c_puct: the exploration constant of PUCT.
        rollout_weight: λ in [0, 1]: a leaf is worth ``(1 − λ)·V + λ·z``, ``z`` the result of one uniformly random
            game played on from it (AlphaGo's mixed leaf evaluation, its moves from ``self._rng``); 0: the value
            head alone.
        field: what the one-line refusals of bad settings name first (``"NetworkMCTS: "``, ``"model."``).
        backend: ``auto``: the compiled form of this search (``compiled_puct.py``: the same visits, values and proofs,
            ~2x faster on Connect Four) wherever it applies, the Python one elsewhere; ``compiled``: refuse, in one line
            at the first search, a game or setting it does not cover; ``python``: always the Python search (the
            reference). It covers OpenSpiel's ``connect_four`` and ``tic_tac_toe`` read through their observation
            tensors, without rollouts (``rollout_weight`` 0), in ``PUCTSearch`` itself (not a subclass that changes
            its steps, such as ``GumbelSearch``).
    """

    #: Whether this class's search is the one ``compiled_puct.py`` reproduces (subclasses that change a step: False).
    compiled_form = True

    def __init__(
        self,
        evaluator: Evaluator | None,
        simulations: int,
        c_puct: float,
        rollout_weight: float = 0.0,
        field: str = "",
        backend: str = "auto",
    ) -> None:
        if backend not in ("auto", "compiled", "python"):
            raise ConfigError(f"{field}search_backend={backend!r}: use auto, compiled or python")
        if not isinstance(simulations, int) or simulations < 1:
            raise ConfigError(f"{field}simulations={simulations!r} must be an int >= 1 (e.g. 100)")
        if not c_puct > 0:
            raise ConfigError(f"{field}c_puct={c_puct!r} must be > 0 (e.g. 1.5)")
        if not 0.0 <= rollout_weight <= 1.0:
            raise ConfigError(f"{field}rollout_weight={rollout_weight!r} must be in [0, 1] (0: the value head "
                              "alone)")  # fmt: skip
        self.evaluator = evaluator
        self.simulations, self.c_puct, self.rollout_weight = simulations, float(c_puct), float(rollout_weight)
        self._rng = random.Random(0)  # the rollouts' moves (callers reseed it per call)
        self._observation = "auto"
        self._best = 1.0  # the game's best result for a seat (``max_utility``), read at each search
        self._observers: dict[str, tuple[Any, tuple[int, ...]]] = {}
        self._noise: tuple[float, float, np.random.Generator] | None = None
        self.backend, self._field = backend, field

    def search(
        self,
        engine_states: list[Any],
        root_noise: tuple[float, float, np.random.Generator] | None = None,
        read: Callable[[list[Node]], Any] | None = None,
    ) -> Any:
        """Grow one tree per state (``simulations`` leaves each); the roots, with their visit statistics, or
        ``read(roots)`` when given (what the caller needs of them, read before the trees are freed).

        ``root_noise = (alpha, fraction, rng)``: each root's prior becomes ``(1 − fraction)·P + fraction·η``,
        ``η ~ Dirichlet(alpha)`` over its legal actions drawn from ``rng`` (AlphaZero's self-play exploration).

        Python's cyclic garbage collector is paused meanwhile: a search allocates many small objects, whose
        collections cost 4x the search itself (measured on Connect Four); the trees hold no cycles, so reference
        counting frees them. With ``read``, the trees are freed before the collector resumes (a collection that
        scans live trees cost a Connect Four search of 64 rows 40% more).
        """
        collecting = gc.isenabled()
        gc.disable()
        try:
            roots = self._search(engine_states, root_noise)
            if read is None:
                return roots
            result = read(roots)
            del roots
            return result
        finally:
            if collecting:
                gc.enable()

    def compiled_grid(self, game: Any) -> Any:
        """The ``GridGame`` the compiled search plays ``game`` by under ``backend``, or None for the Python search;
        ``backend: compiled`` where it cannot apply is refused in one line naming why."""
        if self.backend == "python":
            return None
        from rl_lightning.algos.alphazero.grid_games import grid_game_of

        kind = self._observation
        if kind == "auto":
            kind = "observation" if game.get_type().provides_observation_tensor else "info_state"
        grid = grid_game_of(game)
        problems = {
            f"{type(self).__name__} changes the search's steps": not self.compiled_form,
            f"rollout_weight={self.rollout_weight} plays random rollouts": self.rollout_weight > 0,
            f"{game} has no compiled rules (connect_four and tic_tac_toe have)": grid is None,
            f"the leaves read the {kind} tensor, not the observation tensor": kind != "observation",
        }
        for problem, found in problems.items():
            if found:
                if self.backend == "compiled":
                    raise ConfigError(f"{self._field}search_backend=compiled: {problem}; use search_backend: auto "
                                      "(the Python search there) or python")  # fmt: skip
                return None
        if importlib.util.find_spec("numba") is None:
            raise ConfigError(f"{self._field}search_backend={self.backend}: the compiled search of {game} needs numba; "
                              "pip install 'rl-lightning[games]', or set search_backend: python")  # fmt: skip
        return grid

    def _search(self, engine_states: list[Any], root_noise: Any) -> list[Node]:
        grid = self.compiled_grid(engine_states[0].get_game())
        if grid is not None:
            from rl_lightning.algos.alphazero.compiled_puct import compiled_search

            return compiled_search(self, engine_states, grid, root_noise)
        self._start(engine_states[0].get_game())
        roots = [self._root_type(state.clone()) for state in engine_states]
        self._evaluate([([], root) for root in roots])
        if root_noise is not None:
            self._add_root_noise(roots, root_noise)
        self._simulate(roots)
        return roots

    _root_type = Node  # the node class of the roots

    def _start(self, game: Any) -> None:
        """Read what a search of ``game`` needs before its roots are made."""
        self._best = game.max_utility()

    def _add_root_noise(self, roots: list[Node], root_noise: tuple[float, float, np.random.Generator]) -> None:
        """Mix ``Dirichlet(alpha)`` noise drawn from ``rng`` into each root's prior by ``fraction``."""
        alpha, fraction, rng = root_noise
        for root in roots:
            if root.prior is not None and root.legal:
                noise = rng.dirichlet([alpha] * len(root.legal))
                root.prior = [(1.0 - fraction) * p + fraction * n for p, n in zip(root.prior, noise, strict=True)]

    def _simulate(self, roots: list[Node]) -> None:
        """``simulations`` rounds: descend every tree to a leaf by ``_edge`` and evaluate the leaves in one batch."""
        for _ in range(self.simulations):
            pending = []
            for root in roots:
                node, path = root, []
                while node.solved is None and node.prior is not None:
                    index = self._edge(node, node is root)
                    path.append((node, index))
                    node = node.child(index)
                if node.solved is not None:
                    backup(path, node.solved, self._best)
                else:
                    pending.append((path, node))
            self._evaluate(pending)

    def _edge(self, node: Node, at_root: bool) -> int:
        """The edge a simulation follows from ``node`` (an index into ``node.legal``): PUCT's choice."""
        return node.select(self.c_puct)

    def _evaluate(self, pending: list[tuple[list[tuple[Node, int]], Node]]) -> None:
        """Set the prior of each pending leaf and back its value up its path (one batched forward)."""
        if not pending:
            return
        leaves = [node for _, node in pending]
        if self.evaluator is None:
            values = [0.0] * len(leaves)
            priors = [[1.0 / len(node.legal)] * len(node.legal) for node in leaves]
        else:
            obs, mask = self.observe(leaves)
            logits, value = self.evaluator(obs, mask)
            probs = torch.softmax(logits.float(), -1).cpu().numpy().astype(np.float64)
            values = value.float().cpu().tolist()
            priors = [_normalised(probs[i, node.legal]) for i, node in enumerate(leaves)]
        mix = self.rollout_weight
        for (path, node), prior, value in zip(pending, priors, values, strict=True):
            node.prior = prior
            # The network's value is the acting seat's; the other seat of a two-seat zero-sum game has its negation.
            per_seat = [-value] * node.state.num_players()
            per_seat[node.player] = value
            if mix > 0:
                played = self._rollout(node.state)
                per_seat = [(1.0 - mix) * v + mix * z for v, z in zip(per_seat, played, strict=True)]
            node.value = per_seat[node.player]
            backup(path, per_seat, self._best)

    def _rollout(self, state: Any) -> list[float]:
        """Every seat's result of one game played on from ``state`` with uniformly random moves."""
        state = state.clone()
        choice = self._rng.choice
        while not state.is_terminal():
            state.apply_action(choice(state.legal_actions()))
        return state.returns()

    def observe(self, leaves: list[Node]) -> tuple[torch.Tensor, torch.Tensor]:
        """The acting seat's observation and legal-action mask of each leaf, as the env would give them."""
        observer, shape = self._observer(leaves[0].state.get_game())
        obs = np.empty((len(leaves), *shape), dtype=np.float32)
        mask = np.zeros((len(leaves), leaves[0].state.get_game().num_distinct_actions()), dtype=bool)
        for i, node in enumerate(leaves):
            observer.set_from(node.state, node.player)
            obs[i] = observer.tensor.reshape(shape)
            mask[i, node.legal] = True
        return torch.from_numpy(obs), torch.from_numpy(mask)

    def _observer(self, game: Any) -> tuple[Any, tuple[int, ...]]:
        """OpenSpiel's observer of the tensor the env reads (its ``observation`` choice), made once per game."""
        key = str(game)
        if key not in self._observers:
            from open_spiel.python.observation import INFO_STATE_OBS_TYPE, make_observation

            kind = self._observation
            if kind == "auto":
                kind = "observation" if game.get_type().provides_observation_tensor else "info_state"
            if kind == "info_state":
                observer = make_observation(game, INFO_STATE_OBS_TYPE)
                shape = tuple(game.information_state_tensor_shape())
            else:
                observer = make_observation(game)
                shape = tuple(game.observation_tensor_shape())
            self._observers[key] = (observer, tuple(int(d) for d in shape))
        return self._observers[key]
