"""``gather_rows``: the rows ``value[index]`` gives, for every kind of rollout column, a whole row at a time."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl_lightning.data.rows import gather_rows
from rl_lightning.networks.cnn import nhwc_frames

GEN = torch.Generator().manual_seed(0)
INDEX = torch.randperm(24, generator=GEN)[:17]  # a shuffled subset, as one PPO epoch of a self-play rollout


def columns() -> dict[str, torch.Tensor]:
    frames = torch.randint(0, 256, (24, 4, 12, 10), dtype=torch.uint8, generator=GEN)
    return {
        "frames": frames,
        "staged_frames": nhwc_frames(frames),  # channels-last memory, as PPO's update lays them out
        "hwc_frames_view": torch.randint(0, 256, (24, 12, 10, 3), dtype=torch.uint8, generator=GEN).permute(0, 3, 1, 2),
        "float": torch.randn(24, generator=GEN),
        "vectors": torch.randn(24, 5, generator=GEN),
        "transposed": torch.randn(5, 24, generator=GEN).t(),
        "actions": torch.randint(0, 4, (24,), generator=GEN),
        "mask": torch.rand(24, 6, generator=GEN) > 0.5,
        "empty_rows": torch.zeros(24, 0),
    }


@pytest.mark.parametrize("name", list(columns()))
def test_gathered_rows_equal_advanced_indexing(name: str) -> None:
    value = columns()[name]
    got = gather_rows(value, INDEX)
    assert got.dtype == value.dtype
    assert got.shape == value[INDEX].shape
    assert torch.equal(got, value[INDEX])


def test_channels_last_frames_keep_their_layout_through_the_gather() -> None:
    staged = columns()["staged_frames"]
    got = gather_rows(staged, INDEX)
    assert got.is_contiguous(memory_format=torch.channels_last)  # the CNN then copies nothing per minibatch
    assert not got.is_contiguous()


def test_a_tensordict_gathers_every_leaf_nested_ones_too() -> None:
    cols = columns()
    td = TensorDict({"pixels": cols["staged_frames"], "nested": {"state": cols["vectors"]}}, batch_size=[24])
    got = gather_rows(td, INDEX)
    assert got.batch_size == torch.Size([17])
    assert torch.equal(got["pixels"], cols["frames"][INDEX])
    assert torch.equal(got["nested", "state"], cols["vectors"][INDEX])
