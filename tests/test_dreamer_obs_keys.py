"""DreamerV3 splits a ``Dict`` observation as its official code does: rank-3 ``uint8`` keys stacked on channels
into the CNN, the rest into the MLP; both embeddings feed the RSSM and both reconstructions the loss."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import DreamerV3
from rl_lightning.algos.dreamer.obs_keys import StackImages, split_keys
from rl_lightning.envs import ClassSpec, GymnasiumEnv
from rl_lightning.envs.base import EnvSpec, ObsLeaf
from rl_lightning.errors import ConfigError
from rl_lightning.networks.dreamer_nets import CNNDecoder, CNNEncoder, MLPDecoder, MLPEncoder


def dict_spec(**leaves: ObsLeaf) -> EnvSpec:
    return EnvSpec("Test", (), True, num_actions=2, obs_keys=tuple(((name,), leaf) for name, leaf in leaves.items()))


def test_image_keys_are_stacked_on_channels_in_sorted_order_and_vectors_go_to_the_mlp() -> None:
    spec = dict_spec(
        wrist=ObsLeaf((16, 16, 3), torch.uint8), state=ObsLeaf((4,)), front=ObsLeaf((1, 16, 16), torch.uint8)
    )
    cnn, vector = split_keys(spec)
    assert [key for key, _ in cnn] == [("front",), ("wrist",)]
    assert [key for key, _ in vector.obs_keys] == [("state",)]
    stack = StackImages(cnn)
    assert stack.shape == (4, 16, 16)
    front = torch.randint(0, 256, (2, 1, 16, 16), dtype=torch.uint8)
    wrist = torch.randint(0, 256, (2, 16, 16, 3), dtype=torch.uint8)
    obs = TensorDict({"front": front, "wrist": wrist, "state": torch.rand(2, 4)}, batch_size=[2])
    stacked = stack(obs)
    assert stacked.dtype == torch.uint8
    torch.testing.assert_close(stacked, torch.cat([front, wrist.permute(0, 3, 1, 2)], dim=1), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("leaves", "match"),
    [
        ({"a": ObsLeaf((3, 16, 16), torch.uint8), "b": ObsLeaf((3, 32, 32), torch.uint8)}, r"differ in H, W"),
        ({"depth": ObsLeaf((1, 16, 16), torch.float32), "s": ObsLeaf((2,))}, r"'depth' is a rank-3 torch.float32"),
    ],
)
def test_images_the_cnn_cannot_stack_are_one_line_errors(leaves, match) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        DreamerV3(env_spec=dict_spec(**leaves), size="tiny")
    assert "\n" not in str(err.value)


def test_world_model_embeds_and_reconstructs_both_parts_of_an_image_and_vector_dict() -> None:
    spec = GymnasiumEnv(env_class=ClassSpec("tests.space_envs.Pixels", {"size": 16, "layout": "hwc"})).spec
    model = DreamerV3(env_spec=spec, size="tiny", bins=15)
    wm = model.world_model
    assert isinstance(wm.encoder, CNNEncoder)
    assert isinstance(wm.decoder, CNNDecoder)
    assert isinstance(wm.vector_encoder, MLPEncoder)
    assert isinstance(wm.vector_decoder, MLPDecoder)
    pixels = torch.randint(0, 256, (4, 2, 16, 16, 3), dtype=torch.uint8)
    obs = TensorDict({"pixels": pixels, "state": torch.rand(4, 2, 4)}, batch_size=[4, 2])
    embed = wm.embed(obs)
    assert embed.shape == (4, 2, wm.encoder.out_dim + wm.vector_encoder.out_dim)
    seq = TensorDict(
        {keys.OBS: obs, keys.IS_FIRST: torch.zeros(4, 2, dtype=torch.bool), keys.REWARD: torch.zeros(4, 2),
         keys.TERMINATED: torch.zeros(4, 2, dtype=torch.bool)}, batch_size=[4, 2],
    )  # fmt: skip
    terms, _, _ = wm.loss(seq, torch.zeros(4, 2, 2), torch.Generator().manual_seed(0), 1.0, 333.0, False)
    terms["rec"].sum().backward()
    for part in (wm.encoder, wm.vector_encoder, wm.decoder, wm.vector_decoder):
        assert all(p.grad is not None for p in part.parameters())  # both reconstructions reach both halves
