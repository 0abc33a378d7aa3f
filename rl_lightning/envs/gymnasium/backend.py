"""What every Gymnasium backend shares: the config (id or class, wrappers), the spec, and the step output.

``GymnasiumBackend`` builds the ``EnvFactory`` and reads the spec from one probe env. ``VectorBackend`` is the
base of the backends that step a whole batch at once and cannot snapshot (Gymnasium Sync/Async vector envs,
EnvPool): their ``state`` only indexes the live batch, so ``step_state`` works in place only, and a copy
(``copy.deepcopy``, pickling) is an unstarted backend with the same config.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import TorchEnv
from rl_lightning.envs.gymnasium.atari import named_preset
from rl_lightning.envs.gymnasium.factory import EnvFactory
from rl_lightning.envs.gymnasium.spaces import env_spec, gym_actions, obs_tensor
from rl_lightning.envs.gymnasium.wrappers import ClassConfig, time_limit
from rl_lightning.errors import ConfigError, EnvError

#: The key of a vector backend's ``state``: each row's index into the live batch.
ENV_INDEX = "env_index"
#: Where SPO-style search can run: the backends whose ``can_snapshot`` is True.
SNAPSHOT_BACKENDS = (
    "rl_lightning.envs.GymnasiumEnv (in-process) over a plain-Python, MuJoCo or ALE env, or a torch-native env "
    "(CartPole, Pendulum, ...)"
)


def no_snapshot(env: TorchEnv) -> str:
    """Why ``env`` (``can_snapshot`` False) cannot snapshot and what can: the end of every one-line refusal."""
    reason = getattr(env, "snapshot_refusal", None)  # a backend that snapshots some envs says why not this one
    return reason or f"{type(env).__name__} cannot snapshot env states; use a backend that can: {SNAPSHOT_BACKENDS}"


def draw_seeds(num: int, generator: torch.Generator) -> list[int]:
    """One env seed per row from the run's generator; every backend draws them identically."""
    return torch.randint(0, 2**31 - 1, (num,), generator=generator, device=generator.device).tolist()


def step_output(
    rows: tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray],
    obs_space: Any,
    batch: torch.Size,
    device: Any,
    games: tuple[np.ndarray, np.ndarray] | None = None,
) -> TensorDict:
    """The contract's step TensorDict from ``(obs, final_obs, reward, terminated, truncated)`` numpy batches.

    ``obs`` and ``final_obs`` are batches in ``obs_space``'s terms (arrays, or dicts of arrays for ``Dict``).
    ``games`` (Atari presets): ``(game_score, game_over)`` per row, output as ``keys.GAME_SCORE``/``GAME_OVER``.
    """
    obs, final_obs, reward, terminated, truncated = rows
    terminated = torch.as_tensor(np.asarray(terminated, dtype=bool), device=device)
    truncated = torch.as_tensor(np.asarray(truncated, dtype=bool), device=device)
    out = TensorDict(
        {
            keys.OBS: obs_tensor(obs, obs_space, device),
            keys.FINAL_OBS: obs_tensor(final_obs, obs_space, device),
            keys.REWARD: torch.as_tensor(np.asarray(reward), dtype=torch.float32).to(device),
            keys.TERMINATED: terminated,
            keys.TRUNCATED: truncated,
            keys.IS_FIRST: terminated | truncated,
        },
        batch_size=batch,
    )
    if games is not None:
        score, over = games
        out[keys.GAME_OVER] = torch.as_tensor(np.asarray(over, dtype=bool), device=device)
        out[keys.GAME_SCORE] = torch.as_tensor(np.where(over, score, 0.0).astype(np.float32), device=device)
    return out


class GymnasiumBackend(TorchEnv):
    """A Gymnasium env (by id or class, with wrappers) behind the ``TorchEnv`` contract; see the subclasses.

    Args:
        env_id: a ``gymnasium.make`` id (``"CartPole-v1"``), ``"package.module:EnvId"`` (imports the module
            that registers it), or an id registered by an installed package's ``gymnasium.envs`` entry point.
        env_kwargs: extra keyword arguments for ``gymnasium.make`` (e.g. ``max_episode_steps``).
        env_class: instead of ``env_id``: a ``gymnasium.Env`` subclass and its ``init_args``.
        wrappers: wrapper classes with their ``init_args``, applied to each env in order (first = innermost).
        atari_preset: ``"baselines"``, ``"machado"`` or ``"atari100k"`` (``rl_lightning.envs.gymnasium.atari``):
            ``env_id`` names the game (``Breakout``) and the preset its ALE id, settings and processing.
        atari_eval: the preset's evaluation form (whole games, raw scores); ``fresh`` (the eval env) sets it.
    """

    def __init__(
        self,
        env_id: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        env_class: ClassConfig | None = None,
        wrappers: list[ClassConfig] | None = None,
        *,
        atari_preset: str | None = None,
        atari_eval: bool = False,
    ) -> None:
        self.atari = named_preset(atari_preset, atari_eval)
        self.factory = EnvFactory(env_id, env_kwargs, env_class, wrappers, self.atari)
        probe = self.factory()
        try:
            self.spec = env_spec(self.factory.name, probe.observation_space, probe.action_space, time_limit(probe))
            self._action_space = probe.action_space
            self._obs_space = probe.observation_space
            self._read_probe(probe)
        finally:
            probe.close()

    def _read_probe(self, probe: Any) -> None:
        """What a subclass learns from the probe env besides the spec (``GymnasiumEnv``: how to copy its state)."""

    #: ``step_state``'s autoreset: False = same-step (the env contract), True = next-step (``next_step_autoreset``).
    next_step: bool = False

    def next_step_autoreset(self) -> None:
        """From the next ``reset_state`` on, reset a finished env on the step *after* the one that ends it.

        DreamerV3's sequence collector (``data/sequence_collector.py``) asks for it: it shows the terminal
        observation as a row of its own, and that tick's action must not move the env. In this mode ``step_state``
        returns, for a row that ended on the previous step, the first observation of its new episode with reward
        0, both flags False and ``is_first`` True (its action is ignored; the collector passes 0); every other row
        gets its step's own outputs, with ``obs`` = ``final_obs`` = what the step arrived at (terminal
        observations included). This is Gymnasium vector envs' ``AutoresetMode.NEXT_STEP`` and EnvPool's and
        ale-py's own autoreset. The evaluation copy (``fresh``) keeps the same-step contract.
        """
        if not self.next_step:
            self.close()  # a live batch was made for the same-step mode; the next reset_state makes a new one
            self.next_step = True

    @property
    def env_id(self) -> str:
        return self.factory.name

    def fresh(self, render: bool = False) -> TorchEnv:
        """A new env with this one's arguments; with an Atari preset its evaluation form (whole games, raw scores).

        ``render`` is honoured by the backends that can draw frames (``render.RgbArrayRendering``); the others keep
        ``renders_rgb`` False, so asking them for a video fails in one line when it is drawn.
        """
        args, kwargs = self._init_args
        if self.atari is not None:  # the preset may be a class default (AleVectorEnv), not in the arguments
            kwargs = {**kwargs, "atari_preset": self.atari.name, "atari_eval": True}
        return type(self)(*args, **kwargs)


class VectorBackend(GymnasiumBackend):
    """Base of the batch-stepping backends: no snapshots, state = row indices into the live batch."""

    can_snapshot = False
    state_is_tensors = False  # the envs live outside the state; a checkpoint restarts their episodes
    #: ``(game_score, game_over)`` of the last ``_step_all`` under an Atari preset (``step_output``'s ``games``).
    _games: tuple[np.ndarray, np.ndarray] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._num: int | None = None
        self._obs: np.ndarray | None = None
        self._ended: np.ndarray | None = None  # next-step mode: rows whose last step ended (reset on the next)

    @abstractmethod
    def _reset_all(self, seeds: list[int]) -> np.ndarray:
        """(Re)start ``len(seeds)`` envs, env ``i`` seeded with ``seeds[i]``; returns their first observations."""

    @abstractmethod
    def _step_all(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step the batch with same-step autoreset: ``(obs, final_obs, reward, terminated, truncated)``.

        In next-step mode (``next_step``) the rows in ``_ended`` are reset by this step instead, and nothing is reset
        inside it (``final_obs`` is ``obs``); see ``GymnasiumBackend.next_step_autoreset``.
        """

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        """Start ``num`` envs seeded from ``generator`` (the same seeds as the in-process backend draws)."""
        self._obs = self._reset_all(draw_seeds(num, generator))
        self._num = num
        self._ended = np.zeros(num, dtype=bool)
        index = torch.arange(num, dtype=torch.int64, device=generator.device)
        return TensorDict({ENV_INDEX: index}, batch_size=[num], device=generator.device)

    def observe(self, state: TensorDict) -> TensorDict:
        self._check_live(state)
        return TensorDict({keys.OBS: obs_tensor(self._obs, self._obs_space, state.device)}, batch_size=state.batch_size)

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        """Step the whole batch in place (same-step autoreset); ``inplace=False`` needs snapshots and is refused."""
        if not inplace:
            raise ConfigError(
                f"{type(self).__name__}({self.env_id!r}) cannot snapshot env states, which this algorithm needs "
                f"(search, or stepping a copy); use a backend that can: {SNAPSHOT_BACKENDS}"
            )
        self._check_live(state)
        try:
            rows = self._step_all(gym_actions(action, self._action_space))
        except Exception as err:  # the vector env does not say which sub-env raised: name the batch
            raise EnvError(self.env_id, None, self._num or 0, f"raised {type(err).__name__} in step(): {err}") from err
        self._obs = rows[0]
        out = step_output(rows, self._obs_space, state.batch_size, state.device, self._games)
        if self.next_step:  # the rows that ended last step were reset by this one
            out[keys.IS_FIRST] = torch.as_tensor(self._ended, device=state.device)
            self._ended = np.logical_or(rows[3], rows[4])
        return state, out

    def _check_live(self, state: TensorDict) -> None:
        if self._num is None or state.batch_size[0] != self._num:
            raise RuntimeError(
                f"{type(self).__name__}({self.env_id!r}): state of batch {tuple(state.batch_size)} does not match the "
                f"live batch of {self._num} envs; reset_state first (one live batch per backend instance)"
            )

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles carry the config only: live envs (processes, thread pools) stay with the original."""
        state = self.__dict__.copy()
        state.update(self._unstarted())
        return state

    def _unstarted(self) -> dict[str, Any]:
        return {"_num": None, "_obs": None, "_ended": None}

    def close(self) -> None:
        self._num = None
        self._obs = None


class HeldVectorEnv(VectorBackend):
    """A batch backend that holds one library vector env in ``_venv`` (Gymnasium's or ale-py's): copies start
    without it, and ``close`` closes it."""

    _venv: Any = None

    def _unstarted(self) -> dict[str, Any]:
        return {**super()._unstarted(), "_venv": None}

    def close(self) -> None:
        if self._venv is not None:
            self._venv.close()
            self._venv = None
        super().close()
