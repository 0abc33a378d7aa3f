"""Classes named in a config by import path (``class_path`` + ``init_args``): env classes and wrapper lists.

``wrappers`` in a config is a list of ``ClassSpec``s applied to each single env in order (the first wraps the
raw env), e.g. Gymnasium's ``ClipAction``, ``RescaleAction``, ``TimeLimit``, ``FilterObservation`` or a user's
own ``gymnasium.Wrapper`` subclass::

    wrappers:
      - class_path: gymnasium.wrappers.RescaleAction
        init_args: {min_action: -1.0, max_action: 1.0}
      - class_path: gymnasium.wrappers.TimeLimit
        init_args: {max_episode_steps: 100}
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import gymnasium

from rl_lightning.errors import ConfigError


@dataclass(frozen=True)
class ClassSpec:
    """A class named by its import path with its constructor arguments (LightningCLI's ``class_path`` shape).

    Attributes:
        class_path: ``package.module.Class`` (or ``package.module:Class``).
        init_args: keyword arguments for the constructor.
    """

    class_path: str
    init_args: dict[str, Any] = field(default_factory=dict)


#: How a config names a class: ``{"class_path": ..., "init_args": {...}}`` (a ``ClassSpec`` also works from Python).
ClassConfig = dict[str, Any]


def class_spec(value: ClassSpec | ClassConfig, field_name: str) -> ClassSpec:
    """A ``ClassSpec`` from a config mapping ``{class_path, init_args}``; other shapes are one-line errors."""
    if isinstance(value, ClassSpec):
        return value
    if not isinstance(value, dict) or "class_path" not in value or set(value) - {"class_path", "init_args"}:
        raise ConfigError(f"{field_name}={value!r}: write {{class_path: package.module.Class, init_args: {{...}}}}")
    return ClassSpec(str(value["class_path"]), dict(value.get("init_args") or {}))


def import_class(spec: ClassSpec, base: type, field_name: str) -> type:
    """The class ``spec.class_path`` names, checked to subclass ``base``; one-line ``ConfigError`` otherwise."""
    path = spec.class_path
    module, sep, name = path.partition(":") if ":" in path else path.rpartition(".")
    where = f"{field_name}.class_path={path!r}"
    if not sep or not module or not name:
        raise ConfigError(f"{where} is not an import path; write 'package.module.Class'")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception as err:  # ImportError, AttributeError or whatever the user's module raises
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        raise ConfigError(f"{where} does not import ({detail}); install the package or fix the path") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{where} is not a {base.__module__}.{base.__qualname__} subclass; name one that is")
    return cls


def construct(cls: type, spec: ClassSpec, field_name: str, *args: Any) -> Any:
    """``cls(*args, **spec.init_args)``; arguments that do not fit (or a constructor that fails) are one line."""
    try:
        return cls(*args, **spec.init_args)
    except Exception as err:  # TypeError for bad arguments, ValueError/AssertionError for unsupported spaces
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        raise ConfigError(
            f"{field_name}: {spec.class_path}(**{spec.init_args!r}) failed ({detail}); fix its init_args"
        ) from None


#: Gymnasium wrappers whose running statistics live outside the checkpoint; the modules' own options replace them.
_NORMALIZERS = (gymnasium.wrappers.NormalizeObservation, gymnasium.wrappers.NormalizeReward)


def check_wrappers(wrappers: list[ClassSpec]) -> list[type]:
    """Import every wrapper class up front (one-line errors), in order; Gymnasium's normalisers are refused."""
    classes = [import_class(spec, gymnasium.Wrapper, f"wrappers[{i}]") for i, spec in enumerate(wrappers)]
    for i, (cls, spec) in enumerate(zip(classes, wrappers, strict=True)):
        if issubclass(cls, _NORMALIZERS):
            raise ConfigError(
                f"wrappers[{i}].class_path={spec.class_path!r}: its running statistics are not saved in checkpoints "
                "and it scales evaluation returns too; remove it and use the built-in normalisers, "
                "model.init_args.normalize_obs: true (PPO, SPO) and model.init_args.normalize_reward: true (PPO)"
            )
    return classes


def apply_wrappers(env: gymnasium.Env, wrappers: list[ClassSpec]) -> gymnasium.Env:
    """Wrap ``env`` in each of ``wrappers`` in order (the first is innermost)."""
    for i, (cls, spec) in enumerate(zip(check_wrappers(wrappers), wrappers, strict=True)):
        env = construct(cls, spec, f"wrappers[{i}]", env)
    return env


def time_limit(env: gymnasium.Env) -> int:
    """The tightest ``TimeLimit`` anywhere in ``env``'s wrapper chain (0 when nothing truncates)."""
    limits = []
    while isinstance(env, gymnasium.Wrapper):
        if isinstance(env, gymnasium.wrappers.TimeLimit):
            limits.append(int(env._max_episode_steps))
        env = env.env
    return min(limits, default=0)
