"""Batched torch-native tic-tac-toe against a uniformly random opponent, with action masks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec, TorchEnv

EMPTY, AGENT, OPPONENT = 0, 1, 2
_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


class TicTacToe(TorchEnv):
    """The agent plays X and moves first; the opponent (O) plays a uniformly random empty cell.

    Cells are numbered row-major ``0..8``. One ``step`` is the agent's move followed, unless the game
    ended, by the opponent's reply. Reward is +1 for a win, -1 for a loss, 0 for a draw or an ongoing game;
    ``terminated`` marks the end of a game and the next ``obs`` is an empty board (same-step auto-reset).
    The env never truncates.

    An illegal move (occupied cell, or an index outside ``0..8``) ends the game as an immediate loss
    (reward -1, terminated) so that unchecked training stays well defined; with ``BatchedEnv(check=True)``
    it raises ``ValueError`` instead (``TorchEnv.check_action``).

    Observation: float32 ``[27]``, per cell a one-hot over (empty, agent, opponent).
    ``action_mask``: bool ``[9]``, True on empty cells.

    State key: ``board`` (int64 ``[B, 9]``: 0 empty, 1 agent, 2 opponent).
    """

    def __init__(self) -> None:
        self.spec = EnvSpec(name="TicTacToe", obs_shape=(27,), discrete=True, num_actions=9, has_action_mask=True)
        self._lines: dict[torch.device, torch.Tensor] = {}

    def _lines_on(self, device: torch.device) -> torch.Tensor:
        # A constant cached per device, so the step path does no host-to-device copy.
        if device not in self._lines:
            self._lines[device] = torch.tensor(_LINES, dtype=torch.int64, device=device)
        return self._lines[device]

    def _wins(self, board: torch.Tensor, player: int) -> torch.Tensor:
        return (board[:, self._lines_on(board.device)] == player).all(-1).any(-1)

    @staticmethod
    def _view(board: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return F.one_hot(board, 3).flatten(1).to(torch.float32), board == EMPTY

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        """Start ``num`` games on empty boards (the agent moves first, so no randomness is used)."""
        board = torch.zeros(num, 9, dtype=torch.int64, device=generator.device)
        return TensorDict({"board": board}, batch_size=[num], device=generator.device)

    def observe(self, state: TensorDict) -> TensorDict:
        """Return the one-hot board and the legal-move mask."""
        obs, mask = self._view(state["board"])
        return TensorDict({keys.OBS: obs, keys.ACTION_MASK: mask}, batch_size=state.batch_size)

    def _opponent_move(self, board: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Index of a uniformly random empty cell per row (arbitrary on full boards)."""
        noise = torch.rand(board.shape, generator=generator, device=board.device)
        return torch.where(board == EMPTY, noise, -1.0).argmax(-1, keepdim=True)

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        """Play the agent's move and the opponent's reply; see ``TorchEnv.step_state`` for the outputs."""
        board = state["board"]
        cell = action.long().clamp(0, 8).unsqueeze(-1)
        in_range = (action >= 0) & (action <= 8)
        illegal = ~in_range | (board.gather(-1, cell).squeeze(-1) != EMPTY)
        after_agent = torch.where(illegal.unsqueeze(-1), board, board.scatter(-1, cell, AGENT))
        agent_won = self._wins(after_agent, AGENT)
        over = illegal | agent_won | (after_agent != EMPTY).all(-1)

        reply = self._opponent_move(after_agent, generator)
        after_opp = torch.where(over.unsqueeze(-1), after_agent, after_agent.scatter(-1, reply, OPPONENT))
        opp_won = ~over & self._wins(after_opp, OPPONENT)
        terminated = over | opp_won | (after_opp != EMPTY).all(-1)

        reward = agent_won.to(torch.float32) - (illegal | opp_won).to(torch.float32)
        next_board = torch.where(terminated.unsqueeze(-1), torch.zeros_like(after_opp), after_opp)
        obs, mask = self._view(next_board)
        out = TensorDict(
            {
                keys.OBS: obs,
                keys.FINAL_OBS: self._view(after_opp)[0],
                keys.REWARD: reward,
                keys.TERMINATED: terminated,
                keys.TRUNCATED: torch.zeros_like(terminated),
                keys.IS_FIRST: terminated.clone(),
                keys.ACTION_MASK: mask,
            },
            batch_size=state.batch_size,
        )
        if inplace:
            state["board"] = next_board
            return state, out
        return TensorDict({"board": next_board}, batch_size=state.batch_size, device=state.device), out
