"""Batched torch-rendered Catch (after bsuite's ``catch``): a tiny pixel env with a known optimum, no downloads."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec
from rl_lightning.envs.noise_step import NoiseSteppedEnv
from rl_lightning.errors import ConfigError

LEFT, STAY, RIGHT = 0, 1, 2
_MAX_SIZE = 256


def _valid_sizes(rows: int, columns: int) -> list[int]:
    """Powers of two in ``[8, 256]`` that both grid dimensions divide."""
    sizes = [2**k for k in range(3, _MAX_SIZE.bit_length())]
    return [s for s in sizes if s % rows == 0 and s % columns == 0]


class Catch(NoiseSteppedEnv):
    """Catch a falling ball with a paddle, rendered as a square uint8 image (same-step auto-reset).

    A ball starts in the top row at a uniformly random column and falls one row per step; the paddle
    starts in the middle of the bottom row (column ``columns // 2``) and moves with actions
    0 = left, 1 = stay, 2 = right (clamped at the walls; unchecked out-of-range actions are clamped to
    0..2, ``BatchedEnv(check=True)`` rejects them). When the ball reaches the bottom row, after
    ``rows - 1`` steps, the episode terminates with reward +1 if the paddle is under the ball, else -1;
    every other step gives 0. The optimal return is +1, a uniformly random policy's is well below it.

    Observation: uint8 ``[1, size, size]`` (channels-first), 255 on the ball's and the paddle's cells and 0
    elsewhere; each grid cell is a ``size // rows`` by ``size // columns`` block. On a catch the two cells
    coincide, so the terminal frame shows one block.

    State keys (int64 ``[B]``): ``ball_row``, ``ball_col``, ``paddle_col`` and ``elapsed`` (steps taken in
    the current episode).

    Args:
        rows: grid height; an episode lasts ``rows - 1`` steps.
        columns: grid width (and the number of possible ball columns).
        size: image side in pixels; a power of two in ``[8, 256]`` that ``rows`` and ``columns`` divide.
            DreamerV3's CNN expects 64; 16 keeps tests and benchmarks cheap.
        max_episode_steps: truncation limit; 0 never truncates (episodes end after ``rows - 1`` steps anyway).
    """

    def __init__(self, rows: int = 8, columns: int = 8, size: int = 16, max_episode_steps: int = 0) -> None:
        if rows < 2:
            raise ConfigError(f"Catch: rows={rows} must be >= 2 (the ball needs at least one step to fall)")
        if columns < 1:
            raise ConfigError(f"Catch: columns={columns} must be >= 1")
        valid = _valid_sizes(rows, columns)
        if size not in valid:
            raise ConfigError(
                f"Catch: size={size!r} is invalid for a {rows}x{columns} grid; choose one of {valid} "
                "(a power of two in [8, 256] that rows and columns divide)"
            )
        if max_episode_steps < 0:
            raise ConfigError(f"Catch: max_episode_steps={max_episode_steps} must be >= 0 (0 = never truncate)")
        self.rows = rows
        self.columns = columns
        self.size = size
        self.max_episode_steps = max_episode_steps
        self.spec = EnvSpec(
            name="Catch",
            obs_shape=(1, size, size),
            discrete=True,
            num_actions=3,
            max_episode_steps=max_episode_steps,
            obs_dtype=torch.uint8,
        )

    def step_noise(self, generator: torch.Generator, lead: tuple[int, ...]) -> torch.Tensor:
        """The ball's start column of a new episode, int64 ``[*lead]`` uniform over the columns."""
        return torch.randint(0, self.columns, lead, generator=generator, device=generator.device)

    def _fresh(self, ball_col: torch.Tensor) -> dict[str, torch.Tensor]:
        zeros = torch.zeros_like(ball_col)
        return {"ball_row": zeros, "ball_col": ball_col, "paddle_col": zeros + self.columns // 2, "elapsed": zeros}

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        """Start ``num`` episodes: ball at a random column of the top row, paddle centred."""
        return TensorDict(self._fresh(self.step_noise(generator, (num,))), batch_size=[num], device=generator.device)

    def render(self, ball_row: torch.Tensor, ball_col: torch.Tensor, paddle_col: torch.Tensor) -> torch.Tensor:
        """Draw uint8 ``[B, 1, size, size]`` frames from int64 ``[B]`` positions (batched, no host sync)."""
        device = ball_row.device
        row_ids = torch.arange(self.rows, device=device)
        col_ids = torch.arange(self.columns, device=device)
        # One-hot grids by broadcast comparison (F.one_hot would sync the host to validate its input).
        ball = (row_ids == ball_row.unsqueeze(-1)).unsqueeze(-1) & (col_ids == ball_col.unsqueeze(-1)).unsqueeze(-2)
        paddle = (row_ids == self.rows - 1).unsqueeze(-1) & (col_ids == paddle_col.unsqueeze(-1)).unsqueeze(-2)
        grid = (ball | paddle).to(torch.uint8) * 255  # [B, rows, columns]
        batch, height, width = grid.shape[0], self.size // self.rows, self.size // self.columns
        blocks = grid[:, :, None, :, None].expand(batch, self.rows, height, self.columns, width)
        return blocks.reshape(batch, 1, self.size, self.size)

    renders_rgb = True

    def render_rgb(self, state: TensorDict) -> torch.Tensor:
        """The observation's pixels in grey, upscaled to at least 128 pixels a side: uint8 ``[B, H, W, 3]``."""
        frame = self.render(state["ball_row"], state["ball_col"], state["paddle_col"])[:, 0]
        factor = max(1, 128 // self.size)
        frame = frame.repeat_interleave(factor, dim=1).repeat_interleave(factor, dim=2)
        return frame.unsqueeze(-1).expand(*frame.shape, 3)

    def observe(self, state: TensorDict) -> TensorDict:
        """Return the rendered frame of the current state."""
        obs = self.render(state["ball_row"], state["ball_col"], state["paddle_col"])
        return TensorDict({keys.OBS: obs}, batch_size=state.batch_size)

    def step_from_noise(
        self, state: TensorDict, action: torch.Tensor, noise: torch.Tensor
    ) -> tuple[TensorDict, TensorDict]:
        """Move the paddle, drop the ball one row; see ``TorchEnv.step_state`` for the outputs."""
        shift = action.long().clamp(LEFT, RIGHT) - STAY
        paddle_col = (state["paddle_col"] + shift).clamp(0, self.columns - 1)
        ball_row = state["ball_row"] + 1
        ball_col = state["ball_col"]
        elapsed = state["elapsed"] + 1
        terminated = ball_row >= self.rows - 1
        truncated = elapsed >= self.max_episode_steps if self.max_episode_steps > 0 else torch.zeros_like(terminated)
        done = terminated | truncated
        caught = paddle_col == ball_col
        reward = torch.where(caught, 1.0, -1.0) * terminated
        after = {"ball_row": ball_row, "ball_col": ball_col, "paddle_col": paddle_col, "elapsed": elapsed}
        fresh = self._fresh(noise)
        values = {name: torch.where(done, fresh[name], value) for name, value in after.items()}
        out = TensorDict(
            {
                keys.OBS: self.render(values["ball_row"], values["ball_col"], values["paddle_col"]),
                keys.FINAL_OBS: self.render(ball_row, ball_col, paddle_col),
                keys.REWARD: reward.to(torch.float32),
                keys.TERMINATED: terminated,
                keys.TRUNCATED: truncated,
                keys.IS_FIRST: done,
            },
            batch_size=state.batch_size,
        )
        return TensorDict(values, batch_size=state.batch_size, device=state.device), out
