"""Recurrent cores (LSTM or GRU cells) between an encoder and the policy/value heads, with per-row resets."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning.errors import ConfigError

CORE_KINDS = ("lstm", "gru")


class RecurrentCore(nn.Module):
    """One LSTM or GRU layer run over time; its carried state is a dict of ``[B, size]`` tensors.

    The state of a row is zeroed where ``is_first`` says its observation starts an episode, before the cell reads
    it, so episodes never leak into each other; acting one step at a time and ``unroll`` over a stored sequence
    therefore compute the same thing.

    Args:
        in_dim: width of the encoded features fed in.
        kind: ``lstm`` (state ``h``, ``c``) or ``gru`` (state ``h``).
        size: hidden width (the width of the features handed to the heads).
    """

    def __init__(self, in_dim: int, kind: str = "lstm", size: int = 128) -> None:
        super().__init__()
        if kind not in CORE_KINDS:
            raise ConfigError(f"model.recurrent.core={kind!r} is not one of {list(CORE_KINDS)}")
        if size < 1:
            raise ConfigError(f"model.recurrent.size={size} must be a positive integer, e.g. 128")
        self.kind = kind
        self.size = size
        # ``nn.LSTM``/``nn.GRU`` rather than cells: one call runs a whole stretch without resets (``unroll``).
        self.rnn: nn.Module = nn.LSTM(in_dim, size) if kind == "lstm" else nn.GRU(in_dim, size)
        self.state_names: tuple[str, ...] = ("h", "c") if kind == "lstm" else ("h",)

    def initial_state(self, batch: int, device: torch.device | None = None) -> dict[str, torch.Tensor]:
        """Zeros for every carried tensor: a fresh episode's state."""
        dtype = self.rnn.weight_hh_l0.dtype
        return {name: torch.zeros(batch, self.size, device=device, dtype=dtype) for name in self.state_names}

    def step(
        self, x: torch.Tensor, state: dict[str, torch.Tensor], is_first: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One tick: ``x`` ``[B, in_dim]``, ``state`` of the previous tick, ``is_first`` bool ``[B]``.

        Returns the output features ``[B, size]`` and the state after this tick.
        """
        out, state = self._run(x.unsqueeze(0), state, is_first)
        return out[0], state

    def _run(
        self, x: torch.Tensor, state: dict[str, torch.Tensor], is_first: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``x`` ``[T, B, in_dim]`` through the RNN in one call, rows reset where ``is_first`` (``[B]``) first."""
        keep = (~is_first).unsqueeze(-1).to(x.dtype)
        if self.kind == "lstm":
            out, (h, c) = self.rnn(x, ((state["h"] * keep).unsqueeze(0), (state["c"] * keep).unsqueeze(0)))
            return out, {"h": h[0], "c": c[0]}
        out, h = self.rnn(x, (state["h"] * keep).unsqueeze(0))
        return out, {"h": h[0]}

    def unroll(
        self, x: torch.Tensor, state: dict[str, torch.Tensor], is_first: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``step`` over a time-major sequence: ``x`` ``[T, B, in_dim]``, ``is_first`` ``[T, B]``, from ``state``.

        Returns outputs ``[T, B, size]`` and the state after the last tick.
        """
        # One RNN call per stretch of ticks in which no row starts an episode (a reset only at the stretch's first
        # tick): a few calls per rollout instead of one per tick. Reading the stretch bounds is one host sync.
        steps = x.shape[0]
        bounds = [0, *(is_first[1:].any(-1).nonzero().squeeze(-1) + 1).tolist(), steps]
        outputs = []
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            out, state = self._run(x[start:end], state, is_first[start])
            outputs.append(out)
        return torch.cat(outputs), state


class RecurrentCores(nn.Module):
    """The actor's core and, unless ``shared``, the critic's own; their states in one flat ``TensorDict``.

    State keys: the actor core's ``h`` (, ``c``) and, with a separate critic core, ``critic_h`` (, ``critic_c``).

    Args:
        actor_in: width of the actor's encoded features.
        critic_in: width of the critic's encoded features (used only when not ``shared``).
        kind: ``lstm`` or ``gru``.
        size: hidden width of each core.
        shared: one core feeds both heads (``False``: the critic has its own, as sb3-contrib's
            ``enable_critic_lstm``).
    """

    def __init__(self, actor_in: int, critic_in: int, kind: str, size: int, shared: bool) -> None:
        super().__init__()
        self.actor_core = RecurrentCore(actor_in, kind, size)
        self.critic_core = None if shared else RecurrentCore(critic_in, kind, size)

    @property
    def state_names(self) -> tuple[str, ...]:
        names = self.actor_core.state_names
        return names if self.critic_core is None else (*names, *(f"critic_{n}" for n in names))

    def initial_state(self, batch: int, device: torch.device | None = None) -> TensorDict:
        """Zeros for every carried tensor, ``[batch, size]`` each."""
        state = self.actor_core.initial_state(batch, device)
        if self.critic_core is not None:
            state.update({f"critic_{k}": v for k, v in self.critic_core.initial_state(batch, device).items()})
        return TensorDict(state, batch_size=[batch], device=device)

    def _split(self, state: TensorDict) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        actor = {name: state[name] for name in self.actor_core.state_names}
        critic = {} if self.critic_core is None else {n: state[f"critic_{n}"] for n in self.critic_core.state_names}
        return actor, critic

    def _join(self, actor: dict[str, torch.Tensor], critic: dict[str, torch.Tensor], lead: torch.Size) -> TensorDict:
        return TensorDict({**actor, **{f"critic_{k}": v for k, v in critic.items()}}, batch_size=lead)

    def step(
        self, features: torch.Tensor, critic_features: torch.Tensor, state: TensorDict, is_first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, TensorDict]:
        """One tick of both cores: ``(actor out, critic out, next state)``; rows reset where ``is_first``."""
        actor, critic = self._split(state)
        out, actor = self.actor_core.step(features, actor, is_first)
        critic_out = out
        if self.critic_core is not None:
            critic_out, critic = self.critic_core.step(critic_features, critic, is_first)
        return out, critic_out, self._join(actor, critic, state.batch_size)

    def unroll(
        self, features: torch.Tensor, critic_features: torch.Tensor, state: TensorDict, is_first: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``step`` over ``[T, B, F]`` sequences from ``state`` (``[B]``); ``(actor out, critic out)``, ``[T, B, size]``
        each."""
        actor, critic = self._split(state)
        out, _ = self.actor_core.unroll(features, actor, is_first)
        if self.critic_core is None:
            return out, out
        critic_out, _ = self.critic_core.unroll(critic_features, critic, is_first)
        return out, critic_out
