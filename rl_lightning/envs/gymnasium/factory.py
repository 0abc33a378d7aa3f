"""``EnvFactory``: builds one wrapped single Gymnasium env from the config, in this process or a worker.

Every backend builds its envs with it, so an id, an env class and the wrapper list mean the same thing on
every backend. It holds only names and arguments, so it pickles into ``AsyncVectorEnv`` workers, which
re-resolve the id themselves (a ``package.module:EnvId`` or plugin registration may not exist there yet).
"""

from __future__ import annotations

from typing import Any

import gymnasium

from rl_lightning.envs.gymnasium.atari import AtariPreset, game_name, import_ale
from rl_lightning.envs.gymnasium.atari_wrappers import wrap_atari
from rl_lightning.envs.gymnasium.env_id import resolve_env_id
from rl_lightning.envs.gymnasium.mujoco_notices import quiet_gymnasium_mujoco_notices
from rl_lightning.envs.gymnasium.wrappers import (
    ClassConfig,
    ClassSpec,
    apply_wrappers,
    check_wrappers,
    class_spec,
    construct,
    import_class,
)
from rl_lightning.errors import ConfigError


class EnvFactory:
    """A picklable ``() -> gymnasium.Env``: ``gymnasium.make(env_id, **env_kwargs)`` or ``env_class``, then wrappers.

    The constructor validates everything it can without building an env (id, classes); ``probe`` builds one.

    Args:
        env_id: a Gymnasium id, ``package.module:EnvId``, or an id a ``gymnasium.envs`` entry point registers.
        env_kwargs: keyword arguments for ``gymnasium.make`` (e.g. ``max_episode_steps``).
        env_class: a ``gymnasium.Env`` subclass with its ``init_args``, instead of ``env_id``.
        wrappers: wrapper classes with their ``init_args``, applied in order (the first wraps the raw env).
        atari: an Atari preset (``rl_lightning.envs.gymnasium.atari``): ``env_id`` names the game, the preset
            picks the ALE id and its settings and wraps the env in its processing (inside ``wrappers``).

    Attributes:
        render_mode: the ``render_mode`` the envs are made with (from ``env_kwargs`` or ``env_class.init_args``;
            an evaluation that records video sets ``"rgb_array"``).
    """

    def __init__(
        self,
        env_id: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        env_class: ClassSpec | ClassConfig | None = None,
        wrappers: list[ClassSpec | ClassConfig] | None = None,
        atari: AtariPreset | None = None,
    ) -> None:
        if (env_id is None) == (env_class is None):
            raise ConfigError(
                f"env_id={env_id!r}, env_class={env_class!r}: give exactly one, a Gymnasium id or an env class"
            )
        if env_class is not None and env_kwargs:
            raise ConfigError(
                f"env_kwargs={env_kwargs!r} is for gymnasium.make ids; with env_class put them in env_class.init_args"
            )
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.env_class = None if env_class is None else class_spec(env_class, "env_class")
        self.wrappers = [class_spec(w, f"wrappers[{i}]") for i, w in enumerate(wrappers or [])]
        if env_id is not None:
            if atari is None:
                resolve_env_id(env_id)
        elif issubclass(import_class(self.env_class, gymnasium.Env, "env_class"), gymnasium.Wrapper):
            raise ConfigError(
                f"env_class.class_path={self.env_class.class_path!r} is a wrapper; list it under wrappers"
            )
        check_wrappers(self.wrappers)
        given = self.env_kwargs if self.env_class is None else self.env_class.init_args
        self.render_mode: str | None = given.get("render_mode")
        self.atari = atari
        if atari is not None:
            self._use_preset(atari)

    def _use_preset(self, atari: AtariPreset) -> None:
        """Name the preset's Gymnasium id of the game; ``env_kwargs`` may not override the preset's settings."""
        if self.env_id is None:
            raise ConfigError(f"atari_preset={atari.name!r} needs env_id (the game), not env_class")
        fixed = sorted(set(self.env_kwargs) & set(atari.gym_kwargs()))
        if fixed:
            raise ConfigError(
                f"env_kwargs sets {fixed}, which atari_preset={atari.name!r} fixes; drop them or the preset"
            )
        import_ale(f"atari_preset={atari.name!r}")
        self.env_id = atari.gym_id(game_name(self.env_id, atari, atari.gym_id("{game}")))
        resolve_env_id(self.env_id)

    @property
    def name(self) -> str:
        """The env's name in logs and errors."""
        return self.env_id if self.env_id is not None else self.env_class.class_path.rpartition(".")[2]

    def make_raw(self) -> gymnasium.Env:
        """The env before the configured wrappers."""
        if self.env_class is not None:
            cls = import_class(self.env_class, gymnasium.Env, "env_class")
            spec = ClassSpec(self.env_class.class_path, {**self.env_class.init_args, **self._render_kwargs()})
            return construct(cls, spec, "env_class")
        name = resolve_env_id(self.env_id)
        kwargs = self.env_kwargs if self.atari is None else {**self.env_kwargs, **self.atari.gym_kwargs()}
        try:
            with quiet_gymnasium_mujoco_notices(name):
                return gymnasium.make(name, **{**kwargs, **self._render_kwargs()})
        except gymnasium.error.DependencyNotInstalled as err:
            hint = _install_hint(err)
            raise ConfigError(f"env_id={self.env_id!r} needs a package that is not installed: {hint}") from None
        except Exception as err:  # bad env_kwargs surface as TypeError from the env constructor
            detail = " ".join(f"{type(err).__name__}: {err}".split())
            raise ConfigError(
                f"env_kwargs={self.env_kwargs!r}: gymnasium.make({self.env_id!r}) failed ({detail}); fix env_kwargs"
            ) from None

    def _render_kwargs(self) -> dict[str, Any]:
        return {} if self.render_mode is None else {"render_mode": self.render_mode}

    def __call__(self) -> gymnasium.Env:
        env = self.make_raw()
        if self.atari is not None:
            env = wrap_atari(env, self.atari)
        return apply_wrappers(env, self.wrappers)


#: Extras of this package that install what Gymnasium's optional env families need.
_EXTRAS = {"mujoco": "mujoco", "ale": "atari", "atari": "atari"}


def _install_hint(err: Exception) -> str:
    """Gymnasium's own message, with this package's extra where one installs the missing family."""
    message = " ".join(str(err).split())
    for word, extra in _EXTRAS.items():
        if word in message.lower():
            return f'{message}; install the extra: pip install -e ".[{extra}]"'
    return message
