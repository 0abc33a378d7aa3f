"""``EnvFactory``: builds one wrapped single Gymnasium env from the config, in this process or a worker.

Every backend builds its envs with it, so an id, an env class and the wrapper list mean the same thing on
every backend. It holds only names and arguments, so it pickles into ``AsyncVectorEnv`` workers, which
re-resolve the id themselves (a ``package.module:EnvId`` or plugin registration may not exist there yet).
"""

from __future__ import annotations

from typing import Any

import gymnasium

from rl_lightning.envs.gymnasium.env_id import resolve_env_id
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
            resolve_env_id(env_id)
        elif issubclass(import_class(self.env_class, gymnasium.Env, "env_class"), gymnasium.Wrapper):
            raise ConfigError(
                f"env_class.class_path={self.env_class.class_path!r} is a wrapper; list it under wrappers"
            )
        check_wrappers(self.wrappers)
        given = self.env_kwargs if self.env_class is None else self.env_class.init_args
        self.render_mode: str | None = given.get("render_mode")

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
        try:
            return gymnasium.make(name, **{**self.env_kwargs, **self._render_kwargs()})
        except Exception as err:  # bad env_kwargs surface as TypeError from the env constructor
            detail = " ".join(f"{type(err).__name__}: {err}".split())
            raise ConfigError(
                f"env_kwargs={self.env_kwargs!r}: gymnasium.make({self.env_id!r}) failed ({detail}); fix env_kwargs"
            ) from None

    def _render_kwargs(self) -> dict[str, Any]:
        return {} if self.render_mode is None else {"render_mode": self.render_mode}

    def __call__(self) -> gymnasium.Env:
        return apply_wrappers(self.make_raw(), self.wrappers)
