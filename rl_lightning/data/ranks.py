"""What the DDP ranks of a datamodule exchange: each rank's value in one collective, episode sums added up, and
the actors' rollouts of an update (or the failure every rank stops on).

Each rank owns its envs, collectors and replay; only rank 0 writes checkpoints, so what a resume needs of every rank
travels through ``gather_per_rank``.
"""

from __future__ import annotations

from typing import Any

import torch

from rl_lightning.data.actors.gather import episode_means
from rl_lightning.errors import EnvError


def merge_sums(per_rank: list[dict[str, tuple[float, float]]]) -> dict[str, tuple[float, float]]:
    """The ranks' ``{name: (total, count)}`` episode sums added up, name by name (a name only some ranks saw too)."""
    merged: dict[str, tuple[float, float]] = {}
    for sums in per_rank:
        for name, (total, count) in sums.items():
            old_total, old_count = merged.get(name, (0.0, 0.0))
            merged[name] = (old_total + total, old_count + count)
    return merged


def to_cpu(value: Any) -> Any:
    """``value`` with every tensor of its (nested) dicts moved to the CPU, for a collective or a checkpoint."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value


def gather_per_rank(value: Any, world_size: int) -> list[Any]:
    """Every rank's ``value`` in rank order (one ``all_gather_object``, which every rank must call); ``[value]``
    without a process group."""
    if world_size == 1 or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return [value]
    gathered: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(gathered, value)
    return gathered


def next_rollout_of_every_rank(actors: Any, version: int, world_size: int, rank: int | None) -> tuple[Any, int]:
    """The actors' next rollout for weights ``version`` (already published), and the env steps all ranks collected.

    Under DDP one collective per update carries each rank's env steps and episode sums (the stats then hold every
    rank's episode means), or its actors' failure for good: every rank then raises the first failing rank's
    ``EnvError`` in the same update.
    """
    try:
        gathered = actors.next_rollout(version)
    except EnvError as err:
        if world_size == 1:
            raise
        sent = gather_per_rank((err, 0, {}), world_size)  # the update's collective, as the other ranks send it
        raise first_failure([failure for failure, _, _ in sent], rank) or err from None
    if world_size == 1:
        return gathered, gathered.env_steps
    per_rank = gather_per_rank((None, gathered.env_steps, gathered.episode_sums), world_size)
    failure = first_failure([failure for failure, _, _ in per_rank], rank)
    if failure is not None:
        raise failure
    gathered.stats.update(episode_means(merge_sums([sums for _, _, sums in per_rank])))
    return gathered, sum(steps for _, steps, _ in per_rank)


def first_failure(failures: list[EnvError | None], rank: int | None) -> EnvError | None:
    """The first failing rank's ``EnvError`` (what each rank sent in the update's collective), for every rank to
    raise in the same update: a rank that stopped alone would leave the others waiting for it in a collective
    until its exit broke them (a traceback and exit code 1, or the launcher SIGKILLed). ``None``: none failed.

    ``rank``: this process's rank (``None`` without a trainer); ranks other than 0 wait for rank 0 to save its
    checkpoint and stop its actors first, and leave the one line to it.
    """
    failed = [(index, failure) for index, failure in enumerate(failures) if failure is not None]
    if not failed:
        return None
    first, failure = failed[0]
    if rank:
        torch.distributed.barrier()  # until rank 0 saved its checkpoint and stopped its actors (on_exception)
    error = EnvError(failure.env, failure.index, failure.num_envs, f"on DDP rank {first} {failure.problem}")
    error.said_on_rank_zero = bool(rank)  # one line, not per rank
    return error
