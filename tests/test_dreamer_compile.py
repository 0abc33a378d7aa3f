"""DreamerV3's ``compile_update``: the gradient step's up-front draws are the numbers sampling inside the step would
draw, the compiled regions compute what eager does (losses, gradients, weights after optimiser steps), a run
compiles once and never again, and the CLI fits with it."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from tensordict import TensorDict
from torch._dynamo.utils import counters

from rl_lightning import keys
from rl_lightning.algos import DreamerV3
from rl_lightning.algos.dreamer import behavior
from rl_lightning.algos.dreamer.update_graphs import REGIONS
from rl_lightning.cli import main
from rl_lightning.envs import CartPole, Pendulum
from rl_lightning.objectives import dreamer as L
from tests.cli_subprocess import run_cli

# tests.helpers.tiny_dreamer's shapes (size tiny, 15 bins, [T=4, B=2], horizon 3): the CLI test below and the DDP
# test's compiled case fit with them too, so after the first compile they find every graph in inductor's cache.
T, B, H, BINS = 4, 2, 3, 15


def _seq(spec, seed: int = 0) -> TensorDict:
    """A ``[T, B]`` replay batch with episode starts, a termination and a truncation mid-sequence."""
    gen = torch.Generator().manual_seed(seed)
    is_first = torch.zeros(T, B, dtype=torch.bool)
    is_first[0], is_first[2, 1], is_first[3, 0] = True, True, True
    terminated, truncated = torch.zeros(T, B, dtype=torch.bool), torch.zeros(T, B, dtype=torch.bool)
    terminated[1, 1], truncated[2, 0] = True, True
    if spec.discrete:
        action = torch.randint(0, spec.num_actions, (T, B), generator=gen)
    else:
        action = torch.rand(T, B, *spec.action_shape, generator=gen) * 4 - 2
    return TensorDict(
        {
            keys.OBS: torch.randn(T, B, *spec.obs_shape, generator=gen),
            keys.ACTION: action,
            keys.REWARD: torch.randn(T, B, generator=gen),
            keys.IS_FIRST: is_first,
            keys.TERMINATED: terminated,
            keys.TRUNCATED: truncated,
        },
        batch_size=[T, B],
    )


def _model(env_cls, compile_update: bool) -> DreamerV3:
    torch.manual_seed(0)
    model = DreamerV3(
        env_spec=env_cls().spec,
        size="tiny",
        horizon=H,
        bins=BINS,
        warmup_steps=0,
        lr=1e-3,
        compile_update=compile_update,
    )
    model.train()
    model.sample_generator = torch.Generator().manual_seed(3)
    with torch.no_grad():  # zero-initialised output layers would make the actor-critic terms trivially equal
        g = torch.Generator().manual_seed(1)
        for head in (model.behaviour.actor, model.behaviour.critic, model.world_model.reward_head):
            head.out.weight.copy_(torch.randn(head.out.weight.shape, generator=g) * 0.1)
        # Two-hot heads with random weights put mass on every bin, up to symexp(20) ~ 5e8: returns ~1e6 whose float32
        # rounding alone moves the policy loss by ~1e-4 (on the H200, compiled and eager parted there). Centred
        # logits keep the values O(1), as trained heads have them.
        for head, codec in ((model.behaviour.critic, model.behaviour.value_codec),
                            (model.world_model.reward_head, model.world_model.reward_codec)):  # fmt: skip
            head.out.bias.copy_(-2.0 * torch.linspace(-20.0, 20.0, codec.num_bins).abs())
    return model


@pytest.mark.parametrize("env_cls", [CartPole, Pendulum])
def test_the_step_draws_what_sampling_inside_it_would(env_cls):
    """Bit for bit on CPU: the losses from ``GradientStepDraws`` equal the generator-driven pieces (observe,
    imagine, behaviour and replay value losses) drawing each sample where it is used, from the same seed."""
    model = _model(env_cls, False)
    reference = copy.deepcopy(model)  # the return normaliser's EMA moves with each call
    seq = _seq(model.env_spec)
    got = model.losses(seq)

    hp, gen = reference.hparams, torch.Generator().manual_seed(3)
    actions = reference.space.to_model(seq[keys.ACTION])
    wm_terms, posts, _ = reference.world_model.loss(seq, actions, gen, hp.free_nats, hp.discount_horizon, True)
    features, imagined = behavior.imagine(
        reference.world_model, reference.behaviour.actor, reference.space, posts.detach().reshape(-1), H, gen
    )
    ac_terms, _, returns = behavior.behaviour_losses(
        reference.behaviour, reference.world_model, features, imagined, hp.lam, 1.0, hp.entropy_coef, hp.slowreg
    )
    cont = L.continue_target(seq[keys.TERMINATED].float(), hp.discount_horizon, True)
    repval = behavior.replay_value_loss(
        reference.behaviour, reference.world_model.rssm.feature(posts).detach(), seq, returns, hp.lam, cont, hp.slowreg
    )
    expected = {f"loss_{k}": v.mean() for k, v in {**wm_terms, **ac_terms, "repval": repval}.items()}
    assert set(expected) == {k for k in got if k.startswith("loss_")}
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


def _steps(model: DreamerV3, seq: TensorDict, steps: int) -> list[tuple[dict, dict, int]]:
    """``steps`` gradient steps; per step the terms, the gradients and the number of compiled graphs after it."""
    optimizer = model.configure_optimizers()
    out = []
    for _ in range(steps):
        terms = model.losses(seq)
        loss = sum(v for k, v in terms.items() if k.startswith("loss_"))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
        out.append(({k: v.detach() for k, v in terms.items()}, grads, counters["stats"]["unique_graphs"]))
    return out


@pytest.fixture(
    scope="module",
    params=["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)],  # inductor: 85 s of g++ on a cold cache
)
def eager_and_compiled(request):
    """Three steps of an eager and a compiled model. The default suite compiles the regions with ``aot_eager``: the
    same dynamo capture (one graph per region, the draws as inputs) and AOT autograd as inductor, run by eager kernels;
    the inductor case (the kernels users run) is ``slow``, and runs on every CUDA machine in the test below."""
    seq = _seq(CartPole().spec)
    eager = _model(CartPole, False)
    with pytest.MonkeyPatch.context() as patch:  # held while this module's tests that use it run
        patch.setattr(torch, "compile", functools.partial(torch.compile, backend=request.param))
        compiled = _model(CartPole, True)
        counters.clear()
        yield (eager, _steps(eager, seq, 3)), (compiled, _steps(compiled, seq, 3))


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm().clamp_min(1e-12))


def test_compiled_step_matches_eager(eager_and_compiled):
    """Same draws, same weights: every term, gradient and weight within float tolerance for three optimiser steps.

    Fused kernels sum in another order; the two-hot heads' symexp bins (up to ±4.85e8) turn that into relative
    differences of ~1e-4 in the critic's gradient, so tensors are compared by relative error of their norm."""
    (eager, eager_steps), (compiled, compiled_steps) = eager_and_compiled
    for (terms_e, grads_e, _), (terms_c, grads_c, _) in zip(eager_steps, compiled_steps):
        for key in terms_e:
            torch.testing.assert_close(terms_c[key], terms_e[key], rtol=1e-4, atol=1e-5, msg=key)
        assert grads_c.keys() == grads_e.keys()
        for name in grads_e:
            assert _relative_error(grads_c[name], grads_e[name]) < 1e-3, name
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values()):
        assert _relative_error(b.float(), a.float()) < 1e-4, name


def test_compiled_step_compiles_each_region_once(eager_and_compiled):
    """The first step compiles one graph per region; later steps (and the eager model) add none."""
    (_, eager_steps), (_, compiled_steps) = eager_and_compiled
    assert [graphs for *_, graphs in eager_steps] == [0, 0, 0]
    assert [graphs for *_, graphs in compiled_steps] == [len(REGIONS)] * 3


def test_a_fresh_module_reuses_the_compiled_regions(eager_and_compiled):
    """A second compiled model of the same shapes (a resumed run, a DDP rank) compiles nothing more."""
    before = counters["stats"]["unique_graphs"]
    model = _model(CartPole, True)
    _steps(model, _seq(CartPole().spec), 1)
    assert counters["stats"]["unique_graphs"] == before


@pytest.mark.slow  # 18 s of compiling; the default suite keeps test_compiled_step_compiles_each_region_once
def test_cli_fit_with_compile_update_never_recompiles(tmp_path, monkeypatch):
    """``configs/dreamer.yaml`` with ``compile_update: true`` through the CLI: dynamo logs no recompilation, no
    warning is printed, and the checkpoint holds the gradient steps taken."""
    monkeypatch.setenv("TORCH_LOGS", "recompiles")
    args = ["fit", "--config", "dreamer", "--model.init_args.compile_update", "true"]
    args += ["--model.init_args.horizon", str(H), "--model.init_args.bins", str(BINS)]
    args += ["--data.init_args.batch_size", str(B)]
    args += ["--data.init_args.sequence_length", str(T), "--data.init_args.learning_starts", "64"]
    args += ["--data.init_args.total_env_steps", "320", "--data.init_args.replay_ratio", "0.0625"]
    args += ["--trainer.enable_progress_bar", "false"]
    result = run_cli(args, tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Recompiling" not in result.stderr, result.stderr[-3000:]
    assert "Warning" not in result.stderr, result.stderr[-3000:]
    checkpoint = torch.load(
        tmp_path / "runs" / "dreamer_cartpole" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False
    )
    assert checkpoint["hyper_parameters"]["compile_update"] is True
    assert checkpoint["rl_counters"]["updates"] >= 2


@pytest.mark.parametrize("config", ["dreamer", "ppo"])
def test_compile_update_is_refused_in_one_line_without_torch_compile(config, monkeypatch, capsys):
    """Where dynamo cannot run (an unsupported Python), ``compile_update: true`` stops at setup with one line."""
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", config, "--model.init_args.compile_update", "true"])
    assert exit_info.value.code != 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rl-lightning: error:")]
    assert len(lines) == 1
    assert "model.compile_update=true needs torch.compile" in lines[0]
    assert "set model.compile_update: false" in lines[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_step_matches_eager_on_cuda():
    """The same comparison on the GPU, where the regions are meant to pay (launch-bound at these sizes), each step
    from the same weights and draws. Carried over optimiser steps the two part on CUDA (measured on an H200: the
    first step agrees to 5e-7, the second's world-model terms to 3e-4). The likely mechanism: LaProp (eps 1e-20)
    divides each gradient by its running RMS, so its first update is about ``lr · sign(g)`` even for a gradient that
    is zero up to rounding, and the fused kernels round in another order. The optimiser amplifying rounding, not the
    compiled step computing something else."""
    seq = _seq(CartPole().spec).to("cuda")
    eager, compiled = (_model(CartPole, compile_update).cuda() for compile_update in (False, True))
    optimizer = eager.configure_optimizers()
    for _ in range(3):
        compiled.load_state_dict(eager.state_dict())
        for model in (eager, compiled):
            model.sample_generator = torch.Generator(device="cuda").manual_seed(3)
        runs = []
        for model in (eager, compiled):
            terms = model.losses(seq)
            loss = sum(v for k, v in terms.items() if k.startswith("loss_"))
            model.zero_grad(set_to_none=True)
            loss.backward()
            runs.append(({k: v.detach() for k, v in terms.items()}, {n: p.grad for n, p in model.named_parameters()}))
        (terms_e, grads_e), (terms_c, grads_c) = runs
        for key in terms_e:
            torch.testing.assert_close(terms_c[key], terms_e[key], rtol=1e-3, atol=1e-4, msg=key)
        for name, grad in grads_e.items():
            if grad is not None:
                assert _relative_error(grads_c[name], grad) < 1e-2, name
        optimizer.step()
