"""Acting with a trained policy outside the trainer: ``load_policy(path)`` and the ``Policy`` it returns.

One API for every algorithm, as a plain Gymnasium loop needs it::

    policy = rl_lightning.load_policy("runs/ppo/version_0/checkpoints/last.ckpt")
    obs, _ = env.reset(seed=0)
    policy.reset()                      # a new episode (DreamerV3 clears its recurrent state; no-op otherwise)
    action = policy(obs)                # numpy in, an action of env.action_space out

A ``Policy`` acts exactly as evaluation does (``evaluation.episodes.play_episodes``): the module's ``act`` with
frozen observation statistics (eval mode), sampling or not as the run's ``Evaluation`` did, then the action
conversion every Gymnasium backend applies before ``env.step``. Evaluation plays the env's evaluation form: for an
Atari preset, ``rl_lightning.envs.make_eval_env`` builds that env as a plain Gymnasium env.
"""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import FAMILIES, SPO, DreamerV3, RecurrentPPO, RLModule
from rl_lightning.algos.dreamer.player import DreamerPlayer
from rl_lightning.algos.policy_io import action_space_from_spec, check_action_space, env_actions, obs_batch
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.envs.gymnasium.backend import no_snapshot
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import REVISION_KEY, read_checkpoint

__all__ = ["FAMILIES", "Policy", "evaluation_deterministic", "load_policy"]


def load_policy(
    path: str,
    action_space: spaces.Space | None = None,
    deterministic: bool | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> Policy:
    """Load any rl_lightning checkpoint (PPO, SPO, DreamerV3, a BC clone: read from the file) as a ``Policy``.

    Args:
        path: a ``.ckpt`` an ``rl-lightning fit`` run saved.
        action_space: the env's action space. Without it the space is rebuilt from the checkpoint's ``EnvSpec``,
            which records ``n`` and the Box bounds but not a ``Discrete`` ``start`` or a Box dtype; pass
            ``env.action_space`` when yours has a non-zero start or a non-float32 Box.
        deterministic: act with the mode (True) or sample (False); ``None`` acts as the run's evaluation did: the
            ``deterministic`` its ``Evaluation`` or ``GameEvaluation`` callback played with (saved in the checkpoint),
            else the algorithm's evaluation default (PPO, DreamerV3: the mode; SPO: a sample unless ``eval_greedy``).
        seed: seeds the policy's generator (sampled actions, DreamerV3's latents).
        device: where the networks run.
    """
    checkpoint = read_checkpoint(str(path), source="load_policy")
    family = (checkpoint.get(REVISION_KEY) or {}).get("family")
    if family not in FAMILIES:
        raise ConfigError(
            f"load_policy({str(path)!r}): the checkpoint's algorithm family is {family!r}; rl_lightning checkpoints "
            f"are one of {sorted(FAMILIES)}"
        )
    module = FAMILIES[family].load_from_checkpoint(path, map_location=device, weights_only=False)
    if deterministic is None:
        deterministic = evaluation_deterministic(checkpoint)
    return Policy(module, action_space, deterministic, seed)


def evaluation_deterministic(checkpoint: dict[str, Any]) -> bool | None:
    """The ``deterministic`` the run's ``Evaluation`` (or, for a game, ``GameEvaluation``) callback played with, if
    the checkpoint records one."""
    for key, state in (checkpoint.get("callbacks") or {}).items():
        played = str(key).startswith(("Evaluation", "GameEvaluation"))
        if played and isinstance(state, dict) and state.get("deterministic") is not None:
            return bool(state["deterministic"])
    return None


class Policy:
    """A trained module acting on raw Gymnasium observations, with the state a recurrent policy carries.

    ``policy(obs)`` takes one observation or a batch (numpy or torch) and returns actions in the env's action
    space: numpy for numpy input (a Python ``int`` for one ``Discrete`` action), tensors for tensor input. Per
    algorithm:

    * PPO: the policy network (argmax / Gaussian mean when deterministic).
    * SPO: ``policy(obs)`` acts with the prior π_θ alone (no search: what the networks alone do; cheaper than,
      and usually not as strong as, evaluation's search). ``policy.search(env)`` runs the SMC search evaluation
      runs, from the current state of a snapshot-capable rl_lightning env (``GymnasiumEnv`` or a torch env).
    * RecurrentPPO: carries its core's state per env between calls, reset as DreamerV3's below.
    * DreamerV3: carries the RSSM state and the previous action per env between calls. Call ``reset()`` when
      episodes start (or ``reset(rows)`` / ``is_first=`` for some envs of a batch); a new batch size needs
      ``reset()`` first.

    Args:
        module: a trained ``PPO``, ``SPO`` or ``DreamerV3`` (put in eval mode here: statistics frozen).
        action_space: see ``load_policy``.
        deterministic: see ``load_policy``.
        seed: seeds the generator used for sampled actions.
    """

    def __init__(
        self,
        module: RLModule,
        action_space: spaces.Space | None = None,
        deterministic: bool | None = None,
        seed: int = 0,
    ) -> None:
        self.module = module.eval()
        self.spec = module.env_spec
        if action_space is not None:
            check_action_space(action_space, self.spec)
        self.action_space = action_space if action_space is not None else action_space_from_spec(self.spec)
        self.deterministic = module.eval_deterministic if deterministic is None else deterministic
        self.device = module.device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self._player: DreamerPlayer | None = None
        self._pending_first: torch.Tensor | None = None

    @property
    def recurrent(self) -> bool:
        """Whether the policy carries state between calls (DreamerV3, RecurrentPPO)."""
        return isinstance(self.module, DreamerV3 | RecurrentPPO)

    @property
    def state(self) -> TensorDict | None:
        """The recurrent state per env (DreamerV3's RSSM ``deter``/``stoch``, RecurrentPPO's core ``h``/``c``); ``None``
        before a call, or stateless."""
        return None if self._player is None else self._player.state

    def reset(self, rows: Any = None) -> None:
        """Start new episodes: every env (``rows=None``), or the envs ``rows`` names (indices or a bool mask).

        The next call treats those envs' observations as first of an episode. A no-op for stateless policies.
        """
        if rows is None or self._player is None:
            self._player = None
            self._pending_first = None
            return
        pending = torch.zeros(self._player.num_envs, dtype=torch.bool, device=self.device)
        pending[torch.as_tensor(rows, device=self.device)] = True
        self._pending_first = pending if self._pending_first is None else self._pending_first | pending

    @torch.no_grad()
    def __call__(
        self,
        obs: Any,
        action_mask: Any = None,
        is_first: Any = None,
        deterministic: bool | None = None,
        generator: torch.Generator | None = None,
    ) -> Any:
        """Actions for ``obs`` in the env's action space (see the class docstring).

        Args:
            obs: one observation (``obs_shape``) or a batch (``[B, *obs_shape]``), numpy or torch.
            action_mask: bool, ``[n]`` or ``[B, n]`` (True = legal); required where the env had masks.
            is_first: bool per env (DreamerV3): these observations start episodes; ignored by stateless policies.
            deterministic: overrides the policy's setting for this call.
            generator: overrides the policy's generator for this call.
        """
        td, single = obs_batch(obs, self.spec, self.device, action_mask)
        det = self.deterministic if deterministic is None else deterministic
        gen = self.generator if generator is None else generator
        if self.recurrent:
            action = self._recurrent_act(td, is_first, det, gen)
        else:
            action = self.module.act(td, gen, deterministic=det)[keys.ACTION]
        return env_actions(action, self.action_space, single, obs)

    def _recurrent_act(self, td: TensorDict, is_first: Any, det: bool, gen: torch.Generator) -> torch.Tensor:
        batch = td.batch_size[0]
        if self._player is None:
            self._player = self.module.player(batch, self.device, det)  # type: ignore[operator]
            first = torch.ones(batch, dtype=torch.bool, device=self.device)
        elif self._player.num_envs != batch:
            raise ConfigError(
                f"the policy carries state for {self._player.num_envs} envs but got a batch of {batch}; call "
                "policy.reset() before acting for another number of envs"
            )
        else:
            first = torch.zeros(batch, dtype=torch.bool, device=self.device)
        if self._pending_first is not None:
            first |= self._pending_first
            self._pending_first = None
        if is_first is not None:
            first |= torch.as_tensor(is_first, dtype=torch.bool, device=self.device).reshape(batch)
        self._player.deterministic = det
        td[keys.IS_FIRST] = first
        return self._player(td, gen)[keys.ACTION]

    @torch.no_grad()
    def search(
        self, env: BatchedEnv, deterministic: bool | None = None, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """SPO only: the action SMC search picks from ``env``'s current state, as evaluation acts.

        ``env`` is a reset ``BatchedEnv`` over an env that can snapshot (the search steps copies of its state).
        Returns what ``env.step`` takes (the env contract's action tensor), so the loop is
        ``out = env.reset(); while ...: out = env.step(policy.search(env))``.
        """
        if not isinstance(self.module, SPO):
            name = type(self.module).__name__
            raise ConfigError(f"policy.search is SPO's; this is a {name} policy: act with policy(obs)")
        if not env.env.can_snapshot:
            raise ConfigError(f"policy.search steps snapshots of the env, and {no_snapshot(env.env)}")
        if env.state is None:
            name = type(env.env).__name__
            raise ConfigError(f"policy.search needs a reset BatchedEnv; call env.reset() on this {name} first")
        det = self.deterministic if deterministic is None else deterministic
        obs = env.env.observe(env.state)
        act = self.module.acting_policy(env, det, training=False)
        return act(obs, self.generator if generator is None else generator)[keys.ACTION]
