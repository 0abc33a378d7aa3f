"""``uint8`` pixels stay ``uint8`` in every store: collector, PPO rollout, replay ring (and its checkpointed
storage), sequence collector; the network alone converts them."""

from __future__ import annotations

import pytest
import torch

from rl_lightning import keys
from rl_lightning.data.collector import Collector
from rl_lightning.data.replay import ReplayRing
from rl_lightning.data.sequence_collector import SequenceCollector
from rl_lightning.envs import BatchedEnv, GymnasiumVectorEnv
from tests.helpers import tiny_ppo
from tests.test_spaces import gym, random_policy, roundtrip


def pixels(batch, key: str) -> torch.Tensor:
    return batch[key, "pixels"]


@pytest.mark.parametrize("layout", ["chw", "hwc"])
def test_pixels_are_uint8_in_the_collector_rollout_replay_and_its_checkpoint(layout: str) -> None:
    core = gym("Pixels", layout=layout, length=2)
    shape = (3, 36, 36) if layout == "chw" else (36, 36, 3)
    collector = Collector(BatchedEnv(core, 2, seed=1), seed=2)
    batch = collector.rollout(random_policy(core.spec), 4, 0)
    for key in (keys.OBS, keys.FINAL_OBS):
        assert pixels(batch, key).dtype == torch.uint8
        assert pixels(batch, key).shape == (4, 2, *shape)
        assert batch[key, "state"].dtype == torch.float32
    ppo, _ = tiny_ppo(core, encoder="nature")
    rollout = ppo.process_rollout(collector.rollout(ppo.act, 4, 0))
    assert pixels(rollout, keys.OBS).dtype == torch.uint8
    assert pixels(rollout, keys.FINAL_OBS).dtype == torch.uint8
    assert torch.isfinite(rollout[keys.ADVANTAGE]).all()
    ring = ReplayRing(8, 2)
    ring.add(batch)
    assert ring._storage[keys.OBS, "pixels"].dtype == torch.uint8  # the preallocated storage itself
    assert ring.sample_sequences(2, 3, torch.Generator().manual_seed(0))[keys.OBS, "pixels"].dtype == torch.uint8
    restored = roundtrip(ring)
    rows = ring.size
    stored = restored._storage[keys.OBS, "pixels"][:rows]
    assert stored.dtype == torch.uint8
    torch.testing.assert_close(stored, ring._storage[keys.OBS, "pixels"][:rows], rtol=0, atol=0)
    assert restored.sample(4, torch.Generator().manual_seed(0))[keys.FINAL_OBS, "pixels"].dtype == torch.uint8
    collector.close()


def test_single_array_pixels_stay_uint8_through_the_vector_backend_and_sequence_collector() -> None:
    vector = gym("Pixels", GymnasiumVectorEnv, with_state=False, length=2)
    assert (vector.spec.obs_shape, vector.spec.obs_dtype) == ((3, 36, 36), torch.uint8)
    collector = Collector(BatchedEnv(vector, 2, seed=1), seed=2)
    batch = collector.rollout(random_policy(vector.spec), 3, 0)
    assert batch[keys.OBS].dtype == torch.uint8
    assert batch[keys.FINAL_OBS].dtype == torch.uint8
    collector.close()
    core = gym("Pixels", with_state=False, length=2)
    sequence = SequenceCollector(BatchedEnv(core, 2, seed=1), seed=2)
    batch = sequence.rollout(random_policy(core.spec), 3, 0)
    assert batch[keys.OBS].dtype == torch.uint8
    sequence.close()
