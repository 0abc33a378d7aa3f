"""The env contract of docs/reference/envs.md: a functional, batched, TensorDict-in/out core plus a stateful wrapper.

A ``TorchEnv`` holds only hyper-parameters. All per-episode data lives in a ``state`` TensorDict with
``batch_size=[n]`` so that a snapshot is ``state.clone()`` and search can expand it to any batch.
``BatchedEnv`` wraps a core with ``num_envs``, a device, a generator and an optional check mode, and
is what collectors and evaluators step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.finite import FiniteWatch
from rl_lightning.errors import ConfigError


@dataclass(frozen=True)
class ObsLeaf:
    """One observation array as the env contract carries it (per env, without the batch dim).

    Attributes:
        shape: shape of one observation (``()`` for a ``Discrete`` observation).
        dtype: the dtype it keeps in every store (``uint8`` pixels stay ``uint8``); networks convert it.
        classes: ``n`` for a ``Discrete(n)`` observation (int64 index, one-hot inside the network), else 0.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    classes: int = 0

    def __getstate__(self) -> dict[str, Any]:
        return dtypes_as_names(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        restore_dtypes(self, state)


#: The action space kinds an ``EnvSpec`` can describe (``EnvSpec.action_kind``).
ACTION_KINDS = ("discrete", "box", "multi_discrete", "multi_binary")


@dataclass(frozen=True)
class EnvSpec:
    """What a module needs to know about an env to build its networks.

    Attributes:
        name: human-readable env name (for logs and errors).
        obs_shape: shape of one observation (``()`` for a ``Dict`` observation: see ``obs_keys``).
        discrete: True for ``Discrete(n)`` actions (int64 ``[B]``); False for every other kind (``action_kind``).
        num_actions: ``n`` for discrete envs, else 0.
        action_shape: shape of one non-``Discrete`` action, ``()`` for discrete envs.
        action_low: per-dimension lower bounds of a continuous action (flattened), ``()`` otherwise.
        action_high: per-dimension upper bounds of a continuous action (flattened), ``()`` otherwise.
        has_action_mask: whether step/reset outputs carry ``action_mask`` (bool ``[B, n]``).
        max_episode_steps: truncation limit (0 when the env never truncates).
        obs_dtype: dtype of a single-array observation, kept in every store.
        obs_classes: ``n`` for a ``Discrete(n)`` observation (int64 ``[B]``), else 0.
        obs_keys: for a ``Dict`` observation, each leaf's nested key under ``obs`` (a tuple of names) and its
            ``ObsLeaf``, in a fixed order; empty for a single-array observation.
        action_nvec: classes per dimension of a ``MultiDiscrete`` action (flattened; int64 ``[B, *action_shape]``).
        action_binary: the action is ``MultiBinary`` (int64 0/1 ``[B, *action_shape]``).
        num_seats: seats per game (docs/guides/games.md); 1 for single-agent envs. A multi-seat env's ``reward`` is
            ``[B, num_seats]`` and its outputs carry ``seat`` (the seat to act next, int64 ``[B]``).
        perfect_information: every seat sees the whole state (False for Hearts, poker: search would read
            hidden cards, so SPO refuses such envs).
        game_params: the game's rule parameters that differ from its defaults, as sorted ``(name, value)`` pairs
            (OpenSpiel ``game_kwargs``: ``(("qs_breaks_hearts", False),)``); a game's fixed decoding of the
            observation (``model.encoder: hearts``) reads the rules it depends on from them.
        critic_obs_shape: shape of ``critic_obs`` (every seat's view, for a centralised critic) where the env emits
            it, else ``()``.
    """

    name: str
    obs_shape: tuple[int, ...]
    discrete: bool
    num_actions: int = 0
    action_shape: tuple[int, ...] = ()
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    has_action_mask: bool = False
    max_episode_steps: int = 0
    obs_dtype: torch.dtype = field(default=torch.float32)
    obs_classes: int = 0
    obs_keys: tuple[tuple[tuple[str, ...], ObsLeaf], ...] = ()
    action_nvec: tuple[int, ...] = ()
    action_binary: bool = False
    num_seats: int = 1
    perfect_information: bool = True
    game_params: tuple[tuple[str, Any], ...] = ()
    critic_obs_shape: tuple[int, ...] = ()

    def __getstate__(self) -> dict[str, Any]:
        """The fields with dtypes as names (``"int8"``): a hyper-parameter YAML writer (``hparams.yaml``) and pickle
        both read this state, and PyYAML cannot write a ``torch.dtype`` (the module's ``env_spec`` is saved)."""
        return dtypes_as_names(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore the fields; dtype names become ``torch.dtype`` again (older checkpoints hold the dtype itself)."""
        restore_dtypes(self, state)

    @property
    def action_kind(self) -> str:
        """``discrete``, ``box``, ``multi_discrete`` or ``multi_binary``."""
        if self.discrete:
            return "discrete"
        if self.action_binary:
            return "multi_binary"
        return "multi_discrete" if self.action_nvec else "box"

    def obs_leaves(self) -> list[tuple[tuple[str, ...], ObsLeaf]]:
        """Every observation array with its nested key under ``obs`` (``()``: ``obs`` itself is the array)."""
        if self.obs_keys:
            return list(self.obs_keys)
        return [((), ObsLeaf(tuple(self.obs_shape), self.obs_dtype, self.obs_classes))]


def dtypes_as_names(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with every ``torch.dtype`` written as its name (``torch.int8`` -> ``"int8"``)."""
    return {key: str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else value
            for key, value in fields.items()}  # fmt: skip


def restore_dtypes(obj: Any, state: dict[str, Any]) -> None:
    """Set a frozen dataclass's fields from ``state``, turning the ``dtype``-valued ones back into ``torch.dtype``."""
    for key, value in state.items():
        if key in ("dtype", "obs_dtype") and isinstance(value, str):
            value = getattr(torch, value)
        object.__setattr__(obj, key, value)


def data_device(td: TensorDict) -> torch.device:
    """The device ``td``'s tensors live on: its ``device``, or its first leaf's where it has none (a TensorDict
    built without ``device=`` reports ``None`` even when every tensor is on CUDA)."""
    if td.device is not None:
        return td.device
    return next(iter(td.values(include_nested=True, leaves_only=True))).device


def require_action_kind(spec: EnvSpec, algorithm: str, supported: tuple[str, ...]) -> None:
    """Refuse, with one line listing what ``algorithm`` supports, an env whose action space it cannot act in."""
    if spec.action_kind not in supported:
        raise ConfigError(
            f"{algorithm} does not support {spec.action_kind} actions (env {spec.name!r}); supported action "
            f"spaces: {', '.join(supported)}"
        )


_PHYSICS_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def physics_dtype(name: str, env: str) -> torch.dtype:
    """Map a ``dtype`` constructor argument (``"float32"``/``"float64"``) to a torch dtype.

    Raises:
        ValueError: naming the env, the bad value and the valid choices.
    """
    if name not in _PHYSICS_DTYPES:
        raise ConfigError(f"{env}: dtype={name!r} is not supported; choose one of {sorted(_PHYSICS_DTYPES)}")
    return _PHYSICS_DTYPES[name]


class TorchEnv(ABC):
    """Functional batched env core. Subclasses keep no per-episode data on ``self``.

    Contract:
        * ``reset_state(n, generator)`` returns a fresh ``state`` (``batch_size=[n]``) on ``generator.device``.
        * ``observe(state)`` returns ``TensorDict(obs, [action_mask])`` for the current state.
        * ``step_state(state, action, generator)`` returns ``(next_state, out)``; ``out`` holds ``obs``,
          ``final_obs``, ``reward`` (float32 ``[B]``), ``terminated``/``truncated``/``is_first`` (bool ``[B]``)
          and ``action_mask`` when the env has masks. Finished rows are reset in the same step: ``obs`` is the
          new episode's first observation, ``final_obs`` the true last one (equal to ``obs`` on other rows).
          With ``inplace=False`` the input ``state`` stays valid (search steps clones of it).
        * ``release(state)`` frees external resources a state refers to (no-op for pure torch envs).
        * An env whose per-step randomness can be drawn ahead of time subclasses ``NoiseSteppedEnv``
          (``envs/noise_step.py``): the fused, compilable rollout step (``data.compile``) needs that.
    """

    spec: EnvSpec
    #: True when ``state`` is plain tensors (no external resources), so it can be saved in a checkpoint.
    state_is_tensors: bool = True
    #: True when ``step_state(..., inplace=False)`` leaves the input state valid, i.e. a state can be snapshotted
    #: and stepped again (SPO's search and the sequence collector need it). Batch-stepping backends say False.
    can_snapshot: bool = True
    #: True when ``render_rgb`` draws frames (the Evaluation callback's ``record_video`` needs it).
    renders_rgb: bool = False

    def __new__(cls, *args: Any, **kwargs: Any) -> TorchEnv:
        env = super().__new__(cls)
        env._init_args = (args, kwargs)  # the recipe ``fresh`` rebuilds from
        return env

    def fresh(self, render: bool = False) -> TorchEnv:
        """A new env built with this one's constructor arguments, sharing no state with it (an eval env).

        Unlike a deep copy it never copies live resources (a Gymnasium adapter's running envs). ``render``
        asks for an env whose ``render_rgb`` works (Gymnasium backends then make their envs with
        ``render_mode="rgb_array"``); torch envs render without it.
        """
        args, kwargs = self._init_args
        return type(self)(*args, **kwargs)

    @abstractmethod
    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict: ...

    @abstractmethod
    def observe(self, state: TensorDict) -> TensorDict: ...

    @abstractmethod
    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]: ...

    def check_action(self, state: TensorDict, action: torch.Tensor) -> None:
        """Raise ``ValueError`` naming the problem if ``action`` is outside the space or masked (check mode)."""
        spec = self.spec
        batch = state.batch_size[0]
        if spec.discrete:
            if action.shape != (batch,) or action.dtype not in (torch.int64, torch.int32):
                raise ValueError(
                    f"{spec.name}: action must be an int64 tensor of shape ({batch},), got {action.dtype} "
                    f"{tuple(action.shape)}"
                )
            bad = (action < 0) | (action >= spec.num_actions)
            if bool(bad.any()):
                raise ValueError(
                    f"{spec.name}: action {action[bad][0].item()} is outside Discrete({spec.num_actions}); "
                    f"valid actions are 0..{spec.num_actions - 1}"
                )
            if spec.has_action_mask:
                mask = self.observe(state)[keys.ACTION_MASK]
                legal = mask.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
                if not bool(legal.all()):
                    row = int((~legal).nonzero()[0, 0])
                    raise ValueError(
                        f"{spec.name}: action {int(action[row])} in env {row} is masked (illegal); "
                        f"sample only where action_mask is True"
                    )
        elif spec.action_kind == "box":
            expected = (batch, *spec.action_shape)
            if tuple(action.shape) != expected or not action.is_floating_point():
                raise ValueError(
                    f"{spec.name}: action must be a float tensor of shape {expected}, got {action.dtype} "
                    f"{tuple(action.shape)}"
                )
            if not bool(torch.isfinite(action).all()):
                raise ValueError(f"{spec.name}: action contains NaN/inf; check the policy outputs")
        else:
            _check_multi_action(spec, action, batch)

    def render_rgb(self, state: TensorDict) -> torch.Tensor:
        """Draw each row of ``state`` as a uint8 ``[B, H, W, 3]`` image (only where ``renders_rgb`` is True)."""
        raise ConfigError(f"{self.spec.name}: this env has no rgb rendering, so its episodes cannot be recorded")

    def release(self, state: TensorDict) -> None:  # noqa: B027 - optional hook
        """Free external resources held by ``state`` (snapshot ids); harmless to call twice."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free everything this env holds."""


def _check_multi_action(spec: EnvSpec, action: torch.Tensor, batch: int) -> None:
    """``MultiDiscrete``/``MultiBinary``: an int tensor ``[B, *action_shape]`` with each entry in its range."""
    expected = (batch, *spec.action_shape)
    if tuple(action.shape) != expected or action.is_floating_point() or action.dtype == torch.bool:
        raise ValueError(
            f"{spec.name}: action must be an int64 tensor of shape {expected}, got {action.dtype} {tuple(action.shape)}"
        )
    nvec = spec.action_nvec or (2,) * int(torch.Size(spec.action_shape).numel())
    high = torch.tensor(nvec, device=action.device).reshape(spec.action_shape)
    bad = (action < 0) | (action >= high)
    if bool(bad.any()):
        raise ValueError(
            f"{spec.name}: action {action[bad][0].item()} is outside its {spec.action_kind} range; "
            f"valid: 0..n-1 with n per dimension {list(nvec)}"
        )


class BatchedEnv:
    """Stateful ``num_envs``-wide wrapper over a ``TorchEnv`` core, used by collectors and evaluators.

    Args:
        env: the functional core.
        num_envs: batch size.
        device: where the state and all outputs live.
        seed: seeds this wrapper's own generator (resets, opponents, noise).
        check: validate every action with ``env.check_action`` (slow: host syncs; for debugging).
        check_finite: watch observations and rewards for NaN/inf: collectors pass each stacked rollout to
            ``watch`` (device ops only) and read the result with ``check_outputs`` (one host sync per rollout).
    """

    def __init__(
        self,
        env: TorchEnv,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        check: bool = False,
        check_finite: bool = True,
    ) -> None:
        if num_envs < 1:
            raise ConfigError(f"num_envs={num_envs}: must be >= 1")
        self.env = env
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.check = check
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.state: TensorDict | None = None
        self.finite = FiniteWatch(env.spec.name, num_envs, self.device) if check_finite else None

    @property
    def spec(self) -> EnvSpec:
        return self.env.spec

    def reset(self) -> TensorDict:
        """Start ``num_envs`` fresh episodes; returns ``obs`` (+ ``action_mask``) and ``is_first`` (all True)."""
        if self.state is not None:
            self.env.release(self.state)
        self.state = self.env.reset_state(self.num_envs, self.generator)
        out = self.env.observe(self.state)
        out[keys.IS_FIRST] = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        return out

    def step(self, action: torch.Tensor) -> TensorDict:
        """Advance every env one step (same-step auto-reset); see ``TorchEnv.step_state`` for the outputs."""
        if self.state is None:
            raise RuntimeError("BatchedEnv.step called before reset()")
        if self.check:
            self.env.check_action(self.state, action)
        self.state, out = self.env.step_state(self.state, action, self.generator, inplace=True)
        return out

    def watch(self, out: TensorDict) -> None:
        """Fold env outputs (``[..., num_envs]``: one step, or a stacked rollout) into the NaN/inf watch; no sync."""
        if self.finite is not None:
            self.finite.update(out)

    def check_outputs(self) -> None:
        """Raise ``EnvError`` naming the env and index if a watched output was NaN/inf since the last call."""
        if self.finite is not None:
            self.finite.check()

    def close(self) -> None:
        if self.state is not None:
            self.env.release(self.state)
            self.state = None
        self.env.close()


# Checkpoints store the module's EnvSpec in its hyper-parameters; let weights-only loading accept it.
torch.serialization.add_safe_globals([EnvSpec, ObsLeaf])
