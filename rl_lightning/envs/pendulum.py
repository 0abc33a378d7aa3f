"""Batched torch-native Pendulum-v1 with Gymnasium's exact dynamics, reward and time limit."""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import render
from rl_lightning.envs.base import EnvSpec, physics_dtype
from rl_lightning.envs.noise_step import NoiseSteppedEnv
from rl_lightning.errors import ConfigError


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """Wrap angles to ``[-pi, pi)`` exactly as Gymnasium does (Python-style modulo)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


class Pendulum(NoiseSteppedEnv):
    """Gymnasium ``Pendulum-v1`` (swing-up) as a functional batched env (same-step auto-reset).

    The torque is clipped to ``[-max_torque, max_torque]`` here, so a policy may emit any real number.
    Reward ``-(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2)`` from the pre-step state; never
    terminates; truncated after ``max_episode_steps``.

    State keys: ``physics`` (``[B, 2]``: th, thdot, in ``dtype``) and ``elapsed`` (int64 ``[B]``).

    Args:
        g: gravitational acceleration (Gymnasium's ``g`` argument).
        max_episode_steps: truncation limit; 0 disables truncation.
        dtype: precision of the internal physics, ``"float32"`` or ``"float64"`` (Gymnasium's own precision).
            Observations are float32 either way.
    """

    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    m = 1.0
    l = 1.0  # noqa: E741 - Gymnasium's name for the pole length
    renders_rgb = True
    render_size = 160  # Gymnasium draws 500 x 500; the same picture smaller keeps evaluation videos small

    def __init__(self, g: float = 10.0, max_episode_steps: int = 200, dtype: str = "float32") -> None:
        if max_episode_steps < 0:
            raise ConfigError(f"Pendulum: max_episode_steps={max_episode_steps} must be >= 0 (0 = never truncate)")
        self.g = g
        self.max_episode_steps = max_episode_steps
        self.dtype = physics_dtype(dtype, "Pendulum")
        self.spec = EnvSpec(
            name="Pendulum",
            obs_shape=(3,),
            discrete=False,
            action_shape=(1,),
            action_low=(-self.max_torque,),
            action_high=(self.max_torque,),
            max_episode_steps=max_episode_steps,
        )

    def step_noise(self, generator: torch.Generator, lead: tuple[int, ...]) -> torch.Tensor:
        """``U[0, 1)`` draws ``[*lead, 2]`` in the physics dtype: a reset's start state, scaled by ``_start``."""
        return torch.rand(*lead, 2, generator=generator, device=generator.device, dtype=self.dtype)

    def _start(self, noise: torch.Tensor) -> torch.Tensor:
        """A new episode's physics state from its ``step_noise`` draw."""
        th, thdot = (2 * noise - 1).unbind(-1)
        return torch.stack((th * math.pi, thdot), dim=-1)  # no per-step host-to-device copy of the bounds

    @staticmethod
    def _obs(physics: torch.Tensor) -> torch.Tensor:
        th, thdot = physics.unbind(-1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), dim=-1).to(torch.float32)

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        """Start ``num`` episodes with ``th ~ U(-pi, pi)`` and ``thdot ~ U(-1, 1)``."""
        physics = self._start(self.step_noise(generator, (num,)))
        elapsed = torch.zeros(num, dtype=torch.int64, device=generator.device)
        return TensorDict({"physics": physics, "elapsed": elapsed}, batch_size=[num], device=generator.device)

    def observe(self, state: TensorDict) -> TensorDict:
        """Return the float32 observation ``[cos th, sin th, thdot]``."""
        return TensorDict({keys.OBS: self._obs(state["physics"])}, batch_size=state.batch_size)

    def render_rgb(self, state: TensorDict) -> torch.Tensor:
        """Draw uint8 ``[B, H, W, 3]`` frames like Gymnasium's renderer (batched torch, no pygame).

        The screen spans ``[-2.2, 2.2]`` both ways; a red rod of length ``l`` with round ends swings about the
        centre, pointing up at ``th = 0`` and turning counter-clockwise as ``th`` grows; a black axle.
        """
        size = self.render_size
        scale = size / 4.4
        physics = state["physics"].to(torch.float32)
        th = physics[:, 0]
        centre = torch.full_like(th, size / 2)
        tip = (centre - self.l * scale * torch.sin(th), centre + self.l * scale * torch.cos(th))
        x, y = render.pixel_grid(size, size, physics.device)
        image = render.canvas(physics.shape[0], size, size, physics.device)
        image = render.paint(image, render.capsule(x, y, (centre, centre), tip, 0.1 * scale), (204, 77, 77))
        axle = render.disc(x, y, size / 2, size / 2, 0.05 * scale).expand_as(image[..., 0])
        return render.paint(image, axle, render.BLACK)

    def step_from_noise(
        self, state: TensorDict, action: torch.Tensor, noise: torch.Tensor
    ) -> tuple[TensorDict, TensorDict]:
        """Apply torque ``action[:, 0]`` (clipped); see ``TorchEnv.step_state`` for the outputs."""
        physics = state["physics"]
        th, thdot = physics.unbind(-1)
        u = action[..., 0].clamp(-self.max_torque, self.max_torque)
        # The two torque terms are evaluated in the action's precision, as NumPy does in Gymnasium.
        effort = (0.001 * u.square()).to(physics.dtype)
        torque = (3.0 / (self.m * self.l**2) * u).to(physics.dtype)
        costs = angle_normalize(th).square() + 0.1 * thdot.square() + effort
        new_thdot = thdot + (3 * self.g / (2 * self.l) * torch.sin(th) + torque) * self.dt
        new_thdot = new_thdot.clamp(-self.max_speed, self.max_speed)
        new_physics = torch.stack((th + new_thdot * self.dt, new_thdot), dim=-1)

        elapsed = state["elapsed"] + 1
        truncated = (
            elapsed >= self.max_episode_steps
            if self.max_episode_steps > 0
            else torch.zeros_like(elapsed, dtype=torch.bool)
        )
        next_physics = torch.where(truncated.unsqueeze(-1), self._start(noise), new_physics)
        next_elapsed = torch.where(truncated, torch.zeros_like(elapsed), elapsed)
        out = TensorDict(
            {
                keys.OBS: self._obs(next_physics),
                keys.FINAL_OBS: self._obs(new_physics),
                keys.REWARD: (-costs).to(torch.float32),
                keys.TERMINATED: torch.zeros_like(truncated),
                keys.TRUNCATED: truncated,
                keys.IS_FIRST: truncated.clone(),
            },
            batch_size=state.batch_size,
        )
        values = {"physics": next_physics, "elapsed": next_elapsed}
        return TensorDict(values, batch_size=state.batch_size, device=state.device), out
