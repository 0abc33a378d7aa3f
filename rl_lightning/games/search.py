"""A player that searches: ``NetworkMCTS``, AlphaZero-style PUCT tree search over the engine's game state
(``algos/alphazero/puct.py``: the search, its proofs and its batched leaf evaluation) with a network's policy as the
prior and its value head as the leaf evaluation (docs/guides/games.md), as a bot.

``NetworkMCTS`` is a bot (``bot(obs, action_mask, seat, generator) -> action``) that declares
``needs_engine_state = True``: the match driver, ``GameEvaluation`` and the self-play collector give it its rows'
live ``pyspiel.State`` objects, which it clones and never changes. Per decision and row it grows a tree of
``simulations`` leaves from the acting seat's position. The move is chosen among the root actions no proof rules
out (``unrefuted``, the rule of AlphaZero's targets: one that keeps a proven result; never a move proven lost while
another is unproven or proven better): the most visited (ties: the higher mean value, then the lower action), or with
``temperature > 0`` and the root unsolved a draw with probability ∝ N(s_0, a)^(1/temperature) from the call's
``generator``. Nothing else is random, so a seeded match repeats.

Without a network (``module=None``: what a config's class path builds) the prior is uniform and every non-terminal
leaf is worth 0: a plain tree search on exact game results, which finds wins and blocks within its horizon.

Refused in one line (``check_env``, before any game is played): envs without engine states (PettingZoo), games
with hidden information (a search of the true state would read the other seats' cards), chance nodes, rewards
during the game, or seats whose values the network cannot give (more than two seats, or two that are not zero-sum).
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import PPO, SPO, AlphaZero
from rl_lightning.algos.alphazero.puct import Evaluator, PUCTSearch, check_searchable
from rl_lightning.algos.alphazero.tree import Node, unrefuted
from rl_lightning.envs.games.bots.mcts import engine_rows
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import REVISION_KEY, read_checkpoint


class NetworkMCTS(PUCTSearch):
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
        if not temperature >= 0:
            raise ConfigError(f"NetworkMCTS: temperature={temperature!r} must be >= 0 (0: the most visited action)")
        if module is not None and evaluator is not None:
            raise ConfigError("NetworkMCTS: give module or evaluator, not both")
        evaluator = module_evaluator(module) if module is not None else evaluator
        super().__init__(evaluator, simulations, c_puct, rollout_weight, field="NetworkMCTS: ")
        self.module = module
        self.temperature = float(temperature)

    @classmethod
    def of_module(cls, module: Any, simulations: int, **kwargs: Any) -> NetworkMCTS:
        """The searching agent a run trained: ``module``'s own PUCT search settings where it has one (AlphaZero's
        ``c_puct``, ``rollout_weight`` and the observation its leaves read), else this class's defaults; ``kwargs``
        override either. Self-play's root noise stays out, and it plays the most visited move, as AlphaZero does once
        past ``explore_moves``."""
        search = getattr(module, "search", None)
        if not isinstance(search, PUCTSearch):
            return cls(module, simulations, **kwargs)
        player = cls(module, simulations, **{"c_puct": search.c_puct, "rollout_weight": search.rollout_weight,
                                             **kwargs})  # fmt: skip
        player._observation = search._observation  # until ``check_env`` reads the env's own choice
        return player

    @classmethod
    def from_checkpoint(cls, path: str | Path, device: str | torch.device = "cpu", **kwargs: Any) -> NetworkMCTS:
        """A search guided by the network of a PPO or SPO checkpoint (frozen, in eval mode)."""
        return cls(load_searchable(path, device), **kwargs)

    def check_env(self, env: Any, field: str = "NetworkMCTS") -> None:
        """Refuse, in one line, an env whose games this search cannot play (before any game is played)."""
        self._observation = check_searchable(env, field, "NetworkMCTS")
        name = env.spec.name
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
        return self.search(engine_states, read=lambda roots: self._choose(roots, generator)).to(action_mask.device)

    def _choose(self, roots: list[Node], generator: torch.Generator) -> torch.Tensor:
        """Each root's move among the moves its proofs leave (``unrefuted``, the rule of AlphaZero's targets): the
        most visited, or with ``temperature > 0`` and the root unsolved a draw ∝ visits^(1/temperature)."""
        actions = []
        for root in roots:
            keep = unrefuted(root)
            if self.temperature > 0 and root.solved is None:
                counts = torch.tensor([root.counts[i] for i in keep], dtype=torch.float64)
                # scaled by the largest count first, so a small temperature cannot overflow the power
                weights = (counts / counts.max()) ** (1.0 / self.temperature) if counts.max() > 0 else counts + 1.0
                index = keep[int(torch.multinomial(weights, 1, generator=generator))]
            else:
                mean = [total / count if count else -math.inf for total, count in zip(root.value_sum, root.counts)]
                index = max(keep, key=lambda i: (root.counts[i], mean[i], -i))
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
    if getattr(module, "family", "") in ("ppo", "alphazero") and getattr(module.env_spec, "discrete", False):
        return module.logits_and_value

    family = getattr(module, "family", None)
    raise ConfigError(f"NetworkMCTS: a {type(module).__name__} module (family {family!r}) has no policy and value "
                      "heads to search with; give a PPO or SPO module with discrete actions")  # fmt: skip


def load_searchable(path: str | Path, device: str | torch.device = "cpu") -> Any:
    """The PPO, AlphaZero or SPO module of a checkpoint, frozen in eval mode (one-line ``ConfigError`` for another
    family)."""
    family = (read_checkpoint(str(path), source="NetworkMCTS").get(REVISION_KEY) or {}).get("family")
    classes = {"ppo": PPO, "spo": SPO, "alphazero": AlphaZero}
    if family not in classes:
        raise ConfigError(f"NetworkMCTS: checkpoint {str(path)!r} has algorithm family {family!r}; the search reads "
                          f"the networks of {sorted(classes)} checkpoints")  # fmt: skip
    module = classes[family].load_from_checkpoint(str(path), map_location=device, weights_only=False)
    return module.requires_grad_(False).eval()
