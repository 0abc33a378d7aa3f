"""CNN encoders: output shapes, layouts, scaling, orthogonal initialisation, the per-key choice and its refusals,
and how PPO and SPO wire them (shared or separate trunks, targets, optimiser groups)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning import keys
from rl_lightning.algos import PPO, SPO
from rl_lightning.envs import ClassSpec, GymnasiumEnv
from rl_lightning.errors import ConfigError
from rl_lightning.networks.cnn import MIN_SIZE, PixelEncoder, chw, impala_cnn, nature_cnn
from rl_lightning.networks.encoders import FlattenFloat, FlattenPixels, ObsEncoder


def pixels_spec(**init_args: object):
    return GymnasiumEnv(env_class=ClassSpec("tests.space_envs.Pixels", init_args)).spec


def images(shape: tuple[int, ...], *lead: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (*lead, *shape), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("builder", "shape", "out_dim", "flat"),
    [
        (nature_cnn, (4, 84, 84), 512, 64 * 7 * 7),  # the paper's 84×84×4 → 7×7×64
        (nature_cnn, (36, 36, 3), 512, 64 * 1 * 1),  # the smallest input, channels-last
        (impala_cnn, (3, 64, 64), 256, 32 * 8 * 8),  # CleanRL's Procgen input → 8×8×32
        (impala_cnn, (5, 5, 1), 256, 32 * 1 * 1),  # any size fits: each stage halves, rounding up
    ],
)
def test_cnn_output_shapes_over_any_leading_dims(builder, shape, out_dim, flat) -> None:
    encoder = builder(shape)
    assert isinstance(encoder, PixelEncoder)
    linear = [m for m in encoder.modules() if isinstance(m, nn.Linear)][-1]
    assert linear.in_features == flat
    assert encoder(images(shape, 2, 3)).shape == (2, 3, out_dim)
    assert encoder(images(shape)).shape == (out_dim,)


def test_channels_last_is_permuted_once_and_scaled_by_255_inside() -> None:
    first, last = nature_cnn((3, 36, 36)), nature_cnn((36, 36, 3))
    last.load_state_dict(first.state_dict())
    frames = images((3, 36, 36), 4)
    torch.testing.assert_close(last(frames.permute(0, 2, 3, 1)), first(frames))
    assert first.channels_last is False
    assert last.channels_last is True
    assert chw((84, 84, 4)) == (4, 84, 84)
    assert chw((4, 84, 84)) == (4, 84, 84)
    # The trunk sees [0, 1] floats: the same frame given as float /255 by hand gives the same features.
    torch.testing.assert_close(first.trunk(frames.float() / 255.0), first(frames))


@pytest.mark.parametrize("builder", [nature_cnn, impala_cnn])
def test_cnn_trunk_runs_channels_last_and_matches_the_plain_nchw_math(builder) -> None:
    encoder = builder((4, 40, 40))
    convs = [m for m in encoder.modules() if isinstance(m, nn.Conv2d)]
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    assert not all(c.weight.is_contiguous() for c in convs)  # really NHWC, not a 1x1 kernel that is both
    plain = builder((4, 40, 40))
    plain.load_state_dict(encoder.state_dict())
    plain.trunk.to(memory_format=torch.contiguous_format)
    frames = images((4, 40, 40), 3)
    torch.testing.assert_close(encoder(frames), plain.trunk(frames.float() / 255.0), rtol=1e-4, atol=1e-4)
    encoder(frames).sum().backward()  # gradients keep the weights' layout (what fused Adam and DDP buckets expect)
    assert all(c.weight.grad.is_contiguous(memory_format=torch.channels_last) for c in convs)


@pytest.mark.parametrize("builder", [nature_cnn, impala_cnn])
def test_cnn_layers_start_orthogonal_with_gain_sqrt2_and_zero_bias(builder) -> None:
    encoder = builder((3, 40, 40))
    layers = [m for m in encoder.modules() if isinstance(m, nn.Conv2d | nn.Linear)]
    assert len(layers) == (4 if builder is nature_cnn else 3 + 3 * 4 + 1)
    for layer in layers:
        w = layer.weight.reshape(layer.weight.shape[0], -1)
        rows, cols = w.shape
        gram = w @ w.T if rows <= cols else w.T @ w  # orthogonal: the smaller Gram matrix is gain² · I
        torch.testing.assert_close(gram, 2.0 * torch.eye(min(rows, cols)), atol=1e-4, rtol=0)
        assert torch.count_nonzero(layer.bias) == 0


def test_ppo_heads_start_at_gain_001_and_1_on_the_cnn_features() -> None:
    ppo = PPO(env_spec=pixels_spec(), encoder="nature", hidden_sizes=())
    for head, gain in ((ppo.actor[-1], 0.01), (ppo.critic[-1], 1.0)):
        w = head.weight
        torch.testing.assert_close(w @ w.T, gain**2 * torch.eye(w.shape[0]), atol=1e-6, rtol=0)
        assert head.in_features == 512 + 4  # Nature CNN output, then the 4-vector beside it


def test_dict_encoder_is_a_cnn_per_image_key_and_flat_vectors_concatenated() -> None:
    spec = pixels_spec(layout="hwc")
    encoder = ObsEncoder(spec, "impala")
    assert [type(e) for e in encoder.encoders] == [PixelEncoder, FlattenFloat]
    obs = TensorDict({"pixels": images((36, 36, 3), 5), "state": torch.rand(5, 4)}, batch_size=[5])
    out = encoder(obs)
    assert out.shape == (5, 256 + 4)
    torch.testing.assert_close(out[:, :256], encoder.encoders[0](obs["pixels"]))
    torch.testing.assert_close(out[:, 256:], obs["state"])
    mapped = ObsEncoder(spec, {"pixels": "nature"})
    assert mapped.out_dim == 512 + 4
    flat = ObsEncoder(spec, "mlp")  # an image with mlp: flattened and scaled, no parameters
    assert isinstance(flat.encoders[0], FlattenPixels)
    assert not list(flat.parameters())
    torch.testing.assert_close(flat(obs)[:, : 36 * 36 * 3], obs["pixels"].reshape(5, -1).float() / 255.0)


def test_single_array_image_observation_takes_a_cnn() -> None:
    spec = pixels_spec(with_state=False)
    encoder = ObsEncoder(spec, {"obs": "nature"})
    assert encoder(images((3, 36, 36), 2)).shape == (2, 512)
    assert ObsEncoder(spec, "nature").out_dim == 512


@pytest.mark.parametrize(
    ("init_args", "choice", "fragments"),
    [
        ({"size": 35}, "nature", ["observation key 'pixels' (uint8 (3, 35, 35))", "too small for the nature CNN",
                                  f">= {MIN_SIZE['nature']}", "encoders that fit: impala, mlp"]),
        ({"with_state": False, "size": 20, "layout": "hwc"}, "nature", ["'obs' (uint8 (20, 20, 3))", "impala, mlp"]),
        ({}, {"state": "impala"}, ["observation key 'state' (float32 (4,)) is not an image", "impala CNN",
                                   "['pixels']", "give it mlp"]),
        ({}, {"velocity": "nature"}, ["has no observation key 'velocity'", "['pixels', 'state']"]),
        ({}, "resnet", ["model.encoder='resnet' is not an encoder", "['mlp', 'hearts', 'nature', 'impala', 'board']"]),
    ],
    ids=["too_small", "too_small_single_hwc", "not_an_image", "unknown_key", "unknown_name"],
)  # fmt: skip
def test_bad_encoder_choices_are_one_line(init_args, choice, fragments) -> None:
    with pytest.raises(ConfigError) as err:
        ObsEncoder(pixels_spec(**init_args), choice)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_a_cnn_for_an_env_without_images_is_refused() -> None:
    spec = GymnasiumEnv(env_class=ClassSpec("tests.space_envs.TwoKeyDict")).spec
    with pytest.raises(ConfigError, match=r"model.encoder='nature' is a CNN .* has none \(position: float32 \(2,\)"):
        PPO(env_spec=spec, encoder="nature")


def _param_ids(module: nn.Module) -> set[int]:
    return {id(p) for p in module.parameters()}


@pytest.mark.parametrize("share", [True, False])
def test_ppo_shares_one_cnn_trunk_or_gives_the_critic_its_own(share: bool) -> None:
    ppo = PPO(env_spec=pixels_spec(), encoder="nature", share_encoder=share, hidden_sizes=(8,))
    assert (ppo.critic_encoder is None) == share
    cnn_params = sum(p.numel() for p in ppo.encoder.parameters())
    assert sum(p.numel() for p in ppo.parameters()) == cnn_params * (1 if share else 2) + sum(
        p.numel() for m in (ppo.actor, ppo.critic) for p in m.parameters()
    )
    obs = TensorDict({"pixels": images((3, 36, 36), 6), "state": torch.rand(6, 4)}, batch_size=[6])
    td = TensorDict({keys.OBS: obs}, batch_size=[6])
    out = ppo.act(td, torch.Generator().manual_seed(0))
    td[keys.ACTION] = out[keys.ACTION]
    _, _, value = ppo.evaluate_actions(td)
    value.sum().backward()
    actor_grads = [p.grad for p in ppo.encoder.parameters()]
    assert all(g is not None for g in actor_grads) == share  # the value loss reaches the actor's trunk only if shared


@pytest.mark.parametrize("share", [True, False])
def test_spo_targets_copy_the_cnn_encoders_and_groups_hold_them(share: bool) -> None:
    spo = SPO(env_spec=pixels_spec(), encoder="impala", share_encoder=share, hidden_sizes=(8,))
    pairs = spo.target_networks()
    assert len(pairs) == (3 if share else 4)  # actor, critic, then each encoder with parameters
    for online, target in pairs[2:]:
        assert not any(p.requires_grad for p in target.parameters())
        for a, b in zip(online.parameters(), target.parameters(), strict=True):
            assert torch.equal(a, b)
    groups = {g["name"]: {id(p) for p in g["params"]} for g in spo.configure_optimizers().param_groups}
    assert _param_ids(spo.encoder) <= groups["critic" if share else "actor"]
    if not share:
        assert _param_ids(spo.critic_encoder) <= groups["critic"]
    trainable = {id(p) for p in spo.parameters() if p.requires_grad}
    assert set().union(*groups.values()) == trainable  # every trainable parameter in exactly one group
    assert sum(len(g) for g in groups.values()) == len(trainable)


def test_mlp_encoder_adds_no_parameters_and_default_state_dict_keys_are_unchanged() -> None:
    spec = GymnasiumEnv(env_class=ClassSpec("tests.space_envs.TwoKeyDict")).spec
    for module in (PPO(env_spec=spec), SPO(env_spec=spec)):
        names = [name for name, _ in module.named_parameters()]
        assert not [name for name in names if "encoder" in name]


@pytest.mark.parametrize("builder", [nature_cnn, impala_cnn])
def test_staged_frames_keep_their_values_and_a_row_gather_keeps_the_cnn_layout(builder) -> None:
    encoder, frames = builder((4, 36, 36)), images((4, 36, 36), 12)
    staged = encoder.stage(frames)
    assert torch.equal(staged, frames)
    assert staged.shape == frames.shape
    assert staged.is_contiguous(memory_format=torch.channels_last)
    assert not frames.is_contiguous(memory_format=torch.channels_last)
    minibatch = staged[torch.randperm(12, generator=torch.Generator().manual_seed(0))][4:8]  # as PPO's epochs slice
    assert minibatch.is_contiguous(memory_format=torch.channels_last)  # so the CNN copies nothing per minibatch
    assert torch.equal(encoder(staged), encoder(frames))
    hwc = builder((36, 36, 4))
    last = frames.permute(0, 2, 3, 1)
    assert hwc.stage(last) is last  # channels-last frames are NHWC in memory already


def test_a_dict_observation_stages_its_image_leaf_and_leaves_the_rollout_as_it_was() -> None:
    encoder = ObsEncoder(pixels_spec(), "nature")
    obs = TensorDict({"pixels": images((3, 36, 36), 6), "state": torch.rand(6, 4)}, batch_size=[6])
    staged = encoder.stage(obs)
    assert torch.equal(staged["pixels"], obs["pixels"])
    assert staged["pixels"].is_contiguous(memory_format=torch.channels_last)
    assert not obs["pixels"].is_contiguous(memory_format=torch.channels_last)  # the rollout's leaf is untouched
    assert staged["state"] is obs["state"]
    assert torch.equal(encoder(staged), encoder(obs))
    mlp = ObsEncoder(pixels_spec(), "mlp")
    assert mlp.stage(obs) is obs  # no CNN, nothing to lay out


@pytest.mark.parametrize("with_state", [False, True], ids=["image", "dict"])
def test_ppo_update_lays_out_the_frames_once_not_in_every_minibatch(monkeypatch, with_state: bool) -> None:
    from rl_lightning.data.collector import Collector
    from rl_lightning.envs import BatchedEnv
    from rl_lightning.networks import cnn

    env = BatchedEnv(GymnasiumEnv(env_class=ClassSpec("tests.space_envs.Pixels", {"with_state": with_state})), 4,
                     torch.device("cpu"), 0, False, True)  # fmt: skip
    torch.manual_seed(0)
    module = PPO(env_spec=env.spec, encoder="nature", hidden_sizes=[], update_epochs=3, num_minibatches=4)
    batch = module.process_rollout(Collector(env, seed=0).rollout(module.acting_policy(env), 16, 0))
    reference = PPO(env_spec=env.spec, encoder="nature", hidden_sizes=[], update_epochs=3, num_minibatches=4)
    reference.load_state_dict(module.state_dict())
    reference.generator.set_state(module.generator.get_state())
    laid_out = []
    original = cnn.nhwc_frames

    def counting(frames: torch.Tensor) -> torch.Tensor:
        laid_out.append(not frames.is_contiguous(memory_format=torch.channels_last))
        return original(frames)

    monkeypatch.setattr(cnn, "nhwc_frames", counting)
    module.update(batch, torch.optim.Adam(module.parameters(), lr=1e-3))
    assert len(laid_out) == 1 + 12  # the stage, then one forward per minibatch (3 epochs x 4)
    assert sum(laid_out) == 1  # only the stage copied: all 12 minibatches arrived in the CNN's layout
    monkeypatch.setattr(ObsEncoder, "stage", lambda self, obs: obs)  # each minibatch lays its frames out itself
    reference.update(batch, torch.optim.Adam(reference.parameters(), lr=1e-3))
    for (name, got), want in zip(module.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"{name}: staging changed the update")
