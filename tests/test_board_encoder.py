"""The convolutional board encoder (``encoder: board``): shapes and receptive field over Connect Four's ``[3, 6, 7]``
planes, which observation keys it takes, its one-line refusals, and PPO acting and learning through it."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning import keys
from rl_lightning.algos import PPO
from rl_lightning.envs import ClassSpec, GymnasiumEnv
from rl_lightning.envs.base import EnvSpec, ObsLeaf
from rl_lightning.errors import ConfigError
from rl_lightning.networks.board import BoardEncoder
from rl_lightning.networks.encoders import ObsEncoder, choose_encoders


def c4_spec(**kwargs) -> EnvSpec:
    return EnvSpec(name="open_spiel:connect_four", obs_shape=(3, 6, 7), discrete=True, num_actions=7,
                   has_action_mask=True, num_seats=2, **kwargs)  # fmt: skip


def test_board_encoder_keeps_the_board_size_over_any_leading_dims():
    encoder = BoardEncoder((3, 6, 7), channels=8, layers=3, out_dim=32)
    linear = [m for m in encoder.modules() if isinstance(m, nn.Linear)][-1]
    assert linear.in_features == 8 * 6 * 7  # padding 1: every convolution keeps 6 x 7
    planes = torch.randint(0, 2, (2, 5, 3, 6, 7)).float()
    assert encoder(planes).shape == (2, 5, 32)
    assert encoder(planes[0, 0]).shape == (32,)
    torch.testing.assert_close(encoder(planes)[1, 2], encoder(planes[1, 2]))


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_a_piece_reaches_exactly_as_far_as_the_stacked_3x3_kernels(layers):
    encoder = BoardEncoder((3, 6, 7), channels=8, layers=layers, out_dim=16)
    convs = encoder.trunk[: 2 * layers]  # the convolutions and their ReLUs, before the flatten
    for conv in convs:
        if isinstance(conv, nn.Conv2d):
            nn.init.uniform_(conv.weight, 0.1, 0.2)  # positive weights: every reachable cell moves
            nn.init.constant_(conv.bias, 0.1)
    board = torch.zeros(1, 3, 6, 7)
    moved = board.clone()
    moved[0, 0, 2, 3] = 1.0
    changed = (convs(moved) - convs(board)).abs().sum(1)[0] > 0  # [6, 7]
    rows, cols = torch.meshgrid(torch.arange(6), torch.arange(7), indexing="ij")
    reach = torch.maximum((rows - 2).abs(), (cols - 3).abs()) <= layers
    assert torch.equal(changed, reach)


def test_board_is_chosen_for_board_planes_only_and_refused_elsewhere_in_one_line():
    chosen = choose_encoders(c4_spec(), "board")
    assert [name for _, _, name in chosen] == ["board"]
    assert isinstance(ObsEncoder(c4_spec(), "board").encoders[0], BoardEncoder)
    vector = GymnasiumEnv("CartPole-v1").spec
    with pytest.raises(ConfigError, match="model.encoder=board is a CNN for board planes") as err:
        ObsEncoder(vector, "board")
    assert "\n" not in str(err.value)
    pixels = GymnasiumEnv(env_class=ClassSpec("tests.space_envs.Pixels", {})).spec
    with pytest.raises(ConfigError, match="not board planes"):
        ObsEncoder(pixels, {"pixels": "board"})  # uint8 images take the pixel CNNs
    image = EnvSpec(name="x", obs_shape=(3, 6, 7), obs_dtype=torch.uint8, discrete=True, num_actions=7)
    with pytest.raises(ConfigError, match="has none"):
        ObsEncoder(image, "board")
    assert ObsLeaf((3, 6, 7)).dtype == torch.float32


def test_ppo_acts_and_learns_through_the_board_encoder():
    torch.manual_seed(0)
    module = PPO(env_spec=c4_spec(), encoder="board", hidden_sizes=(32,))
    assert isinstance(module.encoder.encoders[0], BoardEncoder)
    obs = torch.randint(0, 2, (16, 3, 6, 7)).float()
    mask = torch.ones(16, 7, dtype=torch.bool)
    mask[:, 0] = False
    out = module.act(TensorDict({keys.OBS: obs, keys.ACTION_MASK: mask}, [16]), torch.Generator().manual_seed(0))
    assert (out[keys.ACTION] != 0).all()
    td = TensorDict({keys.OBS: obs, keys.ACTION_MASK: mask, keys.ACTION: out[keys.ACTION]}, [16])
    logprob, _, value = module.evaluate_actions(td)
    (-(logprob.sum()) + value.square().sum()).backward()
    conv = module.encoder.encoders[0].trunk[0]
    assert conv.weight.grad is not None
    assert conv.weight.grad.abs().sum() > 0
