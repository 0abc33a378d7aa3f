"""A MuJoCo notice that Gymnasium's own MuJoCo envs trigger on every build and that no user can act on.

Gymnasium's ``half_cheetah.xml`` (HalfCheetah) sets ``<compiler settotalmass="14"/>``, which MuJoCo deprecates
(4.0 here); MuJoCo's C compiler reports it through its warning callback, whose default prints
``WARNING: compiler attribute 'settotalmass' is deprecated ...`` to stderr and appends it to ``MUJOCO_LOG.TXT`` in
the working directory, once per env built (8 times in a HalfCheetah fit with evaluation). It is no Python warning, so
``warnings`` filters do not reach it: ``quiet_gymnasium_mujoco_notices`` installs a callback for the duration of one
``gymnasium.make`` of a Gymnasium MuJoCo id that drops that one message and passes every other on as MuJoCo would.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Iterator

import gymnasium

#: The start of the dropped message (MuJoCo's ``user_model.cc``).
SETTOTALMASS = "compiler attribute 'settotalmass' is deprecated"


@contextlib.contextmanager
def quiet_gymnasium_mujoco_notices(env_id: str) -> Iterator[None]:
    """Drop MuJoCo's ``settotalmass`` deprecation while ``env_id`` (a Gymnasium MuJoCo env) is built; any other id,
    or no MuJoCo installed, changes nothing."""
    if not _is_gymnasium_mujoco(env_id) or importlib.util.find_spec("mujoco") is None:
        yield
        return
    import mujoco

    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(_dropping(SETTOTALMASS, previous or _as_mujoco_does))
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


def _is_gymnasium_mujoco(env_id: str) -> bool:
    try:
        entry_point = gymnasium.spec(env_id).entry_point
    except gymnasium.error.Error:
        return False
    return isinstance(entry_point, str) and entry_point.startswith("gymnasium.envs.mujoco")


def _dropping(prefix: str, forward: Callable[[str], None]) -> Callable[[str], None]:
    def warn(message: str) -> None:
        if not message.startswith(prefix):
            forward(message)

    return warn


def _as_mujoco_does(message: str) -> None:
    """MuJoCo's default warning handler: the message on stderr and in ``MUJOCO_LOG.TXT``."""
    import mujoco

    print(f"WARNING: {message}\n", file=sys.stderr)
    mujoco.mju_writeLog("WARNING", message)
