"""PPO under ``trainer.precision: bf16-mixed`` (Lightning's CPU autocast around the whole ``training_step``): the
CNN trunk runs in bfloat16, the policy and value heads hand float32 log-probs and values to the ratio and GAE, and
the many optimiser steps of one update each read the weights the step before left (autocast caches a weight's
bfloat16 copy until its region ends; an in-place optimiser step does not refresh it)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import tiny_dreamer, tiny_ppo, trainer
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import PPO
from rl_lightning.data.collector import Collector
from rl_lightning.data.sequence_collector import SequenceCollector
from rl_lightning.envs import BatchedEnv, CartPole, ClassSpec, GymnasiumEnv
from rl_lightning.envs.random_action import random_action
from rl_lightning.networks.cnn import impala_cnn, nature_cnn
from rl_lightning.networks.mlp import Float32Head

PIXELS = ClassSpec("tests.space_envs.Pixels", {"with_state": False, "length": 5})


def bf16() -> torch.autocast:
    return torch.autocast("cpu", dtype=torch.bfloat16)


def pixel_ppo_and_rollout(seed: int = 0) -> tuple[PPO, object]:
    """A Nature-CNN PPO (shared trunk, linear heads as on Atari) and one processed 4 × 16 rollout of ``Pixels``,
    collected and processed inside one bfloat16 autocast region as the serial path does."""
    env = BatchedEnv(GymnasiumEnv(env_class=PIXELS), 4, torch.device("cpu"), seed, False, True)
    torch.manual_seed(seed)
    module = PPO(env_spec=env.spec, encoder="nature", hidden_sizes=[], update_epochs=3, num_minibatches=4, lr=1e-3)
    module.generator.manual_seed(seed)
    with bf16():
        batch = module.process_rollout(Collector(env, seed=seed).rollout(module.acting_policy(env), 16, 0))
    return module, batch


def own_region_per_step(module: PPO) -> None:
    """Run each optimiser step (forward, backward, step) in its own autocast region: its cache starts empty."""
    step = module._minibatch_step

    def in_region(*args):
        with bf16():
            return step(*args)

    module._minibatch_step = in_region


def test_every_minibatch_step_in_one_autocast_region_reads_the_weights_the_step_before_left() -> None:
    module, batch = pixel_ppo_and_rollout()
    reference = copy.deepcopy(module)
    one_region_opt = torch.optim.Adam(module.parameters(), lr=1e-3)
    reference_opt = torch.optim.Adam(reference.parameters(), lr=1e-3)
    with bf16():  # as Lightning's MixedPrecision wraps training_step: 12 optimiser steps in one region
        terms = module.update(batch, one_region_opt)
    own_region_per_step(reference)
    reference_terms = reference.update(batch, reference_opt)
    for (name, got), want in zip(module.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"{name} after the update")
    torch.testing.assert_close(terms["approx_kl"], reference_terms["approx_kl"], rtol=0, atol=0)
    assert terms["approx_kl"] != 0  # later steps saw moved weights (a stale cache keeps every ratio at exactly 1)


def test_heads_give_float32_log_probs_and_values_from_the_bfloat16_trunk() -> None:
    module, batch = pixel_ppo_and_rollout()
    assert isinstance(module.actor, Float32Head)
    assert isinstance(module.critic, Float32Head)
    assert batch[keys.LOGPROB].dtype == torch.float32
    assert batch[keys.VALUE].dtype == torch.float32
    assert batch[keys.ADVANTAGE].dtype == torch.float32
    assert batch[keys.RETURN].dtype == torch.float32
    rows = batch.reshape(-1)
    with torch.no_grad(), bf16():
        features = module.encoder(module._obs(rows))
    assert features.dtype == torch.bfloat16  # the trunk ran in bfloat16
    with torch.no_grad():  # the heads by hand, in float32 on the same features, outside autocast
        logits = module.actor(features.float())
        value = module.critic(features.float()).squeeze(-1)
    want = torch.log_softmax(logits, -1).gather(-1, rows[keys.ACTION].long().unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(rows[keys.VALUE], value, rtol=0, atol=0)
    torch.testing.assert_close(rows[keys.LOGPROB], want, rtol=1e-6, atol=1e-6)
    # the state dict is a plain MLP's: a float32 checkpoint loads into it and back
    assert set(module.actor.state_dict()) == {"0.weight", "0.bias"}


def test_float32_head_is_a_plain_sequential_outside_autocast() -> None:
    head = Float32Head(torch.nn.Linear(3, 2))
    x = torch.randn(5, 3)
    torch.testing.assert_close(head(x), head[0](x), rtol=0, atol=0)
    with bf16():
        assert head[0](x).dtype == torch.bfloat16
        assert head(x.bfloat16()).dtype == torch.float32
        assert head[-1:](x).dtype == torch.float32  # a slice stays a Float32Head (gSDE's last layer)


def test_ppo_fits_in_bf16_mixed_with_a_bfloat16_trunk_and_float32_heads(tmp_path) -> None:
    module, datamodule = tiny_ppo(
        GymnasiumEnv(env_class=PIXELS), num_envs=2, num_steps=8, total_env_steps=48, encoder="nature", hidden_sizes=[]
    )
    trunk, heads = set(), set()
    module.encoder.register_forward_hook(lambda m, i, o: trunk.add(o.dtype))
    module.critic.register_forward_hook(lambda m, i, o: heads.add(o.dtype))
    trainer(tmp_path, precision="bf16-mixed").fit(module, datamodule)
    assert module.updates == 3
    assert trunk == {torch.bfloat16}
    assert heads == {torch.float32}
    assert all(p.dtype == torch.float32 for p in module.parameters())


def test_replay_gradient_steps_in_one_autocast_region_read_fresh_weights() -> None:
    """``step_each`` (DreamerV3, SPO): several gradient steps in one ``training_step`` under bf16-mixed."""
    module, _ = tiny_dreamer()
    env = BatchedEnv(CartPole(max_episode_steps=8), 3, seed=0)
    spec = env.spec

    def act(view, gen):
        return TensorDict({keys.ACTION: random_action(spec, view, gen)}, batch_size=view.batch_size)

    rows = SequenceCollector(env, 0).rollout(act, 12, 0)
    batches = torch.stack([rows[:6], rows[6:]])  # [G=2, T=6, B=3]
    reference = copy.deepcopy(module)
    losses = reference.losses

    def in_region(seq):
        with bf16():
            return losses(seq)

    reference.losses = in_region
    one_region_opt = module.configure_optimizers()
    reference_opt = reference.configure_optimizers()
    with bf16():
        module.update(batches, one_region_opt)
    reference.update(batches, reference_opt)
    for (name, got), want in zip(module.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"{name} after two gradient steps")


@pytest.mark.parametrize("builder", [nature_cnn, impala_cnn])
def test_cnn_casts_uint8_frames_straight_to_bfloat16_with_autocasts_own_result(builder) -> None:
    encoder = builder((4, 40, 40))
    frames = torch.randint(0, 256, (6, 4, 40, 40), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), bf16():
        got = encoder(frames)
        want = encoder.trunk(frames.float() / 255.0)  # autocast casts the float32 frames at the first convolution
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    with torch.no_grad():  # outside autocast: float32 as before
        assert encoder(frames).dtype == torch.float32
