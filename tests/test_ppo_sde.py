"""gSDE (``PPO(sde=True)``, ``networks/sde.py``): the distribution against hand-written loops, the noise held over a
rollout, the gradients it lets through, the refusals, and the default Gaussian head left as it was."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import RecurrentPPO
from rl_lightning.envs import CartPole, Pendulum
from rl_lightning.errors import ConfigError
from rl_lightning.networks.sde import SDE_EPS, sde_log_std, sde_matrices, sde_noise
from tests.helpers import tiny_ppo, trainer


def _loop_log_std(latent: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Per (row, action): 0.5·log(Σ_l z_l² σ_la² + eps), one scalar at a time."""
    latent, log_std = latent.detach(), log_std.detach()
    rows, width = latent.shape[0], log_std.shape[1]
    out = torch.empty(rows, width, dtype=torch.float64)
    for n in range(rows):
        for a in range(width):
            var = sum(float(latent[n, k]) ** 2 * math.exp(float(log_std[k, a])) ** 2 for k in range(latent.shape[1]))
            out[n, a] = 0.5 * math.log(var + SDE_EPS)
    return out


def test_log_std_and_noise_match_hand_written_loops():
    gen = torch.Generator().manual_seed(0)
    latent, log_std = torch.randn(5, 4, generator=gen), torch.randn(4, 2, generator=gen) * 0.5 - 1.0
    torch.testing.assert_close(sde_log_std(latent, log_std).double(), _loop_log_std(latent, log_std))
    matrices = torch.randn(5, 4, 2, generator=gen)
    loop = torch.tensor([[sum(float(latent[n, k] * matrices[n, k, a]) for k in range(4)) for a in range(2)]
                         for n in range(5)])  # fmt: skip
    torch.testing.assert_close(sde_noise(latent, matrices), loop)


def test_matrices_are_drawn_with_the_parameter_std():
    log_std = torch.tensor([[-1.0, 0.5], [0.0, -2.0]])
    draws = sde_matrices(log_std, 200_000, torch.Generator().manual_seed(1))
    assert draws.shape == (200_000, 2, 2)
    torch.testing.assert_close(draws.std(0), log_std.exp(), rtol=0.01, atol=0.0)
    torch.testing.assert_close(draws.mean(0), torch.zeros(2, 2), rtol=0.0, atol=0.01)


def _sde_ppo(**kwargs):
    return tiny_ppo(Pendulum(), sde=True, init_log_std=-1.0, **kwargs)


def _obs(rows: int, seed: int = 0) -> TensorDict:
    return TensorDict({keys.OBS: torch.randn(rows, 3, generator=torch.Generator().manual_seed(seed))}, [rows])


def test_log_prob_of_an_action_is_the_gaussian_of_its_rows_state():
    module, _ = _sde_ppo()
    assert module.log_std.shape == (16, 1)  # (last hidden width, action dims)
    obs = _obs(6)
    acted = module.act(obs, torch.Generator().manual_seed(2))
    latent = module.actor[:-1](module.encoder(obs[keys.OBS]))
    mean, std = module.actor[-1](latent), _loop_log_std(latent, module.log_std).exp().float()
    expected = torch.distributions.Normal(mean, std).log_prob(acted[keys.ACTION]).sum(-1)
    torch.testing.assert_close(acted[keys.LOGPROB], expected)
    logprob, entropy, _ = module.evaluate_actions(obs.set(keys.ACTION, acted[keys.ACTION]))
    torch.testing.assert_close(logprob, expected)
    torch.testing.assert_close(entropy, torch.distributions.Normal(mean, std).entropy().sum(-1))


def test_acting_policy_holds_one_matrix_per_env_for_its_rollout():
    module, _ = _sde_ppo()
    obs, gen = _obs(4), torch.Generator().manual_seed(3)
    policy = module.acting_policy(None, deterministic=False, training=True)
    first, again = policy(obs, gen)[keys.ACTION], policy(obs, gen)[keys.ACTION]
    torch.testing.assert_close(first, again)  # same state, same held matrix: same action
    assert not torch.equal(first[0], first[1]) or not torch.equal(first[1], first[2])  # rows: their own matrices
    fresh = module.acting_policy(None, deterministic=False, training=True)(obs, gen)[keys.ACTION]
    assert not torch.allclose(fresh, first)  # the next rollout draws new matrices
    mean = module.act(obs, deterministic=True)[keys.ACTION]
    torch.testing.assert_close(module.acting_policy(None, deterministic=True)(obs, gen)[keys.ACTION], mean)


def test_variance_trains_log_std_not_the_features():
    latent = torch.randn(3, 4, requires_grad=True)
    log_std = torch.zeros(4, 2, requires_grad=True)
    sde_log_std(latent, log_std).sum().backward()
    assert latent.grad is None
    assert log_std.grad is not None
    assert log_std.grad.abs().sum() > 0


def test_an_sde_fit_learns_with_finite_losses(tmp_path):
    module, datamodule = _sde_ppo()
    before = module.log_std.detach().clone()
    trainer(tmp_path).fit(module, datamodule)
    assert module.updates == 4
    assert not torch.equal(module.log_std.detach(), before)
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_default_gaussian_head_is_unchanged():
    module, _ = tiny_ppo(Pendulum(), init_log_std=-0.5)
    assert module.log_std.shape == (1,)
    assert not module.hparams.sde
    obs = _obs(6)
    acted = module.act(obs, torch.Generator().manual_seed(4))
    mean = module.actor(module.encoder(obs[keys.OBS]))
    noise = torch.randn(mean.shape, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(acted[keys.ACTION], mean + math.exp(-0.5) * noise, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: tiny_ppo(CartPole(), sde=True), "needs Box actions"),
        (lambda: tiny_ppo(Pendulum(), sde=True, hidden_sizes=()), "needs Box actions and hidden layers"),
        (lambda: RecurrentPPO(Pendulum().spec, sde=True), "not supported by RecurrentPPO"),
    ],
)
def test_sde_refuses_what_it_cannot_drive(build, match):
    with pytest.raises(ConfigError, match=match):
        build()


def test_sde_refuses_actor_processes():
    module, datamodule = _sde_ppo()
    datamodule.num_actors = 1
    with pytest.raises(ConfigError, match="data.num_actors=1"):
        module.check_config(datamodule)


def test_export_refuses_an_sde_policy():
    from rl_lightning.export.policy_graph import PPOGraph

    module, _ = _sde_ppo()
    with pytest.raises(ConfigError, match="gSDE policy's log-std"):
        PPOGraph(module, "bool", False)
