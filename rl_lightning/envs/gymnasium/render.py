"""Rgb frames from Gymnasium envs for evaluation videos: envs made with ``render_mode="rgb_array"`` on request."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from rl_lightning.envs.gymnasium.factory import EnvFactory
from rl_lightning.errors import ConfigError


class RgbArrayRendering:
    """Mixin of the backends whose envs an ``EnvFactory`` makes: ``fresh(render=True)`` gives an env whose
    Gymnasium envs are made with ``render_mode="rgb_array"``, and ``render_rgb`` stacks their ``render()``.

    The backend supplies ``_frames(state)``: one ``env.render()`` result per row of ``state``.
    """

    factory: EnvFactory

    def fresh(self, render: bool = False) -> Any:
        env = super().fresh()  # type: ignore[misc]
        if render:
            env.factory.render_mode = "rgb_array"
        return env

    @property
    def renders_rgb(self) -> bool:
        return self.factory.render_mode == "rgb_array"

    def _frames(self, state: TensorDict) -> list[Any]:
        raise NotImplementedError

    def render_rgb(self, state: TensorDict) -> torch.Tensor:
        """Each row's ``env.render()`` as uint8 ``[B, H, W, 3]`` on the state's device."""
        return rgb_tensor(self._frames(state), self.factory.name, self.factory.render_mode, state.device)


def rgb_tensor(frames: list[Any], name: str, render_mode: str | None, device: torch.device) -> torch.Tensor:
    """Stack ``render()`` results into uint8 ``[B, H, W, 3]``; anything that is not an rgb array is one line."""
    first = frames[0] if frames else None
    if not isinstance(first, np.ndarray) or first.ndim != 3 or first.shape[-1] != 3:
        got = type(first).__name__ if not isinstance(first, np.ndarray) else f"an array of shape {first.shape}"
        raise ConfigError(
            f"{name}: render() with render_mode={render_mode!r} returned {got}, not an rgb image [H, W, 3]; "
            "recording video needs an env that supports render_mode='rgb_array'"
        )
    return torch.from_numpy(np.stack(frames).astype(np.uint8, copy=False)).to(device)
