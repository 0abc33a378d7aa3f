"""The ``Evaluation`` callback's settings that cannot work, refused in one line when it is built."""

from __future__ import annotations

from rl_lightning.errors import ConfigError
from rl_lightning.evaluation.video import require_video_extra


def check_evaluation_settings(
    num_episodes: int, max_steps: int, record_video: int, video_fps: int, compile: bool, background: bool
) -> None:
    """Counts out of range, the ``[video]`` extra missing for ``record_video``, and the pairs that exclude each
    other: ``record_video`` needs rendering, which neither ``compile`` nor ``background`` does, and ``background``
    plays a frozen copy that ``compile``'s graph around the live module cannot."""
    if num_episodes < 1:
        raise ConfigError(f"Evaluation: num_episodes={num_episodes} must be >= 1")
    if not 0 <= record_video <= num_episodes:
        raise ConfigError(
            f"Evaluation: record_video={record_video} must be in [0, num_episodes={num_episodes}] (0 records nothing)"
        )
    if max_steps < 1:
        raise ConfigError(f"Evaluation: max_steps={max_steps} must be >= 1 (steps after which an episode is cut)")
    if video_fps < 1:
        raise ConfigError(f"Evaluation: video_fps={video_fps} must be >= 1")
    if record_video:
        require_video_extra(f"Evaluation: record_video={record_video}")
    if compile and record_video:
        raise ConfigError(
            f"Evaluation: compile=true plays without rendering, so record_video={record_video} cannot record; "
            "set one of them off"
        )
    if background and record_video:
        raise ConfigError(
            f"Evaluation: background=true plays in a thread beside training, which renders nothing, so "
            f"record_video={record_video} cannot record; set record_video: 0 or background: false"
        )
    if background and compile:
        raise ConfigError(
            "Evaluation: background=true plays a frozen copy step by step in the learner's waits, but compile=true "
            "runs a step compiled around the live module; set one of them off"
        )
