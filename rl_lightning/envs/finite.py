"""``FiniteWatch``: NaN/inf in env outputs caught at the env boundary, with one host sync per check, not per step."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.errors import EnvError

#: Env outputs watched, in the order a report names them.
WATCHED = (keys.OBS, keys.FINAL_OBS, keys.REWARD)


class FiniteWatch:
    """Accumulates, per env index and watched key, a float64 sum of every value seen since the last ``check``.

    A sum is non-finite exactly when one of its terms was NaN/inf (float64 cannot overflow on float32 inputs), so
    ``update`` costs two device ops per key and step and never reads a value back; ``check`` reads the sums once
    (one host sync) and raises ``EnvError`` naming the env, the first offending env index and the key. Integer
    observations (``uint8`` pixels) are always finite and skipped.

    Args:
        env: the env's name for the error message.
        num_envs: batch size.
        device: where the sums live (the env's device).
    """

    def __init__(self, env: str, num_envs: int, device: torch.device) -> None:
        self.env = env
        self.num_envs = num_envs
        self._sums = [torch.zeros(num_envs, dtype=torch.float64, device=device) for _ in WATCHED]

    def update(self, batch: TensorDict) -> None:
        """Fold a ``[..., num_envs]`` batch (a step's outputs or a stacked rollout) into the sums; no host sync."""
        lead = batch.batch_size.numel() // self.num_envs
        for total, key in zip(self._sums, WATCHED, strict=True):
            value = batch.get(key, None)
            if value is None:
                continue
            leaves = value.values(include_nested=True, leaves_only=True) if isinstance(value, TensorDict) else [value]
            for leaf in leaves:
                if leaf.is_floating_point():
                    total.add_(leaf.reshape(lead, self.num_envs, -1).sum((0, 2), dtype=torch.float64))

    def check(self) -> None:
        """Raise ``EnvError`` if any watched value was NaN/inf since the last check; reset the sums (one sync)."""
        finite = torch.isfinite(torch.stack(self._sums))
        for total in self._sums:
            total.zero_()
        if bool(finite.all()):
            return
        row, index = (~finite).nonzero()[0].tolist()
        raise EnvError(
            self.env,
            index,
            self.num_envs,
            f"returned a non-finite {WATCHED[row]!r} (NaN or inf) in the last rollout; fix the env or wrap it "
            "(e.g. clip or replace bad values) so observations and rewards are finite",
        )
