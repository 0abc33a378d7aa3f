"""DreamerV3's recurrent state-space model (RSSM) with the 2024 block-diagonal GRU core (dreamer.md §2).

State container (a ``TensorDict`` with batch dims ``[...]``, usually ``[B]``, or ``[T, B]`` from :meth:`RSSM.observe`):

- ``deter``  ``[..., deter]``            the deterministic GRU state h_t;
- ``stoch``  ``[..., stoch, classes]``   one-hot samples z_t (straight-through; zeros in the 2024 initial state);
- ``logits`` ``[..., stoch, classes]``   the **unimixed log-probabilities** that z_t was drawn from.

Timing (one row per env step, dreamer.md §1; ``a_t`` is the action chosen at ``obs_t``)::

    row t:      obs_t, is_first_t        prev_action_t = a_{t-1} (zeros where is_first_t)
    obs_step:   h_t = GRU(h_{t-1}, z_{t-1}, prev_action_t)    (h, z, prev_action reset where is_first_t)
                prior logits = img MLP(h_t);  posterior logits = obs MLP([h_t, embed(obs_t)]);  z_t ~ posterior

The feature read by every head is ``concat(deter, flatten(stoch))`` (:meth:`RSSM.feature`).
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict
from torch import nn
from torch.nn import functional as F

from rl_lightning.errors import ConfigError
from rl_lightning.networks.distributions import (
    onehot_mode,
    onehot_straight_through,
    onehot_straight_through_from_uniform,
    unimix_logits,
)
from rl_lightning.networks.dreamer_nets import Head, check_norm, linear, make_act, make_norm, trunc_normal_

INITIALS = ("zeros", "learned")


class BlockLinear(nn.Module):
    """Block-diagonal linear map: input and output are split into ``blocks`` groups and group ``g`` only sees group
    ``g`` (the 2024 RSSM's ``BlockLinear``; ``blocks`` times fewer weights than a dense layer).

    The kernel ``[blocks, in/blocks, out/blocks]`` is initialised from the **full** fan-in ``in_features`` (as
    danijar's initializer computes fans for 3-d kernels; TorchRL PR #4128), not the per-block fan-in.

    Args:
        in_features: input width, divisible by ``blocks``.
        out_features: output width, divisible by ``blocks``.
        blocks: number of diagonal blocks (1 = dense).
        bias: add a learned bias (zero-initialised).
    """

    def __init__(self, in_features: int, out_features: int, blocks: int, bias: bool = True) -> None:
        super().__init__()
        if blocks < 1 or in_features % blocks or out_features % blocks:
            raise ConfigError(
                f"blocks={blocks} is invalid: must be >= 1 and divide in_features={in_features} and "
                f"out_features={out_features}"
            )
        self.in_features, self.out_features, self.blocks = in_features, out_features, blocks
        self.weight = nn.Parameter(torch.empty(blocks, in_features // blocks, out_features // blocks))
        trunc_normal_(self.weight, in_features)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        x = x.reshape(*lead, self.blocks, self.in_features // self.blocks)
        y = torch.einsum("...gi,gio->...go", x, self.weight).reshape(*lead, self.out_features)
        return y if self.bias is None else y + self.bias


class BlockNorm(nn.Module):
    """RMS or layer norm with statistics per block of ``dim / blocks`` features and a per-feature scale.

    Used after the GRU's hidden :class:`BlockLinear` so that the whole gate path stays block-diagonal (danijar's
    ``block_norm`` option; HEAD normalises over the full width, which couples blocks only through one scalar).
    """

    def __init__(self, dim: int, blocks: int, norm: str) -> None:
        super().__init__()
        check_norm(norm)
        self.dim, self.blocks, self.norm = dim, blocks, norm
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if norm == "layer" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = self.dim // self.blocks
        groups = x.reshape(*x.shape[:-1], self.blocks, size)
        if self.norm == "rms":
            groups = F.rms_norm(groups, (size,), eps=1e-4)
        else:
            groups = F.layer_norm(groups, (size,), eps=1e-3)
        y = groups.reshape(x.shape) * self.weight
        return y if self.bias is None else y + self.bias


def _projection(in_dim: int, hidden: int, norm: str) -> nn.Sequential:
    return nn.Sequential(linear(in_dim, hidden, bias=False), make_norm(norm, hidden), make_act())


class BlockGRUCell(nn.Module):
    """The 2024 RSSM recurrent core (dreamer.md §2, danijar ``rssm.py _core``); ``blocks=1`` is a plain GRU.

    ``deter``, flattened ``stoch`` and ``action`` are each projected (Linear → Norm → SiLU) to ``hidden`` and
    concatenated to ``x``. Every block ``g`` then sees ``[deter_g, x]``: ``dyn_layers`` hidden BlockLinear → BlockNorm
    → SiLU layers, then one BlockLinear to the gates ``(r, c, u)`` of each block, and::

        reset = σ(r);  cand = tanh(reset · c);  update = σ(u − 1);  deter' = update · cand + (1 − update) · deter

    The ``−1`` biases the update gate towards keeping the old state at init.
    """

    def __init__(
        self, deter: int, stoch_dim: int, action_dim: int, hidden: int, blocks: int, norm: str, dyn_layers: int = 1
    ) -> None:
        super().__init__()
        self.deter, self.blocks = deter, blocks
        self.in_deter = _projection(deter, hidden, norm)
        self.in_stoch = _projection(stoch_dim, hidden, norm)
        self.in_action = _projection(action_dim, hidden, norm)
        width = deter + blocks * 3 * hidden  # per block: deter/blocks + 3·hidden
        layers: list[nn.Module] = []
        for _ in range(dyn_layers):
            layers += [BlockLinear(width, deter, blocks, bias=False), BlockNorm(deter, blocks, norm), make_act()]
            width = deter
        self.hidden_layers = nn.Sequential(*layers)
        self.gates = BlockLinear(width, 3 * deter, blocks)

    def forward(self, deter: torch.Tensor, stoch: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``deter [..., deter]``, ``stoch [..., stoch·classes]`` (flat), ``action [..., A]`` → ``deter'``."""
        x = torch.cat([self.in_deter(deter), self.in_stoch(stoch), self.in_action(action)], -1)
        return self.recur(deter, x)

    def recur(self, deter: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The block-diagonal part: block ``g`` of the output depends on ``x`` and block ``g`` of ``deter`` only."""
        lead, g = deter.shape[:-1], self.blocks
        size = self.deter // g
        shared = x.unsqueeze(-2).expand(*lead, g, x.shape[-1])
        x = torch.cat([deter.reshape(*lead, g, size), shared], -1).reshape(*lead, -1)
        gates = self.gates(self.hidden_layers(x)).reshape(*lead, g, 3, size)
        reset, cand, update = (gates[..., i, :].reshape(*lead, self.deter) for i in range(3))
        reset = torch.sigmoid(reset)
        cand = torch.tanh(reset * cand)
        update = torch.sigmoid(update - 1.0)
        return update * cand + (1.0 - update) * deter


class RSSM(nn.Module):
    """DreamerV3 world-model dynamics: block-GRU core, categorical prior and posterior with 1% unimix (dreamer.md §2).

    Args:
        action_dim: action width; discrete actions arrive as one-hot floats of this width.
        embed_dim: width of the observation embedding (encoder ``out_dim``).
        deter: deterministic state width.
        hidden: width of the core's projections and of the prior/posterior MLPs.
        stoch: number of categorical latents.
        classes: classes per latent.
        blocks: GRU blocks (8 in 2024, 1 = a plain GRU as in v1); must divide ``deter``.
        unimix: uniform mixture of every latent distribution, so each probability is >= ``unimix / classes``.
        initial: initial carry, ``"zeros"`` (2024: deter, stoch and the previous action are zero) or ``"learned"``
            (v1: ``deter = tanh(W)``, ``stoch = mode(prior(deter))``).
        norm: ``"rms"`` (2024) or ``"layer"`` (v1).
        img_layers: hidden layers of the prior MLP on ``deter`` (2024: 2, v1: 1).
        obs_layers: hidden layers of the posterior MLP on ``[deter, embed]`` (1 in both).
        continuous_actions: preprocess actions as ``a / sg(max(1, |a|))`` (dreamer.md §2).
        dyn_layers: hidden BlockLinear layers inside the core before the gates (2024 ``dynlayers: 1``).
    """

    def __init__(
        self,
        action_dim: int,
        embed_dim: int,
        deter: int,
        hidden: int,
        stoch: int,
        classes: int,
        blocks: int = 8,
        unimix: float = 0.01,
        initial: str = "zeros",
        norm: str = "rms",
        img_layers: int = 2,
        obs_layers: int = 1,
        continuous_actions: bool = False,
        dyn_layers: int = 1,
    ) -> None:
        super().__init__()
        sizes = {"action_dim": action_dim, "embed_dim": embed_dim, "deter": deter, "hidden": hidden}
        sizes |= {"stoch": stoch, "classes": classes, "blocks": blocks}
        layers = {"img_layers": img_layers, "obs_layers": obs_layers, "dyn_layers": dyn_layers}
        _check_rssm_args(sizes, layers, initial, norm, unimix)
        self.action_dim, self.deter, self.stoch, self.classes = action_dim, deter, stoch, classes
        self.unimix, self.initial, self.continuous_actions = unimix, initial, continuous_actions
        self.stoch_dim = stoch * classes
        self.feature_dim = deter + self.stoch_dim
        self.cell = BlockGRUCell(deter, self.stoch_dim, action_dim, hidden, blocks, norm, dyn_layers)
        self.prior_head = Head(deter, self.stoch_dim, hidden, img_layers, norm)
        self.post_head = Head(deter + embed_dim, self.stoch_dim, hidden, obs_layers, norm)
        self.initial_deter = nn.Parameter(torch.zeros(deter)) if initial == "learned" else None

    # ----- pieces ---------------------------------------------------------------------------------------------------

    def _logits(self, head: Head, x: torch.Tensor) -> torch.Tensor:
        """Unimixed log-probs ``[..., stoch, classes]`` from a head's flat output."""
        return unimix_logits(head(x).unflatten(-1, (self.stoch, self.classes)), self.unimix)

    @staticmethod
    def _sample(
        logits: torch.Tensor, generator: torch.Generator | None, sample: bool, uniform: torch.Tensor | None = None
    ) -> torch.Tensor:
        if not sample:
            return onehot_mode(logits)
        if uniform is not None:
            return onehot_straight_through_from_uniform(logits, uniform)
        return onehot_straight_through(logits, generator)

    def initial_carry(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unbatched initial ``(deter [D], stoch [S, C], logits [S, C])`` that ``obs_core`` resets to."""
        return self._initial()

    def _initial(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unbatched initial ``(deter [D], stoch [S, C], logits [S, C])``, differentiable in the learned mode."""
        ref = self.prior_head.out.weight
        if self.initial_deter is None:
            deter = ref.new_zeros(self.deter)
            logits = ref.new_full((self.stoch, self.classes), -math.log(self.classes))
            return deter, torch.zeros_like(logits), logits
        deter = torch.tanh(self.initial_deter)
        logits = self._logits(self.prior_head, deter)
        return deter, onehot_mode(logits), logits

    def preprocess_action(self, action: torch.Tensor) -> torch.Tensor:
        """Continuous actions: ``a / sg(max(1, |a|))`` (bounded without clipping gradients); discrete: unchanged."""
        if not self.continuous_actions:
            return action
        return action / action.detach().abs().clamp_min(1.0)

    def feature(self, state: TensorDict) -> torch.Tensor:
        """The heads' input ``concat(deter, flatten(stoch))`` ``[..., feature_dim]``."""
        return torch.cat([state["deter"], state["stoch"].flatten(-2)], -1)

    @staticmethod
    def _state(deter: torch.Tensor, stoch: torch.Tensor, logits: torch.Tensor) -> TensorDict:
        return TensorDict({"deter": deter, "stoch": stoch, "logits": logits}, batch_size=deter.shape[:-1])

    # ----- public steps ---------------------------------------------------------------------------------------------

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> TensorDict:
        """The initial carry ``[batch_size]``: zeros (2024) or ``tanh(W)`` and its prior mode (v1).

        The tensors are fresh (writable) copies; in the zeros mode ``logits`` is the uniform ``−log(classes)``.
        """
        deter, stoch, logits = self._initial()
        deter, stoch, logits = (x.expand(batch_size, *x.shape).clone() for x in (deter, stoch, logits))
        state = self._state(deter, stoch, logits)
        return state if device is None else state.to(device)

    def img_step(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator | None, sample: bool = True
    ) -> TensorDict:
        """One prior (imagination) step: ``deter' = GRU(deter, stoch, action)``, ``stoch' ~ prior(deter')``.

        Args:
            state: carry with ``deter`` and ``stoch`` (batch dims ``[...]``).
            action: ``[..., action_dim]`` (one-hot floats for discrete actions).
            generator: source of the straight-through sample.
            sample: sample (training) or take the mode (evaluation).

        Returns:
            The next state; ``logits`` holds the prior's unimixed log-probs.
        """
        deter = self.cell(state["deter"], state["stoch"].flatten(-2), self.preprocess_action(action))
        logits = self._logits(self.prior_head, deter)
        return self._state(deter, self._sample(logits, generator, sample), logits)

    def img_core(
        self, deter: torch.Tensor, stoch: torch.Tensor, action: torch.Tensor, uniform: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``img_step`` on plain tensors with its sample's ``U[0, 1)`` draws given (``[..., stoch, classes]``):
        ``(deter', stoch', prior logits)``. Pure, so it compiles (``DreamerV3(compile_update=True)``)."""
        deter = self.cell(deter, stoch.flatten(-2), self.preprocess_action(action))
        logits = self._logits(self.prior_head, deter)
        return deter, self._sample(logits, None, True, uniform), logits

    def obs_core(
        self,
        deter: torch.Tensor,
        stoch: torch.Tensor,
        prev_action: torch.Tensor,
        embed: torch.Tensor,
        is_first: torch.Tensor,
        initial: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        uniform: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``obs_step`` on plain tensors with the posterior sample's ``U[0, 1)`` draws given and ``initial`` from
        ``initial_carry``: ``(deter, stoch, posterior logits, prior logits)``. Pure, so it compiles."""
        return self._obs_core(deter, stoch, prev_action, embed, is_first, initial, None, True, uniform)

    def obs_step(
        self,
        state: TensorDict,
        prev_action: torch.Tensor,
        embed: torch.Tensor,
        is_first: torch.Tensor,
        generator: torch.Generator | None,
        sample: bool = True,
    ) -> tuple[TensorDict, torch.Tensor]:
        """One posterior step; where ``is_first`` the carry **and** ``prev_action`` are reset first (branch-free).

        Args:
            state: previous posterior (``deter``, ``stoch``), batch ``[B]``.
            prev_action: ``[B, action_dim]``, the action taken before this observation.
            embed: ``[B, embed_dim]`` encoder output for this observation.
            is_first: ``[B]`` bool, True on the first row of an episode.
            generator: source of the posterior sample.
            sample: sample (training) or take the mode (evaluation).

        Returns:
            ``(posterior state, prior log-probs [B, stoch, classes])``.
        """
        deter, stoch, logits, prior = self._obs_core(
            state["deter"], state["stoch"], prev_action, embed, is_first, self._initial(), generator, sample
        )
        return self._state(deter, stoch, logits), prior

    def _obs_core(
        self,
        deter: torch.Tensor,
        stoch: torch.Tensor,
        prev_action: torch.Tensor,
        embed: torch.Tensor,
        is_first: torch.Tensor,
        initial: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        generator: torch.Generator | None,
        sample: bool,
        uniform: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        reset = is_first.bool().unsqueeze(-1)
        deter = torch.where(reset, initial[0], deter)
        stoch = torch.where(reset.unsqueeze(-1), initial[1], stoch)
        prev_action = prev_action.masked_fill(reset, 0.0)
        deter = self.cell(deter, stoch.flatten(-2), self.preprocess_action(prev_action))
        prior = self._logits(self.prior_head, deter)
        post = self._logits(self.post_head, torch.cat([deter, embed], -1))
        return deter, self._sample(post, generator, sample, uniform), post, prior

    def observe(
        self,
        embed: torch.Tensor,
        prev_action: torch.Tensor,
        is_first: torch.Tensor,
        state: TensorDict | None = None,
        generator: torch.Generator | None = None,
        sample: bool = True,
    ) -> tuple[TensorDict, torch.Tensor]:
        """Filter a time-major sequence: :meth:`obs_step` over ``T`` (resets wherever ``is_first``, mid-sequence too).

        Args:
            embed: ``[T, B, embed_dim]``.
            prev_action: ``[T, B, action_dim]``; row ``t`` is the action taken before ``obs_t``.
            is_first: ``[T, B]`` bool.
            state: carry from the previous window ``[B]``; None starts from :meth:`initial_state`.
            generator: source of the posterior samples.
            sample: sample (training) or take modes (evaluation).

        Returns:
            ``(posts [T, B]`` with ``deter``, ``stoch``, ``logits``, ``prior log-probs [T, B, stoch, classes])``.
        """
        if state is None:
            state = self.initial_state(embed.shape[1], embed.device)
        initial = self._initial()
        deter, stoch = state["deter"], state["stoch"]
        outs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        for t in range(embed.shape[0]):
            out = self._obs_core(deter, stoch, prev_action[t], embed[t], is_first[t], initial, generator, sample)
            deter, stoch = out[0], out[1]
            outs.append(out)
        deters, stochs, posts, priors = (torch.stack(x) for x in zip(*outs))
        return self._state(deters, stochs, posts), priors


def _check_rssm_args(sizes: dict[str, int], layers: dict[str, int], initial: str, norm: str, unimix: float) -> None:
    """Validate RSSM constructor arguments with one-line ConfigErrors naming field, value and the valid choices."""
    for name, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"rssm.{name}={value!r} is invalid: must be a positive int")
    for name, value in layers.items():
        if not isinstance(value, int) or value < 0:
            raise ConfigError(f"rssm.{name}={value!r} is invalid: must be an int >= 0")
    if initial not in INITIALS:
        raise ConfigError(f"rssm.initial={initial!r} is invalid: choose one of {list(INITIALS)}")
    check_norm(norm)
    if sizes["deter"] % sizes["blocks"]:
        raise ConfigError(f"rssm.blocks={sizes['blocks']} is invalid: must divide deter={sizes['deter']}")
    if not 0.0 <= unimix < 1.0:
        raise ConfigError(f"rssm.unimix={unimix!r} is invalid: must be in [0, 1), 0.01 in DreamerV3")
