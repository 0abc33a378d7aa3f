"""Spaces as they are: observation dtypes kept at every store, Discrete and Dict observations, multi-part actions."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from gymnasium import spaces
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import PPO, SPO, DreamerV3
from rl_lightning.data.collector import Collector
from rl_lightning.data.replay import ReplayRing
from rl_lightning.data.sequence_collector import SequenceCollector
from rl_lightning.envs import BatchedEnv, ClassSpec, GymnasiumEnv, GymnasiumVectorEnv
from rl_lightning.envs.gymnasium.spaces import env_spec
from rl_lightning.envs.random_action import random_action
from rl_lightning.errors import ConfigError
from tests.helpers import tiny_ppo, trainer

DTYPES = {"uint8": torch.uint8, "int32": torch.int32, "float64": torch.float64}


def gym(cls: str, backend: type = GymnasiumEnv, **init_args: object) -> GymnasiumEnv:
    return backend(env_class=ClassSpec(f"tests.space_envs.{cls}", init_args))


def random_policy(spec):
    return lambda obs, gen: TensorDict({keys.ACTION: random_action(spec, obs, gen)}, batch_size=obs.batch_size)


def roundtrip(ring: ReplayRing) -> ReplayRing:
    """The ring's checkpointed state through ``torch.save``/weights-only ``torch.load`` into a fresh ring."""
    buffer = io.BytesIO()
    torch.save(ring.state_dict(include_storage=True), buffer)
    buffer.seek(0)
    fresh = ReplayRing(ring.capacity, ring.num_envs)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    return fresh


def env_cases() -> list:
    cases = [pytest.param(("DtypeBox", {"dtype": name}), dtype, id=name) for name, dtype in DTYPES.items()]
    return [*cases, pytest.param(("DiscreteChain", {}), torch.int64, id="discrete")]


@pytest.mark.parametrize(("env", "dtype"), env_cases())
def test_observation_dtype_is_kept_in_every_store(env, dtype) -> None:
    core = gym(env[0], **env[1])
    assert core.spec.obs_dtype == dtype
    collector = Collector(BatchedEnv(core, 3, seed=1), seed=2)
    batch = collector.rollout(random_policy(core.spec), 6, 0)
    assert batch[keys.OBS].dtype == dtype
    assert batch[keys.FINAL_OBS].dtype == dtype
    ppo, _ = tiny_ppo(core)
    rollout = ppo.process_rollout(collector.rollout(ppo.act, 6, 0))  # the network converts, the store keeps
    assert rollout[keys.OBS].dtype == dtype
    assert torch.isfinite(rollout[keys.ADVANTAGE]).all()
    ring = ReplayRing(8, 3)
    ring.add(batch)
    assert ring.sample_sequences(2, 3, torch.Generator().manual_seed(0))[keys.OBS].dtype == dtype
    restored = roundtrip(ring)
    assert restored.sample(4, torch.Generator().manual_seed(0))[keys.FINAL_OBS].dtype == dtype
    rows = ring.size  # only written rows are saved (the rest of a preallocated ring is uninitialised)
    torch.testing.assert_close(restored._storage[keys.OBS][:rows], ring._storage[keys.OBS][:rows], rtol=0, atol=0)
    sequence = SequenceCollector(BatchedEnv(gym(env[0], **env[1]), 2, seed=1), seed=2)
    assert sequence.rollout(random_policy(core.spec), 5, 0)[keys.OBS].dtype == dtype
    collector.close()
    sequence.close()


def test_discrete_observation_is_the_index_from_zero_and_one_hot_in_the_network() -> None:
    core = gym("DiscreteChain", n=4)
    assert (core.spec.obs_shape, core.spec.obs_classes) == ((), 4)
    batched = BatchedEnv(core, 5, seed=3)
    obs = batched.reset()[keys.OBS]
    assert obs.shape == (5,)
    assert ((obs >= 0) & (obs < 3)).all()  # Discrete(4, start=10): 10..12 at reset, as 0..2
    ppo = PPO(env_spec=core.spec, hidden_sizes=(8,))
    assert ppo.actor[0].in_features == 4
    torch.testing.assert_close(ppo.encoder(obs), torch.nn.functional.one_hot(obs, 4).float())
    batched.close()


@pytest.mark.parametrize("backend", [GymnasiumEnv, GymnasiumVectorEnv])
def test_dict_observation_is_nested_keys_with_their_dtypes(backend) -> None:
    core = gym("TwoKeyDict", backend, length=2)
    assert [key for key, _ in core.spec.obs_keys] == [("position",), ("velocity",)]
    collector = Collector(BatchedEnv(core, 3, seed=1), seed=2)
    batch = collector.rollout(random_policy(core.spec), 4, 0)
    for key in (keys.OBS, keys.FINAL_OBS):
        assert batch[key, "position"].shape == (4, 3, 2)
        assert batch[key, "position"].dtype == torch.float32
        assert batch[key, "velocity"].dtype == torch.float64
    done = batch[keys.TERMINATED]
    assert done[1].all()  # every episode ends after 2 steps: final_obs is the last obs, obs the next reset
    assert not torch.equal(batch[keys.FINAL_OBS, "velocity"][1], batch[keys.OBS, "velocity"][2])
    torch.testing.assert_close(batch[keys.FINAL_OBS, "velocity"][0], batch[keys.OBS, "velocity"][1])
    restored = roundtrip(_filled_ring(batch))
    assert restored.sample(2, torch.Generator())[keys.OBS, "velocity"].dtype == torch.float64
    collector.close()


def _filled_ring(batch: TensorDict) -> ReplayRing:
    ring = ReplayRing(8, batch.batch_size[1])
    ring.add(batch)
    return ring


def test_dict_observation_encoders_concatenate_the_keys_for_every_algorithm() -> None:
    spec = gym("TwoKeyDict").spec
    obs = TensorDict({"position": torch.rand(5, 2), "velocity": torch.rand(5, 3, dtype=torch.float64)}, batch_size=[5])
    td = TensorDict({keys.OBS: obs, keys.IS_FIRST: torch.ones(5, dtype=torch.bool)}, batch_size=[5])
    expected = torch.cat([obs["position"], obs["velocity"].float()], -1)
    for module in (PPO(env_spec=spec), SPO(env_spec=spec, hidden_sizes=(8,)), DreamerV3(env_spec=spec, size="tiny")):
        encoder = module.encoder if not isinstance(module, DreamerV3) else module.world_model.obs_vector
        torch.testing.assert_close(encoder(obs), expected)
        assert module.act(td, torch.Generator())[keys.ACTION].shape == (5,)


def test_tuple_space_is_refused_in_one_line_and_a_dict_image_key_is_a_uint8_leaf() -> None:
    with pytest.raises(ConfigError, match=r"Tuple.*supported: Box \(any dtype\), Discrete, and Dict") as err:
        gym("TupleObs")
    assert "\n" not in str(err.value)
    image = spaces.Dict({"pixels": spaces.Box(0, 255, (3, 8, 8), np.uint8), "state": spaces.Box(0, 1, (2,))})
    leaves = dict(env_spec("ImageDict", image, spaces.Discrete(2), 0).obs_keys)
    assert (leaves[("pixels",)].shape, leaves[("pixels",)].dtype) == ((3, 8, 8), torch.uint8)


@pytest.mark.parametrize("algo", [SPO, DreamerV3])
@pytest.mark.parametrize("env", ["MultiDiscreteBandit", "MultiBinaryBandit"])
def test_multi_part_actions_are_refused_by_spo_and_dreamer(algo, env) -> None:
    spec = gym(env).spec
    with pytest.raises(ConfigError, match=r"does not support multi_.* actions.*supported action spaces: discrete, box"):
        algo(env_spec=spec)


@pytest.mark.parametrize(
    ("env", "shape"), [("MultiDiscreteBandit", (3,)), ("MultiBinaryBandit", (4,))], ids=["multidiscrete", "multibinary"]
)
def test_ppo_learns_the_best_multi_part_action_of_a_bandit(tmp_path, env, shape) -> None:
    core = gym(env)
    target = torch.as_tensor(_target(env))
    torch.manual_seed(0)
    model, data = tiny_ppo(core, num_envs=8, num_steps=8, total_env_steps=64 * 15, lr=0.05, update_epochs=4)
    untrained = model.act(_bandit_obs(64), torch.Generator().manual_seed(0))
    assert untrained[keys.ACTION].shape == (64, *shape)
    assert untrained[keys.ACTION].dtype == torch.int64
    trainer(tmp_path).fit(model, datamodule=data)
    best = model.act(_bandit_obs(1), deterministic=True)[keys.ACTION][0]
    assert torch.equal(best, target), (best, target)
    assert model.last_metrics["rollout/episode_return"] > 0.9


def _target(env: str) -> list[int]:
    from tests import space_envs

    return getattr(space_envs, env)().target.tolist()


def _bandit_obs(n: int) -> TensorDict:
    return TensorDict({keys.OBS: torch.ones(n, 1), keys.IS_FIRST: torch.ones(n, dtype=torch.bool)}, batch_size=[n])


def test_dict_observations_are_normalised_per_vector_key_before_the_encoders(tmp_path) -> None:
    """``normalize_obs`` with a ``Dict`` observation keeps one running mean/std per key, learnt from training data."""
    core = gym("TwoKeyDict", length=2)
    module, dm = tiny_ppo(core, total_env_steps=128, normalize_obs=True)
    stats = {name for name, _ in module.named_buffers() if "obs_normalizer" in name}
    assert {n for n in stats if n.endswith("rms.mean")} == {
        "obs_normalizer.normalizers.position.rms.mean",
        "obs_normalizer.normalizers.velocity.rms.mean",
    }
    trainer(tmp_path).fit(module, dm)
    velocity = module.obs_normalizer.normalizers["velocity"].rms
    assert velocity.count > 100
    assert velocity.mean.dtype == torch.float64
    env = BatchedEnv(gym("TwoKeyDict", length=2), 4, seed=7)
    obs = env.reset()[keys.OBS]
    env.close()
    module.eval()
    normed, _ = module._features(TensorDict({keys.OBS: obs}, obs.batch_size))
    expected = (obs["velocity"] - velocity.mean) / (velocity.var + 1e-8).sqrt()
    torch.testing.assert_close(normed[:, 2:], expected.clamp(-10, 10).float())  # keys in order: position, velocity


def test_normalize_obs_is_refused_for_discrete_observations() -> None:
    core = gym("DiscreteChain", n=4)
    with pytest.raises(ConfigError, match="normalize_obs"):
        PPO(env_spec=core.spec, hidden_sizes=(8,), normalize_obs=True)
