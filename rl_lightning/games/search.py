"""A player that searches: AlphaZero-style PUCT tree search over the engine's game state, with a network's policy
as the prior and its value head as the leaf evaluation (DESIGN.md §10).

``NetworkMCTS`` is a bot (``bot(obs, action_mask, seat, generator) -> action``) that declares
``needs_engine_state = True``: the match driver, ``GameEvaluation`` and the self-play collector give it its rows'
live ``pyspiel.State`` objects, which it clones and never changes. Per decision and row it grows a tree of
``simulations`` leaves from the acting seat's position: each simulation descends by PUCT,

    a* = argmax_a  Q(s, a) + c_puct · P(s, a) · √max(N(s), 1) / (1 + N(s, a)),

where ``Q(s, a)`` is the mean value of the child for the seat that moves at ``s`` (0 while unvisited), ``P`` the
prior over the legal actions (softmax of the network's masked logits) and ``N`` visit counts; it stops at a node
not yet evaluated or at a finished game. A finished game is scored exactly (``state.returns()``); any other leaf
by the network, ``V(obs)`` for the seat to act there, which in a two-seat zero-sum game is ``-V`` for the other
seat. Every node on the path adds the leaf's value for the seat that moved at it, so opponents' turns are played
by the same search and every choice is scored from its mover's side (for the root: the searching seat's). The
leaves of all rows are evaluated in one batched forward per simulation.

Results are proven as in MCTS-Solver (Winands et al., 2008): a node is solved when one of its moves reaches the
game's best result for its mover, or when all its children are solved; the search then stops at it as at a
finished game. The move is one that keeps a proven result, else the most visited root action (ties: the higher mean
value, then the lower action), or with ``temperature > 0`` a draw with probability ∝ N(s_0, a)^(1/temperature) from
the call's ``generator``. Nothing else is random, so a seeded match repeats.

Without a network (``module=None``: what a config's class path builds) the prior is uniform and every non-terminal
leaf is worth 0: a plain tree search on exact game results, which finds wins and blocks within its horizon.

Refused in one line (``check_env``, before any game is played): envs without engine states (PettingZoo), games
with hidden information (a search of the true state would read the other seats' cards), chance nodes, rewards
during the game, or seats whose values the network cannot give (more than two seats, or two that are not zero-sum).
"""

from __future__ import annotations

import gc
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import PPO, SPO
from rl_lightning.envs.games.bots.mcts import engine_rows
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import REVISION_KEY, read_checkpoint

#: ``(obs [L, *obs], mask [L, A] bool) -> (logits [L, A], value [L])``: the network as the search reads it.
Evaluator = Any


class _Node:
    """One position of a search tree: its state, whose turn, and the statistics of its legal actions (plain lists:
    for a handful of actions a Python loop costs less than numpy's per-call overhead)."""

    __slots__ = ("children", "counts", "legal", "player", "prior", "solved", "state", "value_sum", "visits")

    def __init__(self, state: Any) -> None:
        self.state = state
        terminal = state.is_terminal()
        #: Every seat's result under best play, once known: the game's returns at its end, or proven (``_prove``).
        self.solved: list[float] | None = state.returns() if terminal else None
        self.player = -1 if terminal else state.current_player()
        self.legal: list[int] = [] if terminal else state.legal_actions()
        self.prior: list[float] | None = None  # set when the network evaluates the node
        self.counts = [0] * len(self.legal)
        self.value_sum = [0.0] * len(self.legal)
        self.visits = 0
        self.children: list[_Node | None] = [None] * len(self.legal)

    def select(self, c_puct: float) -> int:
        """The index (into ``legal``) of the PUCT choice (ties: the lowest index)."""
        scale = c_puct * math.sqrt(max(self.visits, 1))
        best, best_score = 0, -math.inf
        for index, (count, total, prior) in enumerate(zip(self.counts, self.value_sum, self.prior, strict=True)):
            score = (total / count if count else 0.0) + scale * prior / (1 + count)
            if score > best_score:
                best, best_score = index, score
        return best

    def child(self, index: int) -> _Node:
        node = self.children[index]
        if node is None:
            state = self.state.clone()
            state.apply_action(self.legal[index])
            node = self.children[index] = _Node(state)
        return node


def _normalised(probs: np.ndarray) -> list[float]:
    """The prior over the legal actions, summing to 1 (masked logits leave ~0 mass elsewhere)."""
    return (probs / probs.sum()).tolist()


def _backup(path: list[tuple[_Node, int]], values: Any, best: float) -> None:
    """Add the leaf's per-seat ``values`` along ``path``: each edge gets the value of the seat that moved.

    A solved leaf proves its way up as far as it can (MCTS-Solver, Winands et al. 2008): a node is solved when a
    child gives its mover the game's ``best`` result, or when every child is solved (the mover's best of them).
    """
    proving = path and path[-1][0].children[path[-1][1]].solved is not None
    for node, index in reversed(path):
        node.counts[index] += 1
        node.value_sum[index] += values[node.player]
        node.visits += 1
        if proving:
            node.solved = _proven(node, best)
            proving = node.solved is not None


def _proven(node: _Node, best: float) -> list[float] | None:
    """``node``'s result if its children prove it (a winning child, or all children solved), else None."""
    results = [child.solved if child is not None else None for child in node.children]
    mover = node.player
    if any(result is not None and result[mover] >= best for result in results):
        return next(result for result in results if result is not None and result[mover] >= best)
    if all(result is not None for result in results):
        return max(results, key=lambda result: result[mover])
    return None


class NetworkMCTS:
    """PUCT search with a network's prior and value (the module docstring), as a bot of the bot protocol.

    Args:
        module: the policy whose network guides the search: a PPO or SPO module (its masked logits and its critic;
            an SPO module's online prior). ``None``: uniform prior and zero leaf value (exact results only).
        simulations: leaves expanded per decision (each one batched network forward over the rows).
        c_puct: the exploration constant of PUCT.
        temperature: 0 plays the most visited action; above 0 draws ∝ visits^(1/temperature).
        evaluator: instead of ``module``, any ``(obs, mask) -> (logits, value)`` callable (``module_evaluator``).
        rollout_weight: λ in [0, 1]: a leaf is worth ``(1 − λ)·V + λ·z``, ``z`` the result of one uniformly random
            game played on from it (AlphaGo's mixed leaf evaluation; its moves drawn from a ``random.Random``
            seeded by one draw of the call's ``generator``); 0 (default): the value head alone.
    """

    #: Callers pass ``engine_states=[pyspiel.State, ...]`` (one per row) to a bot that declares this.
    needs_engine_state = True

    def __init__(
        self,
        module: Any = None,
        simulations: int = 100,
        c_puct: float = 1.5,
        temperature: float = 0.0,
        evaluator: Evaluator | None = None,
        rollout_weight: float = 0.0,
    ) -> None:
        if not isinstance(simulations, int) or simulations < 1:
            raise ConfigError(f"NetworkMCTS: simulations={simulations!r} must be an int >= 1 (e.g. 100)")
        if not c_puct > 0:
            raise ConfigError(f"NetworkMCTS: c_puct={c_puct!r} must be > 0 (e.g. 1.5)")
        if not temperature >= 0:
            raise ConfigError(f"NetworkMCTS: temperature={temperature!r} must be >= 0 (0: the most visited action)")
        if not 0.0 <= rollout_weight <= 1.0:
            raise ConfigError(f"NetworkMCTS: rollout_weight={rollout_weight!r} must be in [0, 1] (0: the value head "
                              "alone)")  # fmt: skip
        if module is not None and evaluator is not None:
            raise ConfigError("NetworkMCTS: give module or evaluator, not both")
        self.module = module
        self.evaluator = module_evaluator(module) if module is not None else evaluator
        self.simulations, self.c_puct, self.temperature = simulations, float(c_puct), float(temperature)
        self.rollout_weight = float(rollout_weight)
        self._rng = random.Random(0)  # the rollouts' moves: reseeded from the match generator at each call
        self._observation = "auto"
        self._best = 1.0  # the game's best result for a seat (``max_utility``), read at each search
        self._observers: dict[str, tuple[Any, tuple[int, ...]]] = {}

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device = "cpu", **kwargs: Any) -> NetworkMCTS:
        """A search guided by the network of a PPO or SPO checkpoint (frozen, in eval mode)."""
        return cls(load_searchable(path, device), **kwargs)

    def check_env(self, env: Any, field: str = "NetworkMCTS") -> None:
        """Refuse, in one line, an env whose games this search cannot play (before any game is played)."""
        name = getattr(getattr(env, "spec", None), "name", type(env).__name__)
        game = getattr(env, "game", None)
        if not callable(getattr(env, "engine_state", None)) or game is None:
            raise ConfigError(f"{field}: NetworkMCTS searches the engine's game state, which {name} "
                              f"({type(env).__name__}) does not expose; play it on an OpenSpiel game "
                              "(rl_lightning.envs.games.OpenSpielEnv, env_id: open_spiel:connect_four)")  # fmt: skip
        if not env.spec.perfect_information:
            raise ConfigError(f"{field}: {name} hides information, and a search of the true state would read it; "
                              "NetworkMCTS plays perfect-information games (connect_four, tic_tac_toe)")  # fmt: skip
        game_type = game.get_type()
        problems = {
            "has chance nodes": game_type.chance_mode.name != "DETERMINISTIC",
            "pays rewards during the game": game_type.reward_model.name != "TERMINAL",
            f"has {env.spec.num_seats} seats that are not two zero-sum ones": env.spec.num_seats > 2
            or (env.spec.num_seats == 2 and game_type.utility.name != "ZERO_SUM"),
        }
        for problem, found in problems.items():
            if found:
                raise ConfigError(f"{field}: {name} {problem}; NetworkMCTS searches deterministic games with "
                                  "terminal rewards and one seat or two zero-sum seats (connect_four, "
                                  "tic_tac_toe)")  # fmt: skip
        self._observation = getattr(env, "observation", "auto")
        if self.module is not None and tuple(env.spec.obs_shape) != tuple(self.module.env_spec.obs_shape):
            raise ConfigError(f"{field}: the network reads observations of shape "
                              f"{tuple(self.module.env_spec.obs_shape)} but {name} gives "
                              f"{tuple(env.spec.obs_shape)}; search with a network trained on this game")  # fmt: skip

    @torch.no_grad()
    def __call__(
        self,
        obs: Any,
        action_mask: torch.Tensor,
        seat: torch.Tensor,
        generator: torch.Generator,
        engine_states: list[Any] | None = None,
    ) -> torch.Tensor:
        if not engine_rows("NetworkMCTS", engine_states, action_mask):
            return torch.zeros(0, dtype=torch.int64, device=action_mask.device)
        if self.rollout_weight > 0:
            self._rng = random.Random(int(torch.randint(2**31 - 1, (1,), generator=generator, device=generator.device)))
        roots = self.search(engine_states)
        return self._choose(roots, generator).to(action_mask.device)

    def search(self, engine_states: list[Any]) -> list[_Node]:
        """Grow one tree per state (``simulations`` leaves each); the roots, with their visit statistics.

        Python's cyclic garbage collector is paused meanwhile: a search allocates many small objects, whose
        collections cost 4x the search itself (measured on Connect Four); the trees hold no cycles, so reference
        counting frees them.
        """
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._search(engine_states)
        finally:
            if collecting:
                gc.enable()

    def _search(self, engine_states: list[Any]) -> list[_Node]:
        self._best = engine_states[0].get_game().max_utility()
        roots = [_Node(state.clone()) for state in engine_states]
        self._evaluate([([], root) for root in roots])
        for _ in range(self.simulations):
            pending = []
            for root in roots:
                node, path = root, []
                while node.solved is None and node.prior is not None:
                    index = node.select(self.c_puct)
                    path.append((node, index))
                    node = node.child(index)
                if node.solved is not None:
                    _backup(path, node.solved, self._best)
                else:
                    pending.append((path, node))
            self._evaluate(pending)
        return roots

    def _evaluate(self, pending: list[tuple[list[tuple[_Node, int]], _Node]]) -> None:
        """Set the prior of each pending leaf and back its value up its path (one batched forward)."""
        if not pending:
            return
        leaves = [node for _, node in pending]
        if self.evaluator is None:
            values = [0.0] * len(leaves)
            priors = [[1.0 / len(node.legal)] * len(node.legal) for node in leaves]
        else:
            obs, mask = self._observe(leaves)
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
            _backup(path, per_seat, self._best)

    def _rollout(self, state: Any) -> list[float]:
        """Every seat's result of one game played on from ``state`` with uniformly random moves."""
        state = state.clone()
        choice = self._rng.choice
        while not state.is_terminal():
            state.apply_action(choice(state.legal_actions()))
        return state.returns()

    def _observe(self, leaves: list[_Node]) -> tuple[torch.Tensor, torch.Tensor]:
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

    def _choose(self, roots: list[_Node], generator: torch.Generator) -> torch.Tensor:
        """Each root's move from its visit counts (the class docstring)."""
        actions = []
        for root in roots:
            if root.solved is not None:  # proven: a move that keeps the proven result (the most visited one)
                keeps = [i for i, child in enumerate(root.children)
                         if child is not None and child.solved == root.solved]  # fmt: skip
                index = max(keeps, key=lambda i: (root.counts[i], -i))
            elif self.temperature > 0:
                weights = torch.tensor(root.counts, dtype=torch.float64) ** (1.0 / self.temperature)
                index = int(torch.multinomial(weights, 1, generator=generator))
            else:
                mean = [total / count if count else -math.inf for total, count in zip(root.value_sum, root.counts)]
                index = max(range(len(root.legal)), key=lambda i: (root.counts[i], mean[i], -i))
            actions.append(root.legal[index])
        return torch.tensor(actions, dtype=torch.int64)


def module_evaluator(module: Any) -> Evaluator:
    """``(obs, mask) -> (masked logits, value)`` of a PPO module (its actor and critic) or an SPO module (its
    online prior and critic); one-line ``ConfigError`` for a module without both heads (a recurrent policy, which
    needs its memory, or a world model)."""
    if getattr(module, "family", "") == "spo":

        def spo(obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            td = TensorDict({keys.OBS: obs, keys.ACTION_MASK: mask}, batch_size=[len(obs)]).to(module.device)
            return module.prior.params(td)[0], module.prior.value(td[keys.OBS])

        return spo
    if getattr(module, "family", "") == "ppo" and getattr(module.env_spec, "discrete", False):

        def ppo(obs: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            td = TensorDict({keys.OBS: obs, keys.ACTION_MASK: mask}, batch_size=[len(obs)]).to(module.device)
            features, critic_features = module._features(td)
            return module._logits(td, features), module.critic(critic_features).squeeze(-1)

        return ppo
    family = getattr(module, "family", None)
    raise ConfigError(f"NetworkMCTS: a {type(module).__name__} module (family {family!r}) has no policy and value "
                      "heads to search with; give a PPO or SPO module with discrete actions")  # fmt: skip


def load_searchable(path: str | Path, device: str | torch.device = "cpu") -> Any:
    """The PPO or SPO module of a checkpoint, frozen in eval mode (one-line ``ConfigError`` for another family)."""
    family = (read_checkpoint(str(path), source="NetworkMCTS").get(REVISION_KEY) or {}).get("family")
    classes = {"ppo": PPO, "spo": SPO}
    if family not in classes:
        raise ConfigError(f"NetworkMCTS: checkpoint {str(path)!r} has algorithm family {family!r}; the search reads "
                          f"the networks of {sorted(classes)} checkpoints")  # fmt: skip
    module = classes[family].load_from_checkpoint(str(path), map_location=device, weights_only=False)
    return module.requires_grad_(False).eval()
