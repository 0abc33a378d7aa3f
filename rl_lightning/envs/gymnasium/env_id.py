"""Resolve a Gymnasium env id the way a user names it: a registered id, ``package.module:EnvId``, or a plugin's.

Three ways to make a custom env nameable, all checked here once so that an unknown name fails at start-up
with one line:

* ``"package.module:EnvId"``: Gymnasium's own syntax; the module is imported first (it registers the id).
* an installed package's entry point in the ``gymnasium.envs`` group (the group Gymnasium's pre-1.0 plugin
  loader read; 1.0 dropped the loader, so it is revived here): its module is imported and, when the entry
  point names a function, the function is called. They are loaded only when an id is not registered.
* a registered id, e.g. ``"CartPole-v1"``.

ALE ids (``ALE/Breakout-v5``, ``BreakoutNoFrameskip-v4``) need no import from the user: ``ale_py``, which
registers them, is imported when an unregistered id looks like one (missing: one line naming the extra), or
whenever an id is unknown and ``ale_py`` is installed.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import inspect
from importlib.metadata import entry_points

import gymnasium

from rl_lightning.envs.gymnasium.atari import import_ale, looks_like_ale
from rl_lightning.errors import ConfigError

#: Entry-point group whose members register Gymnasium envs.
PLUGIN_GROUP = "gymnasium.envs"

_plugins_loaded = False


def _one_line(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())


def import_module(module: str, field: str) -> None:
    """Import ``module``, or raise a one-line ``ConfigError`` naming ``field`` and the module."""
    try:
        importlib.import_module(module)
    except Exception as err:  # any failure while importing the user's module is a config error
        raise ConfigError(
            f"{field}: module {module!r} does not import ({_one_line(err)}); install it or fix the module path"
        ) from None


def load_plugins() -> None:
    """Import every ``gymnasium.envs`` entry point once (calling those that name a function)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for point in entry_points(group=PLUGIN_GROUP):
        try:
            loaded = point.load()
            if inspect.isfunction(loaded):
                loaded()
        except Exception as err:
            raise ConfigError(
                f"entry point {point.name!r} = {point.value!r} of group {PLUGIN_GROUP!r} failed to register its "
                f"envs ({_one_line(err)}); fix or uninstall the package that declares it"
            ) from None


def _registered(name: str) -> bool:
    try:
        gymnasium.spec(name)
    except gymnasium.error.Error:
        return False
    return True


def resolve_env_id(env_id: str, field: str = "env_id") -> str:
    """Make ``env_id`` nameable (import its module or the plugins) and return the registry id it names.

    Raises:
        ConfigError: one line for a module that does not import, or an id still unknown (close matches listed).
    """
    module, _, name = env_id.rpartition(":")
    if module:
        import_module(module, f"{field}={env_id!r}")
    if not _registered(name) and (looks_like_ale(name) or importlib.util.find_spec("ale_py") is not None):
        import_ale(f"{field}={env_id!r}")
    if not _registered(name):
        load_plugins()
    try:
        gymnasium.spec(name)
    except gymnasium.error.Error as err:
        matches = difflib.get_close_matches(name, list(gymnasium.envs.registry), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(m) for m in matches)}? " if matches else ""
        where = f"module {module!r} did not register it" if module else "not in gymnasium.envs.registry"
        raise ConfigError(
            f"{field}={env_id!r}: unknown env id {name!r}, {where} ({' '.join(str(err).split())}); {hint}name a "
            f"registered id, 'package.module:EnvId' to import the module that registers it, or an installed "
            f"package's {PLUGIN_GROUP!r} entry point"
        ) from None
    return name
