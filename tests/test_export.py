"""``rl_lightning.export``: the exported file acts as ``load_policy`` does, from the same checkpoint.

Each case fits a tiny module for two updates, saves a checkpoint, exports it to ONNX and to ``torch.export``, records
1,000 observations by running the env, and checks that ``onnxruntime`` and ``torch.export.load`` give the actions
``load_policy`` gives and the logits / means / log-stds of the module's own forward within 1e-5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys, load_policy
from rl_lightning.algos.policy_io import obs_batch
from rl_lightning.envs import BatchedEnv, CartPole, Catch, ClassSpec, GymnasiumEnv, Pendulum, TicTacToe
from rl_lightning.export import export_policy
from tests.helpers import tiny_dreamer, tiny_ppo, tiny_spo, trainer

ort = pytest.importorskip("onnxruntime", reason='needs pip install -e ".[export]"')
pytest.importorskip("onnxscript", reason='needs pip install -e ".[export]"')

NUM_OBS = 1000
TOL = 1e-5


def _gym(name: str, **kwargs: Any) -> GymnasiumEnv:
    return GymnasiumEnv(env_class=ClassSpec(f"tests.space_envs.{name}", kwargs))


PPO_FIT = {"total_env_steps": 128}
CNN_FIT = {"num_envs": 2, "num_steps": 8, "total_env_steps": 32, "update_epochs": 1}  # CNN updates are slow on CPU
CONSTANT_OBS = ("ppo_multidiscrete", "ppo_multibinary")  # bandits: one observation, so one set of outputs
# case → (the env, the tiny module and datamodule fitted on it)
CASES = {
    "ppo_cartpole": (CartPole, lambda env: tiny_ppo(env, **PPO_FIT)),
    "ppo_pendulum_normalized": (Pendulum, lambda env: tiny_ppo(env, **PPO_FIT, normalize_obs=True)),
    "ppo_tictactoe_masked": (TicTacToe, lambda env: tiny_ppo(env, **PPO_FIT)),
    "ppo_tictactoe_table": (TicTacToe, lambda env: tiny_ppo(env, **PPO_FIT, policy_table_rows=512)),
    "ppo_catch_nature": (lambda: Catch(size=64), lambda env: tiny_ppo(env, **CNN_FIT, encoder="nature")),
    "ppo_catch_impala": (lambda: Catch(size=16), lambda env: tiny_ppo(env, **CNN_FIT, encoder="impala")),
    "ppo_dict_normalized": (lambda: _gym("TwoKeyDict", length=6),
                            lambda env: tiny_ppo(env, **PPO_FIT, normalize_obs=True)),
    "ppo_multidiscrete": (lambda: _gym("MultiDiscreteBandit"), lambda env: tiny_ppo(env, **PPO_FIT)),
    "ppo_multibinary": (lambda: _gym("MultiBinaryBandit"), lambda env: tiny_ppo(env, **PPO_FIT)),
    "spo_cartpole": (CartPole, tiny_spo),
    "spo_pendulum_normalized": (Pendulum, lambda env: tiny_spo(env, normalize_obs=True)),
    "dreamer_cartpole": (CartPole, tiny_dreamer),
}  # fmt: skip


def fit_checkpoint(tmp_path: Path, case: str) -> Path:
    """Fit ``CASES[case]`` (a couple of updates) and save its checkpoint."""
    torch.manual_seed(0)
    env_fn, build = CASES[case]
    module, datamodule = build(env_fn())
    fit = trainer(tmp_path / "run")
    fit.fit(module, datamodule)
    path = tmp_path / f"{case}.ckpt"
    fit.save_checkpoint(str(path))
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``checkpoint(case)``: the case's checkpoint, fitted once per module (tests share fits)."""
    fitted: dict[str, Path] = {}

    def get(case: str) -> Path:
        if case not in fitted:
            fitted[case] = fit_checkpoint(tmp_path_factory.mktemp(case), case)
        return fitted[case]

    return get


def record(env: Any, ticks: int, num_envs: int = 8, seed: int = 0) -> list[TensorDict]:
    """``ticks`` env outputs of ``num_envs`` envs stepped with uniformly random (legal) actions."""
    batched = BatchedEnv(env, num_envs, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    spec = batched.spec
    out, steps = batched.reset(), []
    for _ in range(ticks):
        steps.append(out.clone())
        if spec.discrete:
            weights = out[keys.ACTION_MASK].float() if spec.has_action_mask else torch.ones(num_envs, spec.num_actions)
            action = torch.multinomial(weights, 1, generator=gen).squeeze(-1)
        elif spec.action_kind == "box":
            low, high = (torch.tensor(b).reshape(spec.action_shape) for b in (spec.action_low, spec.action_high))
            action = (low + (high - low) * torch.rand((num_envs, *spec.action_shape), generator=gen)).float()
        elif spec.action_nvec:
            nvec = torch.tensor(spec.action_nvec).reshape(spec.action_shape)
            action = (torch.rand((num_envs, *spec.action_shape), generator=gen) * nvec).long()
        else:
            action = (torch.rand((num_envs, *spec.action_shape), generator=gen) < 0.5).long()
        out = batched.step(action)
    return steps


def feeds(graph: Any, td: TensorDict) -> dict[str, np.ndarray]:
    """The exported file's inputs for a batch of env outputs (observation leaves, then the mask)."""
    out = {}
    for spec in graph.inputs:
        if spec.name == "action_mask":
            out[spec.name] = td[keys.ACTION_MASK].numpy()
        elif spec.name == "obs":
            out[spec.name] = td[keys.OBS].numpy()
        elif not spec.name.startswith(("state/", "is_first", "noise")):
            out[spec.name] = td[(keys.OBS, *spec.name.split("/"))].numpy()
    return out


def reference(module: Any, td: TensorDict) -> list[torch.Tensor]:
    """The distribution parameters the module's own forward gives (eval mode): what the extra outputs must equal."""
    if module.family == "spo":
        params = module.prior.params(td)
        return [params[0]] if module.env_spec.discrete else [params[0], params[1].log()]
    features = module._features(td)[0]
    if module.env_spec.action_kind == "discrete":
        return [module._logits(td, features)]
    mean = module.actor(features)
    return [mean, module.log_std.expand_as(mean)] if module.env_spec.action_kind == "box" else [mean]


def run_both(fmt_paths: dict[str, Path], inputs: dict[str, np.ndarray]) -> dict[str, list[np.ndarray]]:
    """Outputs of the ONNX file under onnxruntime and of the .pt2 under ``torch.export.load``."""
    session = ort.InferenceSession(str(fmt_paths["onnx"]), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    onnx_out = session.run(None, {name: inputs[name] for name in names})
    program = torch.export.load(str(fmt_paths["torch_export"])).module()
    with torch.no_grad():
        torch_out = program(*(torch.from_numpy(inputs[name]) for name in names))
    return {"onnx": onnx_out, "torch_export": [t.detach().numpy() for t in torch_out]}


def export_both(ckpt: Path, **kwargs: Any) -> tuple[dict[str, Path], Any]:
    paths = {}
    for fmt, suffix in (("onnx", ".onnx"), ("torch_export", ".pt2")):
        paths[fmt], graph = export_policy(ckpt, fmt, ckpt.with_suffix(suffix), **kwargs)
    return paths, graph


FEEDFORWARD = [case for case in CASES if not case.startswith("dreamer")]


@pytest.mark.parametrize("case", FEEDFORWARD)
def test_exported_policy_acts_as_load_policy(checkpoint, case):
    ckpt = checkpoint(case)
    paths, graph = export_both(ckpt)
    policy = load_policy(str(ckpt), deterministic=True)
    module = policy.module
    steps = record(CASES[case][0](), NUM_OBS // 8)
    batch = torch.cat([s.select(*[k for k in (keys.OBS, keys.ACTION_MASK) if k in s]) for s in steps])
    assert batch.batch_size[0] == NUM_OBS
    inputs = feeds(graph, batch)
    obs = batch[keys.OBS]
    mask = batch.get(keys.ACTION_MASK, None)
    expected_action = np.asarray(policy(obs.to_dict() if isinstance(obs, TensorDict) else obs.numpy(), mask))
    td, _ = obs_batch(obs.to_dict() if isinstance(obs, TensorDict) else obs, module.env_spec, module.device, mask)
    with torch.no_grad():
        expected_params = [p.numpy() for p in reference(module, td)]
    for fmt, outs in run_both(paths, inputs).items():
        assert [o.shape[0] for o in outs] == [NUM_OBS] * len(outs), fmt
        if outs[0].dtype.kind == "f":  # Box actions: the mean (clipped) as the runtime computes it
            np.testing.assert_allclose(outs[0], expected_action, rtol=0, atol=TOL, err_msg=f"{case} {fmt}: actions")
        else:
            np.testing.assert_array_equal(outs[0], expected_action, err_msg=f"{case} {fmt}: actions")
        for got, want, name in zip(outs[1:], expected_params, graph.outputs[1:], strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=TOL, err_msg=f"{case} {fmt}: {name}")
    # The recorded observations must move the outputs, or parity would show little.
    if case not in CONSTANT_OBS:
        assert np.ptp(expected_params[0], axis=0).max() > 1e-4, f"{case}: every observation gives the same outputs"


@pytest.mark.parametrize("case", ["ppo_pendulum_normalized", "ppo_dict_normalized", "spo_pendulum_normalized"])
def test_normaliser_in_the_graph_matters(checkpoint, tmp_path, case):
    # The parity above can only catch a graph that skips the normaliser if the statistics move the outputs.
    ckpt = checkpoint(case)
    graph = export_policy(ckpt, "torch_export", tmp_path / "p.pt2")[1]
    steps = record(CASES[case][0](), 16)
    inputs = [torch.from_numpy(v) for v in feeds(graph, torch.cat([s.select(keys.OBS) for s in steps])).values()]
    with torch.no_grad():
        normalised = graph(*inputs)[1]
        graph.normalizer = None
        raw = graph(*inputs)[1]
    assert (normalised - raw).abs().max() > 1e-3


def test_dreamer_player_carries_its_state_across_episode_boundaries(checkpoint):
    """Each step of the exported player, fed the state ``load_policy``'s player carried into that step, gives that
    player's action and next state. The reference's state is fed (not the export's own output): the stochastic
    state is a one-hot argmax, and on this untrained net a near tie can flip between torch's and onnxruntime's
    matmul reduction orders (it did, once in several full runs); carried on, one flip would change every later step.
    A flip is allowed in at most 1% of the rows, and only there may the action differ; the carry across episode
    ends is the graph's own (``is_first`` must clear the state it is given)."""
    torch.set_num_threads(1)
    ckpt = checkpoint("dreamer_cartpole")
    paths, graph = export_both(ckpt)
    assert [t.name for t in graph.inputs] == ["obs", "is_first", "state/deter", "state/stoch", "state/prev_action"]
    assert graph.outputs == ["action", "logits", "next_state/deter", "next_state/stoch", "next_state/prev_action"]
    policy = load_policy(str(ckpt), deterministic=True)
    policy.reset()
    steps = record(CASES["dreamer_cartpole"][0](), NUM_OBS // 8)
    assert any(s[keys.IS_FIRST].any() for s in steps[1:]), "no episode ended: the carry across resets is untested"
    session = ort.InferenceSession(str(paths["onnx"]), providers=["CPUExecutionProvider"])
    program = torch.export.load(str(paths["torch_export"])).module()
    names = list(graph.zero_state(8))
    carried = graph.zero_state(8)
    flipped = {"onnx": 0, "torch_export": 0}
    for step in steps:
        want = policy(step[keys.OBS], is_first=step[keys.IS_FIRST])
        player = policy._player
        obs, first = step[keys.OBS].numpy(), step[keys.IS_FIRST].numpy()
        outs = {
            "onnx": session.run(None, {"obs": obs, "is_first": first, **{k: v.numpy() for k, v in carried.items()}}),
            "torch_export": [t.detach().numpy() for t in program(torch.from_numpy(obs), torch.from_numpy(first),
                                                                 *carried.values())],
        }  # fmt: skip
        stoch = player.state["stoch"].numpy()
        for fmt, out in outs.items():
            np.testing.assert_allclose(out[-3], player.state["deter"].numpy(), atol=TOL, rtol=0, err_msg=fmt)
            rows = (np.abs(out[-2] - stoch) > 0.5).reshape(len(stoch), -1).any(axis=1)  # another class's one-hot
            flipped[fmt] += int(rows.sum())
            np.testing.assert_allclose(out[-2][~rows], stoch[~rows], atol=TOL, rtol=0, err_msg=fmt)
            np.testing.assert_array_equal(out[0][~rows], want.numpy()[~rows], err_msg=fmt)
            np.testing.assert_allclose(out[-1][~rows], player.prev_action.numpy()[~rows], atol=TOL, err_msg=fmt)
        carried = dict(zip(names, (player.state["deter"], player.state["stoch"], player.prev_action), strict=True))
    for fmt, count in flipped.items():
        assert count <= 0.01 * len(steps) * 8, (fmt, count)


def test_stochastic_export_samples_as_the_module_does_from_the_same_noise(checkpoint, tmp_path):
    ckpt = checkpoint("ppo_tictactoe_masked")
    path, graph = export_policy(ckpt, "onnx", tmp_path / "s.onnx", stochastic=True)
    assert [t.name for t in graph.inputs] == ["obs", "action_mask", "noise"]
    module = load_policy(str(ckpt)).module
    batch = torch.cat([s.select(keys.OBS, keys.ACTION_MASK) for s in record(TicTacToe(), 32)])
    gen = torch.Generator().manual_seed(3)
    noise = module.act_noise(gen, (batch.batch_size[0],))
    want = module.act_from_noise(batch, noise)[keys.ACTION]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"obs": batch[keys.OBS].numpy(), "action_mask": batch[keys.ACTION_MASK].numpy(),
                             "noise": noise.numpy()})[0]  # fmt: skip
    np.testing.assert_array_equal(got, want.numpy())
    assert batch[keys.ACTION_MASK].gather(-1, torch.from_numpy(got).unsqueeze(-1)).all()  # legal moves only


def test_float_mask_input_acts_as_the_bool_one(checkpoint, tmp_path):
    ckpt = checkpoint("ppo_tictactoe_masked")
    path, graph = export_policy(ckpt, "onnx", tmp_path / "f.onnx", mask_dtype="float32")
    assert [(t.name, t.dtype) for t in graph.inputs][1] == ("action_mask", torch.float32)
    batch = torch.cat([s.select(keys.OBS, keys.ACTION_MASK) for s in record(TicTacToe(), 32)])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"obs": batch[keys.OBS].numpy(), "action_mask": batch[keys.ACTION_MASK].float().numpy()})
    want = load_policy(str(ckpt), deterministic=True)(batch[keys.OBS], batch[keys.ACTION_MASK])
    np.testing.assert_array_equal(got[0], want.numpy())


def _tiny_recurrent_ppo(env: Any) -> Any:
    from rl_lightning.algos import RecurrentPPO
    from rl_lightning.data import OnPolicyDataModule

    datamodule = OnPolicyDataModule(env, num_envs=4, num_steps=16, total_env_steps=128)
    module = RecurrentPPO(env_spec=datamodule.env_spec, core_size=16, hidden_sizes=(16,), update_epochs=1,
                          num_minibatches=2, normalize_obs=True)  # fmt: skip
    return module, datamodule


CASES["recurrent_ppo_cartpole"] = (CartPole, _tiny_recurrent_ppo)


def test_recurrent_ppo_carries_its_core_state_across_episode_boundaries(checkpoint):
    ckpt = checkpoint("recurrent_ppo_cartpole")
    paths, graph = export_both(ckpt)
    assert [t.name for t in graph.inputs] == ["obs", "is_first", "state/h", "state/c"]
    assert graph.outputs == ["action", "logits", "next_state/h", "next_state/c"]
    policy = load_policy(str(ckpt), deterministic=True)
    policy.reset()
    steps = record(CartPole(), NUM_OBS // 8)
    assert any(s[keys.IS_FIRST].any() for s in steps[1:]), "no episode ended: the carry across resets is untested"
    session = ort.InferenceSession(str(paths["onnx"]), providers=["CPUExecutionProvider"])
    program = torch.export.load(str(paths["torch_export"])).module()
    carry = {fmt: graph.zero_state(8) for fmt in ("onnx", "torch_export")}
    actions = []
    for step in steps:
        want = policy(step[keys.OBS], is_first=step[keys.IS_FIRST])
        actions.append(want)
        obs, first = step[keys.OBS].numpy(), step[keys.IS_FIRST].numpy()
        outs = {
            "onnx": session.run(None, {"obs": obs, "is_first": first, **{k: v.numpy() for k, v in
                                                                     carry["onnx"].items()}}),
            "torch_export": [t.detach().numpy() for t in program(torch.from_numpy(obs), torch.from_numpy(first),
                                                                 *carry["torch_export"].values())],
        }  # fmt: skip
        for fmt, out in outs.items():
            np.testing.assert_array_equal(out[0], want.numpy(), err_msg=fmt)
            for got, name in zip(out[-2:], ("h", "c"), strict=True):
                np.testing.assert_allclose(got, policy.state[name].numpy(), atol=TOL, rtol=0, err_msg=fmt)
            carry[fmt] = {name: torch.from_numpy(np.asarray(v)) for name, v in
                          zip(carry[fmt], out[-2:], strict=True)}  # fmt: skip
    assert len(torch.cat(actions).unique()) == 2
