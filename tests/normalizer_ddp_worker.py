"""Run by tests/test_normalizers.py: one of 2 gloo ranks updating normalisers from its own data, then saving them."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from rl_lightning.networks.normalizers import ObservationNormalizer, RewardScaler


def main(out_dir: str, rank: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{Path(out_dir, 'store')}", rank=rank, world_size=2)
    g = torch.Generator().manual_seed(100 + rank)
    # Different sizes, locations and scales per rank; two updates each (every rank must update equally often).
    obs = [torch.randn(20 + 13 * rank, 3, generator=g) * (1 + 4 * rank) + 3 * rank for _ in range(2)]
    reward = torch.randn(12, 2 + rank, generator=g) + rank
    done = torch.rand(12, 2 + rank, generator=g) < 0.2
    norm, scaler = ObservationNormalizer((3,)), RewardScaler(gamma=0.9)
    for chunk in obs:
        norm.update(chunk)
    scaler.update(reward[:5], done[:5])
    scaler.update(reward[5:], done[5:])
    torch.save(
        {
            "obs": norm.state_dict(),
            "reward": scaler.state_dict(),
            "returns": scaler.returns,
            "obs_data": torch.cat(obs),
            "reward_data": reward,
            "done_data": done,
        },
        Path(out_dir, f"rank{rank}.pt"),
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
