"""AlphaZero (Silver et al., Science 2018) as a LightningModule: self-play in which every learning decision is a
PUCT tree search (``puct.py``) guided by the network, trained toward what the search played.

The network is PPO's actor-critic (same encoders, ``board`` included, same checkpoints' shapes: ``export``, the
``NetworkMCTS`` bot, ``GameEvaluation``, ``init_weights`` from a PPO or BC run all read it). What differs from PPO
is where its targets come from:

- **acting** (``acting_policy`` when collecting): for every row of the self-play batch, ``simulations`` PUCT
  simulations from the engine's live game state, Dirichlet noise at the root; the move is drawn from the visit
  distribution for the game's first ``explore_moves`` moves, then the most visited (AlphaZero's temperature 1, then
  → 0); ``search_policy`` (the visit distribution, proven losing moves removed: ``visit_targets``) is stored;
- **learning** (``minibatch_loss``): cross-entropy of the policy to ``search_policy``, squared error of the value to
  the decision's return (per-seat credit and GAE of ``algos/selfplay_targets.py``; ``gamma = gae_lambda = 1``, the
  defaults, make it the game's result for the seat that moved, bootstrapped only where a rollout cuts a game).

Perfect-information, deterministic two-seat zero-sum OpenSpiel games with terminal rewards (tic-tac-toe, Connect
Four); other envs are refused in one line at setup. Each search costs ``simulations`` batched network forwards and
Python tree work per row and tick: budgets are thousands of games, not millions of steps.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.alphazero.gumbel import GumbelSearch
from rl_lightning.algos.alphazero.puct import PUCTSearch, check_searchable
from rl_lightning.algos.alphazero.tree import root_values, tree_positions, visit_targets
from rl_lightning.algos.ppo import PPO, ppo_arguments
from rl_lightning.envs.base import BatchedEnv, EnvSpec
from rl_lightning.envs.games.reflection import Reflection, board_reflection
from rl_lightning.errors import ConfigError, check_fields
from rl_lightning.networks import distributions as D
from rl_lightning.objectives.alphazero import alphazero_loss, soft_cross_entropy

SEARCH_POLICY = "search_policy"  # [A] float: the search's visit distribution at a decision (the policy target)
# ``tree_targets`` K > 0: K other positions of each decision's search tree, with their own policy targets.
TREE_OBS, TREE_MASK, TREE_POLICY, TREE_VALID = "tree_obs", "tree_mask", "tree_policy", "tree_valid"
TERMS = ("loss", "loss_policy", "loss_value", "search_kl", "entropy", "loss_tree", "grad_norm")


class AlphaZero(PPO):
    """AlphaZero self-play on PPO's network (the module docstring). Logs ``train/loss_policy`` (cross-entropy to
    the search), ``train/search_kl`` (``KL(search ‖ network)``), ``train/loss_value``, ``train/entropy``.

    Args:
        env_spec: linked from ``data.env_spec`` by the CLI.
        hidden_sizes, activation, encoder, share_encoder, ortho_init, normalize_obs, norm_clip_obs: the network, as
            PPO builds it (``encoder: board`` for Connect Four's planes).
        lr, adam_eps, anneal_lr, anneal_lr_start, max_grad_norm: Adam and its schedule, as PPO.
        weight_decay: L2 penalty on every weight (AlphaZero's ``c‖θ‖²``; Adam's coupled form).
        gamma, gae_lambda: the value target's discount and λ (1 and 1: the game's result).
        update_epochs, num_minibatches: passes over each rollout and minibatches per pass.
        vf_coef: weight of the value's ½ squared error beside the policy's cross-entropy.
        simulations: PUCT simulations per decision (each one batched forward over the self-play batch).
        c_puct: PUCT's exploration constant.
        dirichlet_alpha, dirichlet_fraction: the root noise ``(1 − f)·P + f·Dir(α)`` (0: no noise).
        explore_moves: moves of each game (counted from its start, both seats) drawn from the visit distribution;
            later moves play the most visited action.
        target_temperature: the policy target is the visit distribution raised to ``1 / target_temperature`` and
            renormalised (1: AlphaZero's; below 1 sharper, so the network keeps less mass on moves the search
            rarely visits, which a best response would exploit). The moves are drawn from the plain distribution.
        value_target_search: the value target is ``(1 − w)·z + w·q``: ``z`` the decision's return, ``q`` the search's
            value of the position (its root's visit-weighted mean value, or its proven result). 0: AlphaZero's ``z``;
            above 0 the target is less shaken by the exploratory moves played later in the game.
        tree_targets: besides each decision's root, train the policy on up to this many other positions of its
            search tree (either seat's), each toward its own visit distribution with proven losses removed (the
            positions a best response would steer into are searched there, though self-play rarely plays them);
            0: the root only (AlphaZero).
        tree_min_visits: a tree position qualifies with this many visits, or once solved.
        tree_coef: the weight of the tree positions' mean cross-entropy in the loss.
        search: ``puct`` (AlphaZero's: PUCT, Dirichlet noise at the root, the visit counts as the policy target) or
            ``gumbel`` (Gumbel AlphaZero, ``gumbel.py``: sequential halving at the root from a Gumbel draw, the
            improved policy ``softmax(logits + σ(q̂))`` as the target; a policy improvement at few simulations, e.g.
            8-16). Under ``gumbel`` the first ``explore_moves`` moves of a game carry the Gumbel draw (the move is a
            sample), later ones none (greedy); the Dirichlet noise is not used (``dirichlet_fraction: 0``), and
            ``c_puct`` only by a PUCT search of the trained network (``NetworkMCTS``).
        max_considered: ``gumbel``: moves the root's sequential halving starts from (the paper's 16).
        gumbel_c_visit, gumbel_c_scale: ``gumbel``: ``σ(q̂) = (c_visit + max N) · c_scale · q̂`` (the paper's 50, 0.1).
        gumbel_q_scaling: ``gumbel``: ``q̂`` in [0, 1] by each node's own minimum and maximum (``minmax``, the
            paper's) or by the game's results (``bounds``: smaller steps from the prior).
        search_backend: ``auto`` (default): the compiled form of the PUCT search (``compiled_puct.py``: the same
            visits, values and proofs as the Python search, ~1.8x faster per Connect Four self-play step) where it
            applies (Connect Four and tic-tac-toe, ``search: puct``), the Python search elsewhere; ``compiled``:
            refuse a game or setting it does not cover, in one line before any game is played; ``python``: always
            the Python search (the reference).
        reflect: train each position, drawn anew per minibatch with probability 1/2, as its left-right mirror image
            (observation, legal moves and policy targets mirrored, value kept: ``envs/games/reflection.py``), so the
            network learns both orientations of every position it is shown (AlphaZero's augmentation by the board's
            symmetry). Connect Four and tic-tac-toe; refused for other games.
        init_weights, histograms_every_n_updates: as PPO.
    """

    family = "alphazero"
    term_names = TERMS

    def __init__(
        self,
        env_spec: EnvSpec | None = None,
        hidden_sizes: tuple[int, ...] = (128, 128),
        activation: str = "relu",
        encoder: str | dict[str, str] = "mlp",
        share_encoder: bool = True,
        lr: float = 1e-3,
        adam_eps: float = 1e-8,
        anneal_lr: bool = False,
        anneal_lr_start: float = 0.0,
        weight_decay: float = 1e-4,
        gamma: float = 1.0,
        gae_lambda: float = 1.0,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        vf_coef: float = 1.0,
        max_grad_norm: float = 1.0,
        normalize_obs: bool = False,
        norm_clip_obs: float = 10.0,
        ortho_init: bool = True,
        simulations: int = 64,
        c_puct: float = 1.5,
        dirichlet_alpha: float = 0.3,
        dirichlet_fraction: float = 0.25,
        explore_moves: int = 8,
        target_temperature: float = 1.0,
        value_target_search: float = 0.0,
        tree_targets: int = 0,
        tree_min_visits: int = 8,
        tree_coef: float = 1.0,
        search: str = "puct",
        max_considered: int = 16,
        gumbel_c_visit: float = 50.0,
        gumbel_c_scale: float = 0.1,
        gumbel_q_scaling: str = "minmax",
        search_backend: str = "auto",
        reflect: bool = False,
        init_weights: str | None = None,
        histograms_every_n_updates: int | None = None,
    ) -> None:
        super().__init__(env_spec, hidden_sizes=hidden_sizes, activation=activation, encoder=encoder,
                         share_encoder=share_encoder, lr=lr, adam_eps=adam_eps, anneal_lr=anneal_lr,
                         anneal_lr_start=anneal_lr_start, gamma=gamma, gae_lambda=gae_lambda,
                         update_epochs=update_epochs, num_minibatches=num_minibatches, vf_coef=vf_coef,
                         max_grad_norm=max_grad_norm, normalize_obs=normalize_obs, norm_clip_obs=norm_clip_obs,
                         ortho_init=ortho_init, init_weights=init_weights,
                         histograms_every_n_updates=histograms_every_n_updates)  # fmt: skip
        check_fields([
            ("weight_decay", weight_decay >= 0, "use 0 (off) or a small positive L2 weight, e.g. 1e-4"),
            ("dirichlet_alpha", dirichlet_alpha > 0, "use a positive concentration, e.g. 0.3 (AlphaZero chess)"),
            ("dirichlet_fraction", 0.0 <= dirichlet_fraction <= 1.0, "use a fraction in [0, 1], e.g. 0.25"),
            ("explore_moves", explore_moves >= 0, "use 0 (always the most visited move) or a number of moves"),
            ("target_temperature", target_temperature > 0, "use a positive temperature, e.g. 1 (AlphaZero) or 0.25"),
            ("value_target_search", 0.0 <= value_target_search <= 1.0, "use a weight in [0, 1] (0: the result z)"),
            ("tree_targets", tree_targets >= 0, "use 0 (the root only) or a number of tree positions, e.g. 4"),
            ("tree_min_visits", tree_min_visits >= 1, "use a number of visits >= 1, e.g. 8"),
            ("tree_coef", tree_coef >= 0, "use a weight >= 0, e.g. 1"),
            ("search", search in ("puct", "gumbel"), "use puct (AlphaZero) or gumbel (Gumbel AlphaZero)"),
            ("search_backend", search_backend in ("auto", "compiled", "python"), "use auto, compiled or python"),
        ], self.hparams)  # fmt: skip
        if self.env_spec.action_kind != "discrete" or not self.env_spec.has_action_mask:
            raise ConfigError(f"AlphaZero searches masked discrete moves, but {self.env_spec.name} has "
                              f"{self.env_spec.action_kind} actions without masks; use a game env")  # fmt: skip
        self._value_when_acting = False  # ``process_rollout`` values the rollout in one batched forward
        self.reflection = self._reflection() if reflect else None
        self.search = self._search_of_settings()

    def _search_of_settings(self) -> PUCTSearch:
        """The search ``search`` names, with its settings (Gumbel's Dirichlet conflict refused in one line)."""
        hp = self.hparams
        if hp.search_backend == "compiled" and hp.search != "puct":
            raise ConfigError(f"model.search_backend=compiled covers search: puct, not {hp.search}; use "
                              "search_backend: auto or python")  # fmt: skip
        if hp.search == "puct":
            return PUCTSearch(self.logits_and_value, hp.simulations, hp.c_puct, field="model.",
                              backend=hp.search_backend)  # fmt: skip
        if hp.dirichlet_fraction > 0:
            raise ConfigError(f"model.dirichlet_fraction={hp.dirichlet_fraction} adds Dirichlet noise to PUCT's root, "
                              "but search: gumbel explores by its Gumbel draw: set "
                              "model.dirichlet_fraction: 0")  # fmt: skip
        return GumbelSearch(self.logits_and_value, hp.simulations, hp.max_considered, hp.gumbel_c_visit,
                            hp.gumbel_c_scale, hp.gumbel_q_scaling, hp.c_puct, field="model.")  # fmt: skip

    def _reflection(self) -> Reflection:
        """The board's reflection for ``reflect``; refused in one line where it would be wrong."""
        reflection = board_reflection(self.env_spec)
        if reflection is None:
            raise ConfigError(f"model.reflect=true: no left-right reflection is known for {self.env_spec.name} "
                              f"(observation {list(self.env_spec.obs_shape)}); it is for open_spiel:connect_four "
                              "and open_spiel:tic_tac_toe, observation tensor: set model.reflect: false")  # fmt: skip
        if self.obs_normalizer is not None or self.decodes_once:
            raise ConfigError(
                "model.reflect=true mirrors the raw board, which normalize_obs or a fixed decoding "
                "would not show: set model.normalize_obs: false, or model.reflect: false"
            )
        return reflection

    def reflected(self, mb: dict[str, Any]) -> dict[str, Any]:
        """``mb`` with a random half of its rows (one draw per row from ``self.generator``) mirrored: the
        observations, legal masks, moves and policy targets, the tree positions' too; values and returns kept."""
        reflection = self.reflection
        assert reflection is not None
        rows = len(mb[keys.OBS])
        flip = torch.rand(rows, generator=self.generator).lt(0.5).to(mb[keys.OBS].device)

        def pick(value: torch.Tensor, mirrored: torch.Tensor) -> torch.Tensor:
            return torch.where(flip.view(-1, *([1] * (value.dim() - 1))), mirrored, value)

        out = dict(mb)
        out[keys.OBS] = pick(mb[keys.OBS], reflection.observations(mb[keys.OBS]))
        out[keys.ACTION] = pick(mb[keys.ACTION], reflection.moves(mb[keys.ACTION]))
        for key in (keys.ACTION_MASK, SEARCH_POLICY, TREE_MASK, TREE_POLICY):
            if key in mb:
                out[key] = pick(mb[key], reflection.per_move(mb[key]))
        if TREE_OBS in mb:
            out[TREE_OBS] = pick(mb[TREE_OBS], reflection.observations(mb[TREE_OBS]))
        return out

    @property
    def update_keys(self) -> tuple[str, ...]:  # type: ignore[override]
        """The rollout columns the minibatches carry (the tree positions' too, with ``tree_targets``)."""
        tree = (TREE_OBS, TREE_MASK, TREE_POLICY, TREE_VALID) if self.hparams.tree_targets else ()
        return (keys.OBS, keys.ACTION, keys.VALUE, keys.RETURN, SEARCH_POLICY, *tree)

    def save_hyperparameters(self, *args: Any, **kwargs: Any) -> None:
        """PPO's ``__init__`` calls this: save PPO's whole argument set and AlphaZero's own (``ppo_arguments``)."""
        ppo_frame = inspect.currentframe().f_back  # PPO.__init__, called by AlphaZero.__init__
        own = {name: ppo_frame.f_back.f_locals[name] for name in inspect.signature(AlphaZero.__init__).parameters
               if name != "self"}  # fmt: skip
        super().save_hyperparameters({**ppo_arguments(ppo_frame), **own})

    def configure_optimizers(self) -> torch.optim.Optimizer:
        fused = self.device.type in ("cpu", "cuda")
        hp = self.hparams
        return torch.optim.Adam(self.parameters(), lr=hp.lr, eps=hp.adam_eps, weight_decay=hp.weight_decay,
                                fused=fused)  # fmt: skip

    def check_config(self, datamodule: Any) -> None:
        """PPO's rollout arithmetic, and the env must be one the search can play (one line, before any work)."""
        super().check_config(datamodule)
        self.search._observation = check_searchable(datamodule.env, "data.env", "AlphaZero")
        self.search.compiled_grid(datamodule.env.game)  # ``search_backend: compiled`` where it cannot apply: refused
        if getattr(datamodule, "compile", False):  # the fused step acts with the network alone
            raise ConfigError("data.compile=true steps with the network alone, but AlphaZero acts by its tree "
                              "search; set data.compile: false")  # fmt: skip

    def acting_policy(self, env: BatchedEnv, deterministic: bool = False, training: bool = True) -> Any:
        """Collecting: the search of every row from its engine state (the module docstring). Evaluating: the
        network alone, as PPO (``GameEvaluation.search_simulations`` plays the searching agent)."""
        if not training:
            return super().acting_policy(env, deterministic, training)

        def policy(obs: TensorDict, generator: torch.Generator) -> TensorDict:
            states = [env.env.engine_state(env.state, row) for row in range(env.num_envs)]
            return self.search_and_act(states, generator, obs.batch_size, obs.device)

        return policy

    @torch.no_grad()
    def search_and_act(
        self, states: list[Any], generator: torch.Generator, batch_size: Any = None, device: Any = "cpu"
    ) -> TensorDict:
        """One self-play decision per live ``pyspiel.State``: ``action`` and ``search_policy`` (the module
        docstring). Every draw (root noise, the move) comes from ``generator``."""
        hp = self.hparams
        seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
        if isinstance(self.search, GumbelSearch):
            scales = [1.0 if state.move_number() < hp.explore_moves else 0.0 for state in states]
            (visits, action), values, tree = self.search.search(
                states, (scales, np.random.default_rng(seed)), read=self._read_gumbel_roots
            )
            visits, action = torch.from_numpy(visits), torch.from_numpy(action)
        else:
            noise = (hp.dirichlet_alpha, hp.dirichlet_fraction, np.random.default_rng(seed))
            visits, values, tree = self.search.search(
                states, noise if hp.dirichlet_fraction > 0 else None, read=self._read_roots
            )
            visits = torch.from_numpy(visits)
            drawn = torch.multinomial(visits.to(generator.device), 1, generator=generator).cpu()
            exploring = torch.tensor([state.move_number() < hp.explore_moves for state in states])
            action = torch.where(exploring, drawn.squeeze(-1), visits.argmax(-1))
        out = {keys.ACTION: action, SEARCH_POLICY: self._sharpened(visits), keys.SEARCH_VALUE: torch.from_numpy(values),
               **tree}  # fmt: skip
        return TensorDict(out, batch_size=batch_size or [len(states)]).to(device)

    def _sharpened(self, visits: torch.Tensor) -> torch.Tensor:
        """The policy target: the visit distribution raised to ``1 / target_temperature``, renormalised."""
        targets = visits.pow(1.0 / self.hparams.target_temperature)
        return targets / targets.sum(-1, keepdim=True).clamp_min(1e-30)

    def _read_gumbel_roots(self, roots: list[Any]) -> tuple[Any, np.ndarray, dict[str, torch.Tensor]]:
        """``_read_roots`` under ``search: gumbel``: the roots' improved policies and moves instead of visit targets."""
        _, values, tree = self._read_roots(roots, targets=False)
        return self.search.outputs(roots, self.env_spec.num_actions), values, tree  # type: ignore[attr-defined]

    def _read_roots(
        self, roots: list[Any], targets: bool = True
    ) -> tuple[np.ndarray | None, np.ndarray, dict[str, torch.Tensor]]:
        """What a decision keeps of its search: the roots' visit targets and values, and ``tree_targets`` other
        positions per root (observation, mask, sharpened target; ``tree_valid`` False where a tree had fewer)."""
        hp, num_actions = self.hparams, self.env_spec.num_actions
        tree: dict[str, torch.Tensor] = {}
        if hp.tree_targets:
            k, rows = hp.tree_targets, len(roots)
            tree = {
                TREE_OBS: torch.zeros(rows, k, *self.env_spec.obs_shape),
                TREE_MASK: torch.ones(rows, k, num_actions, dtype=torch.bool),
                TREE_POLICY: torch.zeros(rows, k, num_actions),
                TREE_VALID: torch.zeros(rows, k, dtype=torch.bool),
            }
            picked = tree_positions(roots, k, hp.tree_min_visits)
            nodes = [node for row in picked for node in row]
            if nodes:
                at = [(row, slot) for row, found in enumerate(picked) for slot in range(len(found))]
                index = tuple(torch.tensor(axis) for axis in zip(*at, strict=True))
                obs, mask = self.search.observe(nodes)
                tree[TREE_OBS][index] = obs
                tree[TREE_MASK][index] = mask
                tree[TREE_POLICY][index] = self._sharpened(torch.from_numpy(visit_targets(nodes, num_actions)))
                tree[TREE_VALID][index] = True
        return visit_targets(roots, num_actions) if targets else None, root_values(roots), tree

    @torch.no_grad()
    def process_rollout(self, batch: TensorDict) -> TensorDict:
        """PPO's self-play targets; then ``return`` mixed with the search's values (``value_target_search``)."""
        batch = super().process_rollout(batch)
        weight = self.hparams.value_target_search
        if weight > 0:
            batch[keys.RETURN] = (1.0 - weight) * batch[keys.RETURN] + weight * batch[keys.SEARCH_VALUE]
        return batch

    def minibatch_loss(self, mb: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, terms)`` of one minibatch: AlphaZero's loss (``objectives/alphazero.py``) and its ``TERMS``
        but the gradient norm, stacked and detached."""
        if self.reflection is not None:
            mb = self.reflected(mb)
        if keys.FEATURES in mb:  # a fixed decoding, decoded once per update
            features = critic_features = mb[keys.FEATURES]
        else:
            features = self.encoder(mb[keys.OBS])
            critic_features = features if self.critic_encoder is None else self.critic_encoder(mb[keys.OBS])
        logits = D.masked_logits(self.actor(features), mb.get(keys.ACTION_MASK))
        value = self.critic(critic_features).squeeze(-1)
        terms = alphazero_loss(logits, value, mb[SEARCH_POLICY], mb[keys.RETURN], self.hparams.vf_coef)
        terms["loss_tree"] = self._tree_loss(mb) if self.hparams.tree_targets else torch.zeros_like(terms["loss"])
        loss = terms["loss"] + self.hparams.tree_coef * terms["loss_tree"]
        return loss, torch.stack([terms[name] for name in TERMS[:-1]]).detach()

    def _tree_loss(self, mb: dict[str, Any]) -> torch.Tensor:
        """The mean cross-entropy of the policy to the tree positions' targets, over the valid ones. The positions are
        stored raw, as the search observed them: normalised here as the search's network reads them."""
        obs = mb[TREE_OBS].flatten(0, 1)
        if self.obs_normalizer is not None:
            obs = self.obs_normalizer(obs)
        logits = D.masked_logits(self.actor(self.encoder(obs)), mb[TREE_MASK].flatten(0, 1))
        cross_entropy = soft_cross_entropy(torch.log_softmax(logits, -1), mb[TREE_POLICY].flatten(0, 1))
        valid = mb[TREE_VALID].flatten().to(cross_entropy.dtype)
        return (cross_entropy * valid).sum() / valid.sum().clamp_min(1.0)
