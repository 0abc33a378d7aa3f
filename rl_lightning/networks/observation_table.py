"""A learned correction per distinct observation on top of a shared network: the part of a small game's policy that
each information set owns.

A network shares what it learns across inputs, which helps early in self-play (it learns sets it rarely sees from
the common ones) and biases late: a set reached in 1e-4 of games gets a 1e-4 share of the gradient, and the common
sets' answers carried over by the shared weights outweigh its own (benchmarks/NOTES.md, "What the samples alone
allow"). A table row per observation, added to the network's output and learned with it, gives every set a term only
its own samples move. Meant for the integer-valued observations of small games (an OpenSpiel information-state
tensor's 0/1 entries): the row is a hash of the rounded entries, so two observations that round alike share a row.
"""

from __future__ import annotations

import torch
from torch import nn

HASH_SEED = 0x7AB1E  # fixed: the row of an observation must not change between runs, processes or resumes


class TableCorrected(nn.Sequential):
    """``network(x) + table[row(x)]``: ``network``'s layers (indexable as before) and a ``rows × width`` table, zero
    at the start so the corrected network begins as the plain one. ``row(x)`` multiplies the rounded entries of
    ``x`` by fixed random 31-bit integers, sums them and takes the remainder by ``rows``: distinct observations
    collide with probability ~1 / rows per pair (Leduc's 936 information states in 65,536 rows: 14 lose a row of
    their own to another)."""

    def __init__(self, network: nn.Sequential, in_features: int, width: int, rows: int) -> None:
        super().__init__(*network)
        generator = torch.Generator().manual_seed(HASH_SEED)
        multipliers = torch.randint(1, 2**31 - 1, (in_features,), generator=generator, dtype=torch.int64)
        self.register_buffer("row_multipliers", multipliers)
        self.table = nn.Parameter(torch.zeros(rows, width))

    def row(self, x: torch.Tensor) -> torch.Tensor:
        """The table row of each observation in ``x`` (``[..., in_features]`` -> ``[...]``, int64)."""
        return (x.round().to(torch.int64) * self.row_multipliers).sum(-1).remainder(self.table.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = super().forward(x)
        return out + self.table[self.row(x)].to(out.dtype)
