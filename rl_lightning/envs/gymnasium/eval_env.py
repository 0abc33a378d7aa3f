"""``make_eval_env``: one plain Gymnasium env in the evaluation form the ``Evaluation`` callback plays.

For ``load_policy`` on a run's own terms: the same env arguments as the run's ``data.env`` give the env its
evaluation played (``TorchEnv.fresh``), observations processed as in training. For an Atari preset that is whole
games with raw scores (no life-loss episodes, no reward clipping) and the preset's frames::

    policy = rl_lightning.load_policy("runs/ppo_atari/version_0/checkpoints/last.ckpt")
    env = rl_lightning.envs.make_eval_env("Breakout", atari_preset="baselines")
"""

from __future__ import annotations

from typing import Any

import gymnasium

from rl_lightning.envs.gymnasium.atari import named_preset
from rl_lightning.envs.gymnasium.factory import EnvFactory
from rl_lightning.envs.gymnasium.wrappers import ClassConfig


def make_eval_env(
    env_id: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    env_class: ClassConfig | None = None,
    wrappers: list[ClassConfig] | None = None,
    *,
    atari_preset: str | None = None,
    render_mode: str | None = None,
) -> gymnasium.Env:
    """A single Gymnasium env in its evaluation form, built as every Gymnasium backend builds its envs.

    Args:
        env_id: as the run's ``data.env``: a Gymnasium id, or with ``atari_preset`` the game (``"Breakout"``).
        env_kwargs: as the run's (``gymnasium.make`` keyword arguments).
        env_class: as the run's, instead of ``env_id``.
        wrappers: as the run's, applied in order (first = innermost).
        atari_preset: ``"baselines"`` or ``"machado"``: the preset's evaluation form (whole games, raw scores).
        render_mode: e.g. ``"rgb_array"`` or ``"human"`` to watch the policy play.

    Raises:
        ConfigError: the same one-line refusals as the backends (unknown id or preset, a missing extra).
    """
    factory = EnvFactory(env_id, env_kwargs, env_class, wrappers, named_preset(atari_preset, evaluation=True))
    if render_mode is not None:
        factory.render_mode = render_mode
    return factory()
