"""SPO's ``compile_search``: noise drawn before the search, the pure search compiled whole.

The compiled graph agrees with the same pure function run eagerly on the same noise; once compiled it does not
recompile for new weights or new draws; the noise path samples the same distributions as the generator path; the
inverse-CDF resampling is unbiased; an env that cannot take pre-drawn noise is refused in one line.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch

from rl_lightning.algos import SPO
from rl_lightning.algos.spo.compiled_search import CompiledSearch
from rl_lightning.algos.spo.draws import resample_from_uniform
from rl_lightning.algos.spo.search import smc_search
from rl_lightning.envs import BatchedEnv, CartPole, Pendulum
from rl_lightning.errors import ConfigError
from tests.helpers import tiny_spo, trainer
from tests.spo_toys import TableEnv

SEARCH = {"num_particles": 8, "search_depth": 4, "resample_period": 2, "root_noise_fraction": 0.25}


def _setup(env_class, num_envs=4, **kwargs):
    torch.manual_seed(0)
    module = SPO(env_spec=env_class().spec, **{"hidden_sizes": (32,), **SEARCH, **kwargs})
    env = BatchedEnv(env_class(), num_envs, seed=0)
    obs = env.reset()
    return module, env, (env.env, env.state, obs, module.prior, module.search_config, module.search_temperature())


INDUCTOR = torch.compile


@pytest.fixture(autouse=True, scope="module")
def _aot_eager():
    """The default suite compiles the search with ``aot_eager``: the same dynamo capture (one graph, the noise as
    inputs, guards and recompilation) and AOT autograd as inductor, run by eager kernels. Inductor's kernels (35 s of
    g++ on a cold cache) are compared with eager by the ``slow`` test below (``pytest -m slow``)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "compile", functools.partial(INDUCTOR, backend="aot_eager"))
        yield


@pytest.fixture(scope="module")
def compiled_cartpole():
    return CompiledSearch(compile=True)


def _assert_same(a, b):
    for field, x in vars(a).items():
        y = getattr(b, field)
        if x.is_floating_point():
            torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-5, msg=field)
        else:
            assert torch.equal(y, x), field


@pytest.mark.parametrize("explore", [True, False])
def test_compiled_search_agrees_with_the_eager_pure_search_on_the_same_noise(compiled_cartpole, explore):
    _, _, args = _setup(CartPole)
    eager = CompiledSearch(compile=False)(*args, torch.Generator().manual_seed(1), explore=explore)
    compiled = compiled_cartpole(*args, torch.Generator().manual_seed(1), explore=explore)
    _assert_same(eager, compiled)
    assert bool(eager.resampled.any())  # the resampling path ran


def test_compiled_search_agrees_on_box_actions():
    _, _, args = _setup(Pendulum)
    eager = CompiledSearch(compile=False)(*args, torch.Generator().manual_seed(1), explore=True)
    compiled = CompiledSearch(compile=True)(*args, torch.Generator().manual_seed(1), explore=True)
    _assert_same(eager, compiled)


@pytest.mark.slow  # inductor's kernels: ~15 s of g++ per graph on a cold cache
@pytest.mark.parametrize("env_cls", [CartPole, Pendulum])
def test_the_inductor_compiled_search_agrees_with_the_eager_one(env_cls, monkeypatch):
    monkeypatch.setattr(torch, "compile", INDUCTOR)
    _, _, args = _setup(env_cls)
    eager = CompiledSearch(compile=False)(*args, torch.Generator().manual_seed(1), explore=True)
    compiled = CompiledSearch(compile=True)(*args, torch.Generator().manual_seed(1), explore=True)
    _assert_same(eager, compiled)


def test_no_recompilation_after_warm_up_for_new_weights_and_draws(compiled_cartpole):
    module, env, args = _setup(CartPole)
    compiled_cartpole(*args, torch.Generator().manual_seed(1), explore=True)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.01)  # what an optimiser step does: in place
    with torch.compiler.set_stance("fail_on_recompile"):
        for seed in (2, 3):
            compiled_cartpole(*args, torch.Generator().manual_seed(seed), explore=True)
        other_env = BatchedEnv(CartPole(), 4, seed=7)  # new states of the same shapes
        obs = other_env.reset()
        compiled_cartpole(
            other_env.env, other_env.state, obs, *args[3:], torch.Generator().manual_seed(4), explore=True
        )


def test_noise_path_samples_the_same_target_as_the_generator_path():
    """Both estimate the same expected target q̂ over many envs at the same root state (different streams). The root
    is a falling pole, so action sequences that let it fall lose reward and, at a low temperature, weight: the
    target moves far from the prior, and a resampling that ignored the weights would land elsewhere."""
    kwargs = {"hidden_sizes": (16,), "adaptive_temperature": False, "fixed_temperature": 0.05}
    module, env, args = _setup(CartPole, num_envs=1024, root_noise_fraction=0.0, **kwargs)
    env.state["physics"].copy_(torch.tensor([0.0, 0.0, 0.2, 0.3]).expand_as(env.state["physics"]))
    obs = env.env.observe(env.state)
    args = (env.env, env.state, obs, *args[3:])
    eager_noise = CompiledSearch(compile=False)(*args, torch.Generator().manual_seed(1))
    generator = smc_search(*args, torch.Generator().manual_seed(2))
    for result in (eager_noise, generator):
        assert torch.allclose(result.weights.sum(-1), torch.ones(1024))
    q_noise = (eager_noise.weights * (eager_noise.sampled_actions == 1)).sum(-1)
    q_generator = (generator.weights * (generator.sampled_actions == 1)).sum(-1)
    with torch.no_grad():
        prior = float(module.prior.params(obs[:1])[0].softmax(-1)[0, 1])
    assert float(q_generator.mean()) - prior > 0.2  # the search really moves the target: the test has power
    stderr = float((q_noise.var() / 1024 + q_generator.var() / 1024).sqrt())
    assert abs(float(q_noise.mean() - q_generator.mean())) < 4 * stderr + 1e-3
    assert abs(float(eager_noise.action.float().mean() - generator.action.float().mean())) < 0.1


def test_inverse_cdf_resampling_is_unbiased_and_never_picks_zero_weights():
    n, envs = 16, 12_500
    g = torch.Generator().manual_seed(0)
    log_w = torch.randn(n, generator=g)
    log_w[3] = float("-inf")
    uniform = torch.rand(envs, n, generator=g)
    idx = resample_from_uniform(log_w.expand(envs, n), torch.tensor(1.0), uniform)
    freq = torch.bincount(idx.flatten(), minlength=n).float() / idx.numel()
    assert float((freq - log_w.softmax(-1)).abs().max()) < 1e-3
    assert not bool((idx == 3).any())
    edge = resample_from_uniform(torch.zeros(1, 4), torch.tensor(1.0), torch.tensor([[0.0, 0.2499, 0.25, 0.9999999]]))
    assert edge.tolist() == [[0, 0, 1, 3]]


def test_compile_search_is_refused_for_an_env_that_cannot_take_drawn_noise():
    module = SPO(env_spec=CartPole().spec, compile_search=True)
    table = TableEnv(torch.tensor([[1, 0], [0, 1]]), torch.zeros(2, 2))
    with pytest.raises(ConfigError, match=r"model\.compile_search=true needs .*TableEnv does not") as info:
        module.check_config(SimpleNamespace(env=table))
    assert "\n" not in str(info.value)


def test_spo_fits_with_the_compiled_search(tmp_path):
    module, datamodule = tiny_spo(total_env_steps=64, compile_search=True, hidden_sizes=(16,))
    trainer(tmp_path).fit(module, datamodule)
    assert module.updates >= 1
    assert isinstance(module._search, CompiledSearch)
    assert module._search._compiled  # really compiled, not the eager fallback
