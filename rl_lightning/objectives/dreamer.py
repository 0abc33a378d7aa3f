"""DreamerV3 losses, estimators and codecs (Hafner et al., 2023/2025; dreamer.md §3–§5) as pure functions.

Everything is time-major: sequences are ``[T, B, ...]``. Each function states its shape contract. Nothing here syncs
with the host, so the functions can run inside a compiled or CUDA-graphed training step.

- :class:`TwoHot` is the discrete regression codec of the reward and value heads (paper eq. 10–11), in the 2024 raw
  layout (``symexp`` bins, symmetric summation) or the v1 symlog layout.
- :func:`lambda_return` is the 2024 ``agent.lambda_return`` recursion (paper eq. 7 with soft continues).
- :func:`kl_losses` splits the KL into the dynamics and representation terms with free bits (paper eq. 5).
- :class:`ReturnNormalizer` is the percentile EMA return scale (paper eq. 8–9).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from rl_lightning.errors import ConfigError
from rl_lightning.networks.distributions import one_hot, symexp, symlog

TWOHOT_SPACES = ("raw", "symlog")
"""Bin layouts: ``raw`` = 2024 ``symexp_twohot`` (bins in raw units), ``symlog`` = v1 ``DiscDist`` (bins in symlog)."""

_QUANTILE_MAX_NUMEL = 2**24
"""``torch.quantile`` refuses inputs with more elements than this (16,777,216)."""


# ----- two-hot codec (dreamer.md §4) ---------------------------------------------------------------------------------


def twohot_bins(
    num_bins: int = 255,
    low: float = -20.0,
    high: float = 20.0,
    space: str = "raw",
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Bin centres of the two-hot codec, ``[num_bins]``, increasing.

    The grid ``linspace(low, high, num_bins)`` is built in float64; when ``low == -high`` it is made exactly
    antisymmetric (``(g − flip(g)) / 2``), so the bins satisfy ``bins == −bins.flip(0)`` bit for bit and, for odd
    ``num_bins``, the centre bin is exactly 0. ``space="raw"`` maps the grid through ``symexp`` (2024 layout: bins in
    raw units, e.g. ±4.85e8 at the edges); ``space="symlog"`` keeps it (v1 layout: bins in symlog units).

    Args:
        num_bins: number of bins K (255 in the paper, 5 in danijar's ``debug`` preset).
        low: lowest grid point, in symlog units.
        high: highest grid point, in symlog units.
        space: ``"raw"`` or ``"symlog"``.
        dtype: output dtype; the default dtype when None.
    """
    if space not in TWOHOT_SPACES:
        raise ConfigError(f"twohot space={space!r} is invalid: choose one of {', '.join(TWOHOT_SPACES)}")
    if num_bins < 2 or not high > low:
        raise ConfigError(f"twohot bins num_bins={num_bins}, low={low}, high={high}: need num_bins >= 2 and high > low")
    grid = torch.linspace(low, high, num_bins, dtype=torch.float64)
    if low == -high:
        grid = (grid - grid.flip(0)) / 2
    if space == "raw":
        grid = symexp(grid)
    return grid.to(dtype or torch.get_default_dtype())


def _symmetric_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim, adding mirrored entries pairwise first (centre last for odd length).

    With symmetric bins and equal probabilities every pair cancels exactly, so a zero-initialised head decodes to
    exactly 0 (dreamer.md §4, I5); a naive float32 sum over 255 bins gives ≈ −0.316 instead.
    """
    half = values.shape[-1] // 2
    upper = values[..., values.shape[-1] - half :]
    lower = values[..., :half].flip(-1)
    total = (lower + upper).sum(-1)
    if values.shape[-1] % 2:
        total = total + values[..., half]
    return total


class TwoHot(nn.Module):
    """Two-hot discrete regression over fixed bins (paper eq. 10–11; dreamer.md §4).

    ``encode`` spreads a scalar target over its two neighbouring bins (weights proportional to closeness), ``decode``
    returns the expected value of ``softmax(logits)``, and ``loss`` is the cross-entropy between the two. In the
    ``symlog`` space the codec works on ``symlog(x)`` and decodes with ``symexp``; in the ``raw`` space on ``x``
    itself. Every method accepts arbitrary leading dims; logits carry the bins in the last dim.

    Args:
        num_bins: number of bins K.
        low: lowest grid point, in symlog units.
        high: highest grid point, in symlog units.
        space: ``"raw"`` (2024) or ``"symlog"`` (v1).
    """

    bins: torch.Tensor

    def __init__(self, num_bins: int = 255, low: float = -20.0, high: float = 20.0, space: str = "raw") -> None:
        super().__init__()
        self.space = space
        self.register_buffer("bins", twohot_bins(num_bins, low, high, space), persistent=False)
        #: odd count and bins == −bins.flip(0) exactly, so decode can pair mirrored bins.
        self.symmetric = num_bins % 2 == 1 and bool(torch.equal(self.bins, -self.bins.flip(0)))

    @property
    def num_bins(self) -> int:
        return self.bins.shape[0]

    def _neighbours(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Indices of the two bins around each target and the weight of the lower one (no gradient)."""
        x = x.detach()
        y = symlog(x) if self.space == "symlog" else x
        bins = self.bins.to(y.dtype)
        count_le = torch.searchsorted(bins, y.contiguous(), right=True)
        below = (count_le - 1).clamp(0, self.num_bins - 1)
        above = count_le.clamp(0, self.num_bins - 1)
        dist_below = (y - bins[below]).abs()
        dist_above = (bins[above] - y).abs()
        total = dist_below + dist_above
        same = below == above
        total = torch.where(same, torch.ones_like(total), total)
        weight_below = torch.where(same, torch.ones_like(total), dist_above / total)
        return below, above, weight_below

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Two-hot targets ``[..., K]`` for raw values ``x`` ``[...]``; rows sum to 1 (no gradient).

        Values outside the bin range put weight 1 on the nearest edge bin.
        """
        below, above, weight_below = self._neighbours(x)
        dtype = weight_below.dtype
        onehot_below = one_hot(below, self.num_bins, dtype)
        onehot_above = one_hot(above, self.num_bins, dtype)
        return onehot_below * weight_below.unsqueeze(-1) + onehot_above * (1.0 - weight_below).unsqueeze(-1)

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """Expected raw value ``[...]`` of ``softmax(logits)`` ``[..., K]`` (symmetric sum; exactly 0 for zero logits).

        Computed in at least the bins' precision (float32 under bf16 autocast).
        """
        dtype = torch.promote_types(logits.dtype, self.bins.dtype)
        probs = logits.to(dtype).softmax(-1)
        bins = self.bins.to(dtype)
        if self.symmetric:  # Σ_j b_j·(p_{c+j} − p_{c−j}): mirrored pairs cancel before any product
            half = self.num_bins // 2
            mean = (probs[..., half + 1 :] - probs[..., :half].flip(-1)) @ bins[half + 1 :]
        else:
            mean = _symmetric_sum(probs * bins)
        return symexp(mean) if self.space == "symlog" else mean

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Cross-entropy ``−Σ_k twohot(target)_k · log_softmax(logits)_k`` per element, ``[...]``, no reduction.

        Args:
            logits: ``[..., K]`` head outputs (carry the gradient).
            target: ``[...]`` raw target values (treated as constants).
        """
        dtype = torch.promote_types(logits.dtype, self.bins.dtype)
        log_probs = logits.to(dtype).log_softmax(-1)
        # Only two bins carry weight: gather them instead of materialising the [..., K] two-hot target.
        below, above, weight_below = self._neighbours(target.to(dtype))
        log_below = log_probs.gather(-1, below.unsqueeze(-1)).squeeze(-1)
        log_above = log_probs.gather(-1, above.unsqueeze(-1)).squeeze(-1)
        return -(weight_below * log_below + (1.0 - weight_below) * log_above)


# ----- returns and weights (dreamer.md §5) ---------------------------------------------------------------------------


def lambda_return(
    reward: torch.Tensor,
    boot: torch.Tensor,
    live: torch.Tensor,
    lam: float | torch.Tensor,
    last: torch.Tensor | None = None,
) -> torch.Tensor:
    """TD(λ) returns, the 2024 DreamerV3 recursion (paper eq. 7; danijar ``agent.lambda_return``; dreamer.md §5).

    With ``c_t = (1 − last_t)·λ``::

        R_{T−1} = boot_{T−1}
        R_t     = rew_{t+1} + live_{t+1} · [(1 − c_{t+1})·boot_{t+1} + c_{t+1}·R_{t+1}],   t = T−2 … 0

    Row ``t`` of ``reward``/``live``/``last`` describes *arriving* at state ``t``, so entry 0 of those is unused.
    ``live_t = (1 − terminal_t)·disc`` cuts the bootstrap at a termination; ``last_t`` (episode boundary, e.g. a
    truncation) stops the λ chain but still bootstraps from ``boot_t``.

    Shape contract: every input ``[T, ...]`` (``lam`` a float or broadcastable tensor); returns ``[T−1, ...]``.

    Args:
        reward: ``rew_t``, the reward received on arriving at state ``t``.
        boot: ``boot_t``, the bootstrap value of state ``t`` (the online critic in DreamerV3).
        live: ``(1 − is_terminal_t)·disc``, supplied by the caller (disc = 1 in 2024 imagination).
        lam: λ (0.95 in DreamerV3).
        last: ``is_last_t`` as a float or bool; no episode boundaries when None.
    """
    cont = torch.full_like(boot, 1.0) * lam if last is None else (1.0 - last.to(boot.dtype)) * lam
    running = boot[-1]
    returns = []
    for t in range(boot.shape[0] - 2, -1, -1):
        mixed = (1.0 - cont[t + 1]) * boot[t + 1] + cont[t + 1] * running
        running = reward[t + 1] + live[t + 1] * mixed
        returns.append(running)
    if not returns:
        return boot[:0]
    returns.reverse()
    return torch.stack(returns, 0)


def continue_target(terminated: torch.Tensor, horizon: float = 333.0, discount_continue: bool = True) -> torch.Tensor:
    """Target of the continue head (dreamer.md §1, I15): ``(1 − terminated)·(1 − 1/horizon)`` or ``1 − terminated``.

    Truncation is not termination, so a truncated step keeps ``1 − 1/horizon`` (≈ 0.997). The 2024 code folds the
    discount into the target (``contdisc``) and uses disc = 1 in imagination; v1 uses the plain ``1 − terminated``.

    Shape contract: ``terminated`` ``[...]`` bool or float; returns ``[...]`` float.

    Args:
        terminated: true termination flags (``is_terminal``), not ``is_last``.
        horizon: effective horizon; the discount is ``1 − 1/horizon``.
        discount_continue: fold the discount into the target (2024) or not (v1).
    """
    if not horizon >= 1.0:
        raise ConfigError(f"continue_target horizon={horizon!r} is invalid: it must be >= 1 (333 in DreamerV3)")
    dtype = terminated.dtype if terminated.is_floating_point() else torch.get_default_dtype()
    alive = 1.0 - terminated.to(dtype)
    return alive * (1.0 - 1.0 / horizon) if discount_continue else alive


def imagination_weights(cont: torch.Tensor, disc: float = 1.0) -> torch.Tensor:
    """Loss weights of imagined steps, ``cumprod(disc·cont)/disc`` over time, detached (dreamer.md §5, I7).

    The start state is weighted by its own continue probability and each later step by the discounted chance
    of reaching it: cont = .5, disc = 1 gives [.5, .25, .125, ...]; cont = .5, disc = .5 gives
    [.5, .125, .03125, ...]. The 2024 code folds γ into the continue target, so disc = 1 there; the 2023
    recipe (``discount_continue=False``) passes disc = γ.

    Shape contract: ``cont`` ``[H+1, ...]`` (predicted continue probabilities); returns the same shape.

    Args:
        cont: predicted continue probabilities along the imagined trajectory.
        disc: the discount not already folded into ``cont`` (γ, or 1.0).
    """
    return torch.cumprod(cont.detach() * disc, dim=0) / disc


# ----- losses (dreamer.md §3, §5) ------------------------------------------------------------------------------------


def kl_losses(
    post_logp: torch.Tensor, prior_logp: torch.Tensor, free_nats: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dynamics and representation KL losses with free bits (paper eq. 5; dreamer.md §3, I8).

    ``dyn = max(free_nats, Σ_latents KL[sg(post) ‖ prior])`` trains only the prior;
    ``rep = max(free_nats, Σ_latents KL[post ‖ sg(prior)])`` trains only the posterior. The clamp comes after the
    sum over the latents: below ``free_nats`` a term gives no gradient at all.

    Shape contract: ``post_logp``, ``prior_logp`` ``[..., stoch, classes]`` log-probabilities (already unimixed, so
    every entry is finite); returns ``(dyn, rep, kl)``, each ``[...]``, where ``kl`` is the unclamped summed KL,
    detached (a diagnostic).

    Args:
        post_logp: posterior log-probabilities q(z | h, x).
        prior_logp: prior log-probabilities p(z | h).
        free_nats: free bits (1.0 in DreamerV3).
    """
    post_sg, prior_sg = post_logp.detach(), prior_logp.detach()
    dyn_kl = (post_sg.exp() * (post_sg - prior_logp)).sum((-2, -1))
    rep_kl = (post_logp.exp() * (post_logp - prior_sg)).sum((-2, -1))
    return dyn_kl.clamp(min=free_nats), rep_kl.clamp(min=free_nats), dyn_kl.detach()


def reinforce_loss(
    log_prob: torch.Tensor,
    entropy: torch.Tensor,
    advantage: torch.Tensor,
    weight: torch.Tensor,
    entropy_coef: float = 3e-4,
) -> torch.Tensor:
    """2024 DreamerV3 actor loss per step: ``sg(w)·−(log π(a)·sg(adv) + η·H[π])`` (paper eq. 6, REINFORCE form).

    Shape contract: every input ``[H, B]`` (broadcastable); returns ``[H, B]``, no reduction (I17).

    Args:
        log_prob: ``log π(a_t | s_t)`` of the imagined actions (carries the gradient).
        entropy: ``H[π(· | s_t)]`` (carries the gradient).
        advantage: ``(R_t − v(s_t)) / S`` with the return scale S (treated as constant).
        weight: :func:`imagination_weights` (treated as constant).
        entropy_coef: η, the entropy bonus scale (3e-4 in DreamerV3).
    """
    return -weight.detach() * (log_prob * advantage.detach() + entropy_coef * entropy)


def value_loss(
    logits: torch.Tensor,
    returns: torch.Tensor,
    slow_logits: torch.Tensor,
    weight: torch.Tensor,
    codec: TwoHot,
    slow_reg: float = 1.0,
) -> torch.Tensor:
    """Critic loss per step: ``sg(w)·[CE(v, sg(R)) + slow_reg·CE(v, sg(v_slow))]`` (paper eq. 10; dreamer.md §5).

    The slow (EMA) critic is a regularisation target only; λ-returns bootstrap from the online critic.

    Shape contract: ``logits``, ``slow_logits`` ``[T, B, K]``; ``returns``, ``weight`` ``[T, B]``; returns
    ``[T, B]``, no reduction (I17). Only ``logits`` gets a gradient.

    Args:
        logits: online critic logits.
        returns: λ-return targets (raw units).
        slow_logits: slow critic logits on the same states.
        weight: :func:`imagination_weights` (or ``1 − is_last`` for the replay value loss).
        codec: the critic's :class:`TwoHot`.
        slow_reg: scale of the slow-critic regulariser (1.0 in DreamerV3).
    """
    slow_target = codec.decode(slow_logits.detach())
    fit = codec.loss(logits, returns.detach()) + slow_reg * codec.loss(logits, slow_target)
    return weight.detach() * fit


# ----- return normalisation (dreamer.md §5, I13) ---------------------------------------------------------------------


class ReturnNormalizer(nn.Module):
    """Percentile EMA of the λ-returns; ``scale()`` is the advantage divisor S (paper eq. 8–9; dreamer.md §5, I13).

    Per :meth:`update`: ``lo ← decay·lo + (1 − decay)·P_low(R)``, ``hi ← decay·hi + (1 − decay)·P_high(R)``, both
    starting at 0 with no debiasing; ``S = max(limit, hi − lo)``, so returns spanning less than ``limit`` are never
    scaled up. ``lo`` and ``hi`` are persistent buffers (checkpointed) and stay frozen in eval mode.

    ``torch.quantile`` accepts at most 2**24 (16,777,216) elements; a larger (gathered) batch is subsampled with a
    fixed stride, which leaves the percentiles of exchangeable data unchanged up to sampling error.

    Args:
        decay: EMA decay (0.99 = ``rate .01``).
        limit: lower bound of the scale (1.0).
        low_q: lower quantile, in [0, 1] (0.05).
        high_q: upper quantile, in [0, 1] (0.95).
    """

    lo: torch.Tensor
    hi: torch.Tensor

    def __init__(self, decay: float = 0.99, limit: float = 1.0, low_q: float = 0.05, high_q: float = 0.95) -> None:
        super().__init__()
        if not 0.0 <= decay < 1.0:
            raise ConfigError(f"ReturnNormalizer: decay={decay!r} must be in [0, 1) (0.99 in DreamerV3)")
        if not limit > 0.0:
            raise ConfigError(f"ReturnNormalizer: limit={limit!r} must be > 0 (1.0 in DreamerV3)")
        if not 0.0 <= low_q < high_q <= 1.0:
            raise ConfigError(f"ReturnNormalizer: low_q={low_q!r}, high_q={high_q!r} need 0 <= low_q < high_q <= 1")
        self.decay, self.limit = decay, limit
        self.register_buffer("quantiles", torch.tensor([low_q, high_q]), persistent=False)
        self.register_buffer("lo", torch.zeros(()))
        self.register_buffer("hi", torch.zeros(()))

    @torch.no_grad()
    def update(self, returns: torch.Tensor, gather: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        """Fold this batch's percentiles into the EMA; a no-op in eval mode.

        Args:
            returns: λ-returns of any shape (detached here).
            gather: all-gather across ranks (``DreamerV3._gather``); its output is flattened.
        """
        if not self.training:
            return
        values = returns.detach()
        if gather is not None:
            values = gather(values)
        values = values.flatten().to(self.lo.dtype)
        if values.numel() > _QUANTILE_MAX_NUMEL:
            values = values[:: math.ceil(values.numel() / _QUANTILE_MAX_NUMEL)]
        low, high = torch.quantile(values, self.quantiles.to(values.dtype)).unbind(0)
        self.lo.lerp_(low, 1.0 - self.decay)
        self.hi.lerp_(high, 1.0 - self.decay)

    def scale(self) -> torch.Tensor:
        """The return scale ``S = max(limit, hi − lo)``, a 0-dim tensor."""
        return (self.hi - self.lo).clamp(min=self.limit)
