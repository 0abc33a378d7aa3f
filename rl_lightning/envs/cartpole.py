"""Batched torch-native CartPole-v1 with Gymnasium's exact dynamics, rewards and limits."""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs import render
from rl_lightning.envs.base import EnvSpec, physics_dtype
from rl_lightning.envs.noise_step import NoiseSteppedEnv
from rl_lightning.errors import ConfigError

#: ``CartPole(observe=...)``: which physics columns are observed (``None``: all four).
_OBSERVED: dict[str, list[int] | None] = {"full": None, "position": [0, 2]}


class CartPole(NoiseSteppedEnv):
    """Gymnasium ``CartPole-v1`` as a functional batched env (same-step auto-reset).

    Euler integration of the Barto–Sutton–Anderson cart-pole; reward 1.0 on every step including the
    terminal one; terminated when ``|x| > 2.4`` or ``|theta| > 12°``; truncated when the episode reaches
    ``max_episode_steps`` (also on a step that terminates, like Gymnasium's ``TimeLimit``).

    State keys: ``physics`` (``[B, 4]``: x, x_dot, theta, theta_dot, in ``dtype``) and ``elapsed``
    (int64 ``[B]``, steps taken in the current episode).

    Args:
        max_episode_steps: truncation limit; 0 disables truncation.
        dtype: precision of the internal physics, ``"float32"`` or ``"float64"`` (Gymnasium's own precision,
            for bit-level comparisons). Observations are float32 either way.
        observe: ``full`` (``[x, x_dot, theta, theta_dot]``) or ``position`` (``[x, theta]`` only: rl-zoo's
            ``CartPoleNoVel-v1``, a task that needs memory; the dynamics are unchanged).
    """

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    renders_rgb = True
    render_width = 240  # Gymnasium draws 600 x 400; the same picture at 2/5 keeps evaluation videos small
    render_height = 160

    def __init__(self, max_episode_steps: int = 500, dtype: str = "float32", observe: str = "full") -> None:
        if max_episode_steps < 0:
            raise ConfigError(f"CartPole: max_episode_steps={max_episode_steps} must be >= 0 (0 = never truncate)")
        if observe not in _OBSERVED:
            raise ConfigError(f"CartPole: observe={observe!r} is not one of {sorted(_OBSERVED)}")
        self.max_episode_steps = max_episode_steps
        self.dtype = physics_dtype(dtype, "CartPole")
        self._observed = _OBSERVED[observe]
        self.spec = EnvSpec(
            name="CartPole",
            obs_shape=(4 if self._observed is None else len(self._observed),),
            discrete=True,
            num_actions=2,
            max_episode_steps=max_episode_steps,
        )

    def step_noise(self, generator: torch.Generator, lead: tuple[int, ...]) -> torch.Tensor:
        """``U[0, 1)`` draws ``[*lead, 4]`` in the physics dtype: a reset's start state, scaled by ``_start``."""
        return torch.rand(*lead, 4, generator=generator, device=generator.device, dtype=self.dtype)

    def _start(self, noise: torch.Tensor) -> torch.Tensor:
        """A new episode's physics state from its ``step_noise`` draw."""
        return noise * 0.1 - 0.05

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        """Start ``num`` episodes with every state variable drawn from U(-0.05, 0.05)."""
        physics = self._start(self.step_noise(generator, (num,)))
        elapsed = torch.zeros(num, dtype=torch.int64, device=generator.device)
        return TensorDict({"physics": physics, "elapsed": elapsed}, batch_size=[num], device=generator.device)

    def observe(self, state: TensorDict) -> TensorDict:
        """Return the float32 observation ``[x, x_dot, theta, theta_dot]`` (``observe="position"``: ``[x, theta]``)."""
        return TensorDict({keys.OBS: self._view(state["physics"])}, batch_size=state.batch_size)

    def _view(self, physics: torch.Tensor) -> torch.Tensor:
        """The observed columns of ``physics`` as float32."""
        return (physics if self._observed is None else physics[..., self._observed]).to(torch.float32)

    def render_rgb(self, state: TensorDict) -> torch.Tensor:
        """Draw uint8 ``[B, H, W, 3]`` frames like Gymnasium's classic-control renderer (batched torch, no pygame).

        Same layout at ``render_width / 600`` scale: the screen spans ``x`` in ``[-2.4, 2.4]``; a black cart on a
        black track line; a tan pole of length ``2 * length`` hinged a quarter cart-height above the cart's
        centre, leaning right for positive ``theta``; a blue-grey axle.
        """
        width, height = self.render_width, self.render_height
        unit = width / 600  # Gymnasium's pixel sizes are for a 600-pixel-wide screen
        scale = width / (2 * self.x_threshold)
        physics = state["physics"].to(torch.float32)
        cart_x = physics[:, 0] * scale + width / 2
        theta = physics[:, 2]
        cart_y, half_w, half_h, pole_w = 100 * unit, 25 * unit, 15 * unit, 10 * unit
        x, y = render.pixel_grid(height, width, physics.device)
        image = render.canvas(physics.shape[0], height, width, physics.device)
        image = render.paint(image, ((y - cart_y).abs() <= 0.5).expand_as(image[..., 0]), render.BLACK)
        cart = ((x - render.column(cart_x)).abs() <= half_w) & ((y - cart_y).abs() <= half_h)
        image = render.paint(image, cart, render.BLACK)
        pivot_y = cart_y + half_h / 2 + torch.zeros_like(cart_x)
        reach = scale * 2 * self.length - pole_w / 2
        tip = (cart_x + reach * torch.sin(theta), pivot_y + reach * torch.cos(theta))
        image = render.paint(image, render.capsule(x, y, (cart_x, pivot_y), tip, pole_w / 2), (202, 152, 101))
        axle = (x - render.column(cart_x)).square() + (y - render.column(pivot_y)).square() <= (pole_w / 2) ** 2
        return render.paint(image, axle, (129, 132, 203))

    def _dynamics(self, physics: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """One Euler step, written in Gymnasium's operation order so float64 results match bit for bit."""
        x, x_dot, theta, theta_dot = physics.unbind(-1)
        force = torch.where(action == 1, self.force_mag, -self.force_mag).to(physics.dtype)
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot.square() * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta.square() / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        return torch.stack(
            (
                x + self.tau * x_dot,
                x_dot + self.tau * xacc,
                theta + self.tau * theta_dot,
                theta_dot + self.tau * thetaacc,
            ),
            dim=-1,
        )

    def step_from_noise(
        self, state: TensorDict, action: torch.Tensor, noise: torch.Tensor
    ) -> tuple[TensorDict, TensorDict]:
        """Push the cart left (0) or right (1); see ``TorchEnv.step_state`` for the outputs."""
        physics = self._dynamics(state["physics"], action)
        x, theta = physics[:, 0], physics[:, 2]
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold)
        elapsed = state["elapsed"] + 1
        truncated = elapsed >= self.max_episode_steps if self.max_episode_steps > 0 else torch.zeros_like(terminated)
        done = terminated | truncated
        next_physics = torch.where(done.unsqueeze(-1), self._start(noise), physics)
        next_elapsed = torch.where(done, torch.zeros_like(elapsed), elapsed)
        out = TensorDict(
            {
                keys.OBS: self._view(next_physics),
                keys.FINAL_OBS: self._view(physics),
                keys.REWARD: torch.ones_like(x, dtype=torch.float32),
                keys.TERMINATED: terminated,
                keys.TRUNCATED: truncated,
                keys.IS_FIRST: done,
            },
            batch_size=state.batch_size,
        )
        values = {"physics": next_physics, "elapsed": next_elapsed}
        return TensorDict(values, batch_size=state.batch_size, device=state.device), out
