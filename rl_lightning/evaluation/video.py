"""Evaluation videos: the optional ``[video]`` extra, frames captured while episodes play, TensorBoard output.

TensorBoard's ``SummaryWriter.add_video`` (through torch) encodes a GIF with moviepy 1.x, importing
``moviepy.editor``; without it ``add_video`` prints a notice and writes nothing, so a run that asked for video
is refused at start-up instead (``require_video_extra``).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensordict import TensorDict

from rl_lightning.envs.base import TorchEnv
from rl_lightning.errors import ConfigError

VIDEO_EXTRA = 'pip install -e ".[video]"'


def require_video_extra(field: str) -> None:
    """Raise a one-line ``ConfigError`` naming ``field`` and the extra when moviepy (1.x) is not importable."""
    if importlib.util.find_spec("moviepy") is None:
        raise ConfigError(f"{field}: recording video needs the moviepy package; install the extra: {VIDEO_EXTRA}")
    if importlib.util.find_spec("moviepy.editor") is None:
        raise ConfigError(
            f"{field}: TensorBoard's add_video needs moviepy 1.x (moviepy.editor), the installed moviepy lacks it; "
            f"install the extra: {VIDEO_EXTRA}"
        )


def tensorboard_loggers(trainer: pl.Trainer, field: str) -> list[TensorBoardLogger]:
    """The trainer's TensorBoard loggers; none is a one-line ``ConfigError`` (videos are written only there)."""
    found = [logger for logger in trainer.loggers if isinstance(logger, TensorBoardLogger)]
    if not found:
        raise ConfigError(
            f"{field}: videos are written to TensorBoard, but the trainer has no TensorBoardLogger; "
            "set trainer.logger to a lightning.pytorch.loggers.TensorBoardLogger or record_video: 0"
        )
    return found


def check_renders(env: TorchEnv, field: str) -> None:
    """Draw one frame of a fresh one-row state, so a renderer that cannot work fails before training starts."""
    if not env.renders_rgb:
        raise ConfigError(f"{field}: env {env.spec.name!r} has no rgb rendering; use an env that has one")
    state = env.reset_state(1, torch.Generator().manual_seed(0))
    try:
        env.render_rgb(state)
    except ConfigError:
        raise
    except Exception as err:  # e.g. Gymnasium's DependencyNotInstalled for pygame
        detail = " ".join(f"{type(err).__name__}: {err}".split())
        raise ConfigError(f"{field}: env {env.spec.name!r} cannot draw rgb frames ({detail})") from None
    finally:
        env.release(state)


class FrameRecorder:
    """Collects the frames of the first ``rows`` episodes of an evaluation (``run_episodes(recorder=...)``).

    ``capture`` renders the state each step acts on (no host sync for torch envs); ``video`` trims and
    pads them by episode length. The terminal state is never drawn: same-step auto-reset has replaced it.
    """

    def __init__(self, env: TorchEnv, rows: int) -> None:
        self.env = env
        self.rows = rows
        self.frames: list[torch.Tensor] = []

    def capture(self, state: TensorDict) -> None:
        self.frames.append(self.env.render_rgb(state[: self.rows]))

    def video(self, lengths: torch.Tensor) -> torch.Tensor:
        """uint8 ``[rows, T, 3, H, W]``, ``T`` the longest recorded episode; shorter ones hold their last frame."""
        frames = torch.stack(self.frames, dim=1)  # [rows, steps, H, W, 3]
        length = lengths[: self.rows].long().clamp(1, frames.shape[1]).to(frames.device)
        steps = int(length.max())
        index = torch.minimum(torch.arange(steps, device=frames.device), (length - 1).unsqueeze(-1))
        held = frames[torch.arange(self.rows, device=frames.device).unsqueeze(-1), index]
        return held.permute(0, 1, 4, 2, 3).contiguous()


def write_video(loggers: list[TensorBoardLogger], tag: str, video: torch.Tensor, env_steps: int, fps: int) -> None:
    """Write ``video`` (uint8 ``[N, T, 3, H, W]``) with ``add_video`` at step ``env_steps`` (rank zero only)."""
    frames: Any = video.cpu()
    for logger in loggers:
        logger.experiment.add_video(tag, frames, global_step=env_steps, fps=fps)
        logger.experiment.flush()
