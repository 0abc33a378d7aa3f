"""Two bugs that passed every earlier test (issue 20's mutation audit): SPO's search reusing one depth's proposal
draws at every depth (eager and compiled read the same draws, so comparing them cannot see it), and the CNN layout
rule's tie (``(3, 10, 3)`` is channels-first)."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from rl_lightning.algos import SPO
from rl_lightning.algos.spo.draws import NoiseDraws
from rl_lightning.algos.spo.search import smc_search
from rl_lightning.envs import BatchedEnv, Pendulum
from rl_lightning.networks.cnn import channels_last, chw

DEPTH = 4


class _RecordingPendulum(Pendulum):
    """Pendulum that keeps the actions of every ``step_from_noise`` call (one call per search depth)."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: list[torch.Tensor] = []

    def step_from_noise(self, state, action, noise):
        self.actions.append(action.clone())
        return super().step_from_noise(state, action, noise)


def _actions_per_depth(noise: NoiseDraws) -> list[torch.Tensor]:
    """The actions each depth of one search stepped with, for a policy that ignores its observation.

    The actor's output layer has zero weights, so every proposal is a function of its draws alone: changing the
    draws of one depth can change that depth's actions only. One resample, after the last depth.
    """
    torch.manual_seed(0)
    module = SPO(env_spec=Pendulum().spec, hidden_sizes=(16,), num_particles=6, search_depth=DEPTH,
                 resample_period=DEPTH)  # fmt: skip
    last = [layer for layer in module.actor.modules() if isinstance(layer, nn.Linear)][-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.uniform_(-0.5, 0.5)
    env = _RecordingPendulum()
    batched = BatchedEnv(env, 3, seed=0)
    obs = batched.reset()
    smc_search(env, batched.state, obs, module.prior, module.search_config, module.search_temperature(), None,
               noise=noise)  # fmt: skip
    assert len(env.actions) == DEPTH
    return env.actions


def test_each_search_depth_proposes_from_its_own_draws():
    torch.manual_seed(0)
    spec_module = SPO(env_spec=Pendulum().spec, hidden_sizes=(16,), num_particles=6, search_depth=DEPTH)
    generator = torch.Generator().manual_seed(1)
    noise = NoiseDraws.draw(Pendulum(), spec_module.prior, 3, 6, DEPTH, 0.03, generator)
    assert noise.proposals.shape[0] == DEPTH - 1  # depth 0 steps the root actions; depth d the proposals of d − 1
    base = _actions_per_depth(noise)
    for changed in range(DEPTH - 1):
        proposals = noise.proposals.clone()
        proposals[changed] = torch.randn(proposals[changed].shape, generator=generator)
        actions = _actions_per_depth(dataclasses.replace(noise, proposals=proposals))
        differs = [not torch.equal(a, b) for a, b in zip(actions, base, strict=True)]
        assert differs == [d == changed + 1 for d in range(DEPTH)], (changed, differs)


def test_a_tie_between_the_end_axes_of_an_image_is_channels_first():
    assert not channels_last((3, 10, 3))
    assert chw((3, 10, 3)) == (3, 10, 3)
    assert chw((10, 10, 3)) == (3, 10, 10)  # a clear channels-last shape still is one
