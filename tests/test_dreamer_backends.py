"""DreamerV3's replay stream on every Gymnasium backend, without snapshots (issue 20, bug 2).

The sequence collector switches Gymnasium backends to next-step autoreset and writes its rows from their step
outputs (``rl_lightning/data/sequence_collector.py``). Checked here: the rows equal a naive loop that steps single
Gymnasium envs by the documented rules (terminal row, zeroed action, reset row with ``is_first`` and reward 0) on
the in-process and Gymnasium vector backends; EnvPool's and ale-py's rows equal the frames their own vector envs
produce when stepped directly; the backends agree with each other on the same transitions; and DreamerV3 fits on
each of them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import gymnasium
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.sequence_collector import NEXT_STEP, SequenceCollector, stepping
from rl_lightning.envs import BatchedEnv, CartPole, GymnasiumEnv, GymnasiumVectorEnv
from rl_lightning.envs.gymnasium.atari import PRESETS
from rl_lightning.envs.gymnasium.backend import draw_seeds

ROW_KEYS = (keys.OBS, keys.REWARD, keys.IS_FIRST, keys.TERMINATED, keys.TRUNCATED, keys.ACTION)
needs_envpool = pytest.mark.skipif(importlib.util.find_spec("envpool") is None, reason="needs envpool")
needs_ale = pytest.mark.skipif(importlib.util.find_spec("ale_py") is None, reason="needs ale-py")


def scripted_actions(env_id: str, ticks: int, num_envs: int) -> torch.Tensor:
    """Deterministic actions per (tick, env): CartPole env 0 pushes one way (it terminates), the others wobble
    (they truncate); continuous envs get a bounded wave (plus an out-of-bounds push the backends clip)."""
    t = torch.arange(ticks).unsqueeze(1)
    i = torch.arange(num_envs).unsqueeze(0)
    if env_id.startswith("CartPole"):
        return torch.where(i == 0, torch.ones_like(t * i), (t + i) % 2)
    dims = {"Pendulum-v1": 1, "HalfCheetah-v5": 6}[env_id]
    wave = torch.sin(0.7 * t.float() + i.float()).unsqueeze(-1).expand(ticks, num_envs, dims).clone()
    return 3.0 * wave  # beyond the bounds of both envs: clipped by the backends and by the naive loop alike


class Replay:
    """A policy that plays a fixed ``[T, N, ...]`` action tensor, one tick per call."""

    def __init__(self, actions: torch.Tensor) -> None:
        self.actions, self.tick = actions, 0

    def __call__(self, view: TensorDict, gen: torch.Generator) -> TensorDict:
        action = self.actions[self.tick]
        self.tick += 1
        return TensorDict({keys.ACTION: action}, batch_size=view.batch_size)


def collect(core, actions: torch.Tensor, seed: int = 3) -> TensorDict:
    """The collector's ``[T, N]`` rows for ``actions`` on ``core`` (closed afterwards)."""
    collector = SequenceCollector(BatchedEnv(core, actions.shape[1], seed=seed), seed=0)
    try:
        return collector.rollout(Replay(actions), actions.shape[0], policy_version=0)
    finally:
        collector.close()


def _row(obs, reward, first, terminated, truncated, action) -> dict[str, torch.Tensor]:
    return {
        keys.OBS: torch.as_tensor(np.asarray(obs)),
        keys.REWARD: torch.tensor(float(reward), dtype=torch.float32),
        keys.IS_FIRST: torch.tensor(bool(first)),
        keys.TERMINATED: torch.tensor(bool(terminated)),
        keys.TRUNCATED: torch.tensor(bool(truncated)),
        keys.ACTION: action,
    }


def naive_stream(env_id: str, env_kwargs: dict, actions: torch.Tensor, seed: int = 3) -> TensorDict:
    """The documented stream, built by stepping one ``gymnasium.make`` env per column directly.

    Each env gets the seed the backends draw for it; a row whose observation ends the episode records action 0
    and the env is reset (not stepped) on that tick; the reset observation's row has ``is_first`` and reward 0.
    """
    ticks, num_envs = actions.shape[:2]
    seeds = draw_seeds(num_envs, torch.Generator().manual_seed(seed))
    columns = []
    for i in range(num_envs):
        env = gymnasium.make(env_id, **env_kwargs)
        obs, _ = env.reset(seed=seeds[i])
        view, rows = (obs, 0.0, True, False, False), []
        for t in range(ticks):
            last = view[3] or view[4]
            action = torch.zeros_like(actions[t, i]) if last else actions[t, i]
            rows.append(_row(*view, action))
            if last:
                view = (env.reset()[0], 0.0, True, False, False)
            else:
                act = action.numpy()
                if isinstance(env.action_space, gymnasium.spaces.Box):
                    act = np.clip(act, env.action_space.low, env.action_space.high).astype(env.action_space.dtype)
                obs, reward, terminated, truncated, _ = env.step(act)
                view = (obs, reward, False, terminated, truncated)
        env.close()
        columns.append(torch.stack([TensorDict(r, batch_size=[]) for r in rows]))
    return torch.stack(columns, dim=1)


def assert_rows_equal(got: TensorDict, want: TensorDict, what: str) -> None:
    for key in ROW_KEYS:
        a, b = got[key], want[key].to(got[key].dtype)
        assert a.shape == b.shape, (what, key, a.shape, b.shape)
        bad = (a != b).reshape(a.shape[0], a.shape[1], -1).any(-1).nonzero()
        assert len(bad) == 0, f"{what}: {key} differs first at (tick, env) {bad[0].tolist()}"


def assert_episode_ends(rows: TensorDict, terminated: bool = True) -> None:
    """The rows hold finished episodes of both kinds asked for, with zeroed actions and reset rows after them."""
    last = rows[keys.TERMINATED] | rows[keys.TRUNCATED]
    assert bool(rows[keys.TRUNCATED].any())
    if terminated:
        assert bool(rows[keys.TERMINATED].any())
    assert bool((rows[keys.ACTION][last] == 0).all())
    after = last[:-1].nonzero()
    assert len(after) >= 2
    assert bool(rows[keys.IS_FIRST][1:][last[:-1]].all())
    assert bool((rows[keys.REWARD][1:][last[:-1]] == 0).all())


GYM_CASES = [
    pytest.param("CartPole-v1", {"max_episode_steps": 12}, 40, id="cartpole"),
    pytest.param("Pendulum-v1", {"max_episode_steps": 7}, 30, id="pendulum"),
    pytest.param("HalfCheetah-v5", {"max_episode_steps": 5}, 14, id="halfcheetah"),
]
GYM_BACKENDS = [
    pytest.param(lambda i, k: GymnasiumEnv(i, k), id="in_process"),
    pytest.param(lambda i, k: GymnasiumVectorEnv(i, k, mode="sync"), id="sync"),
    pytest.param(lambda i, k: GymnasiumVectorEnv(i, k, mode="async"), id="async"),
]


@pytest.mark.parametrize("make", GYM_BACKENDS)
@pytest.mark.parametrize(("env_id", "env_kwargs", "ticks"), GYM_CASES)
def test_gymnasium_backends_write_the_naive_stream(make, env_id: str, env_kwargs: dict, ticks: int) -> None:
    """In-process, sync and async: exactly the rows of the naive loop over single Gymnasium envs (so the same rows
    on every one of them), with terminations and truncations, and no snapshot taken."""
    if "HalfCheetah" in env_id and make is GYM_BACKENDS[2].values[0]:
        pytest.skip("async MuJoCo: the same code path as async CartPole, at the cost of 3 MuJoCo processes")
    actions = scripted_actions(env_id, ticks, 3)
    core = make(env_id, env_kwargs)
    assert stepping(core) == NEXT_STEP
    rows = collect(core, actions)
    assert_rows_equal(rows, naive_stream(env_id, env_kwargs, actions), f"{env_id} on {type(core).__name__}")
    assert_episode_ends(rows, terminated=env_id.startswith("CartPole"))
    assert rows[keys.OBS].dtype == core.spec.obs_dtype


def test_in_process_backend_takes_no_snapshot(monkeypatch) -> None:
    """The collector steps the in-process backend's live envs; it never copies one."""
    core = GymnasiumEnv("CartPole-v1", {"max_episode_steps": 6})

    def refuse(*args, **kwargs):
        raise AssertionError("the sequence collector took a snapshot")

    monkeypatch.setattr(core, "snapshot", refuse)
    monkeypatch.setattr(core, "_copy", refuse)
    rows = collect(core, scripted_actions("CartPole-v1", 20, 2))
    assert_episode_ends(rows, terminated=False)


def test_evaluation_copy_keeps_same_step_autoreset() -> None:
    """The collector switches its own env only: ``fresh`` (what evaluation plays on) keeps the env contract."""
    core = GymnasiumVectorEnv("CartPole-v1", {"max_episode_steps": 3})
    rows = collect(core, scripted_actions("CartPole-v1", 6, 2))
    assert bool(rows[keys.TRUNCATED].any())
    assert core.next_step
    twin = core.fresh()
    assert not twin.next_step
    env = BatchedEnv(twin, 2, seed=0)
    env.reset()
    outs = [env.step(torch.zeros(2, dtype=torch.int64)) for _ in range(3)]
    env.close()
    assert bool(outs[2][keys.TRUNCATED].all())
    assert bool(outs[2][keys.IS_FIRST].all())  # same-step: the done step already shows the next episode
    assert not torch.equal(outs[2][keys.OBS], outs[2][keys.FINAL_OBS])


# ----- EnvPool: rows = the frames its own pool produces ----------------------------------------------------


def envpool_stream(task: str, env_kwargs: dict, actions: torch.Tensor, seed: int = 3) -> TensorDict:
    """The stream built from a raw EnvPool pool stepped directly (its own next-step autoreset)."""
    import envpool

    ticks, num_envs = actions.shape[:2]
    seeds = draw_seeds(num_envs, torch.Generator().manual_seed(seed))
    pool = envpool.make(task, env_type="gymnasium", num_envs=num_envs, seed=seeds, **env_kwargs)
    obs, _ = pool.reset()
    zeros = np.zeros(num_envs, dtype=bool)
    view, rows = (obs, np.zeros(num_envs), ~zeros, zeros, zeros), []
    for t in range(ticks):
        last = view[3] | view[4]
        action = torch.where(torch.as_tensor(last).reshape(-1, *[1] * (actions.dim() - 2)), 0, actions[t])
        rows.append({k: torch.as_tensor(np.asarray(v)) for k, v in zip(ROW_KEYS[:-1], view, strict=True)})
        rows[-1][keys.ACTION] = action
        act = action.numpy()
        if actions.is_floating_point():
            act = np.clip(act, pool.action_space.low, pool.action_space.high)
        obs, reward, terminated, truncated, info = pool.step(act)
        assert (info["elapsed_step"][last] == 0).all()  # EnvPool reset those rows
        assert (reward[last] == 0).all()
        view = (obs.copy(), reward, last, terminated.astype(bool), truncated.astype(bool))
    pool.close()
    return torch.stack([TensorDict(r, batch_size=[num_envs]) for r in rows])


@needs_envpool
@pytest.mark.parametrize(
    ("task", "env_kwargs", "ticks"),
    [
        pytest.param("CartPole-v1", {"max_episode_steps": 12}, 40, id="cartpole"),
        pytest.param("HalfCheetah-v5", {"max_episode_steps": 5}, 14, id="halfcheetah"),
    ],
)
def test_envpool_rows_are_the_pool_s_own_frames(task: str, env_kwargs: dict, ticks: int) -> None:
    from rl_lightning.envs import EnvPoolEnv

    actions = scripted_actions(task, ticks, 3)
    rows = collect(EnvPoolEnv(task, env_kwargs), actions)
    assert_rows_equal(rows, envpool_stream(task, env_kwargs, actions), f"EnvPool {task}")
    assert_episode_ends(rows, terminated=task.startswith("CartPole"))


# ----- ALE: rows = ale-py's own frames, and the same rows as the Gymnasium backends ----------------------------


def short_machado(monkeypatch, frames: int = 60) -> None:
    """``machado`` with a frame limit of ``frames`` (episodes truncate every ``frames / 4`` steps), and without its
    randomness (sticky actions), so the C++ and Python ALE stacks play identical games."""
    preset = dataclasses.replace(PRESETS["machado"], max_episode_frames=frames, sticky=0.0)
    monkeypatch.setitem(PRESETS, "machado", preset)


def breakout_actions(ticks: int, num_envs: int, num_actions: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(7)
    return torch.randint(0, num_actions, (ticks, num_envs), generator=gen)


def ale_stream(actions: torch.Tensor, frames: int, seed: int = 3) -> TensorDict:
    """The stream built from ale-py's ``AtariVectorEnv`` stepped directly (its native next-step autoreset)."""
    from ale_py.vector_env import AtariVectorEnv

    ticks, num_envs = actions.shape
    kwargs = {**PRESETS["machado"].ale_vector_kwargs(), "max_num_frames_per_episode": frames}
    venv = AtariVectorEnv("breakout", num_envs, autoreset_mode="NextStep", **kwargs)
    seeds = draw_seeds(num_envs, torch.Generator().manual_seed(seed))
    obs, _ = venv.reset(seed=np.asarray(seeds, dtype=np.int64))
    zeros = np.zeros(num_envs, dtype=bool)
    view, rows = (obs, np.zeros(num_envs), ~zeros, zeros, zeros), []
    for t in range(ticks):
        last = view[3] | view[4]
        action = torch.where(torch.as_tensor(last), 0, actions[t])
        layout = np.ascontiguousarray(view[0][:, 0].transpose(0, 3, 1, 2))  # (N, 1, H, W, 3) -> (N, 3, H, W)
        rows.append(
            {k: torch.as_tensor(np.asarray(v)) for k, v in zip(ROW_KEYS[:-1], (layout, *view[1:]), strict=True)}
        )
        rows[-1][keys.ACTION] = action
        obs, reward, terminated, truncated, _ = venv.step(action.numpy())
        view = (obs.copy(), reward, last, terminated, truncated)
    venv.close()
    return torch.stack([TensorDict(r, batch_size=[num_envs]) for r in rows])


@needs_ale
def test_ale_vector_rows_are_ale_py_s_frames_and_the_gymnasium_backends_rows(monkeypatch) -> None:
    """AleVectorEnv's stream equals the frames ale-py's vector env produces for the same episodes, and, with
    ALE's randomness off, the in-process and sync backends write the very same rows (resets included)."""
    from rl_lightning.envs import AleVectorEnv

    short_machado(monkeypatch)
    actions = breakout_actions(40, 2, 18)
    rows = collect(AleVectorEnv("Breakout", atari_preset="machado"), actions)
    assert rows[keys.OBS].dtype == torch.uint8
    assert tuple(rows[keys.OBS].shape) == (40, 2, 3, 64, 64)
    assert_rows_equal(rows, ale_stream(actions, 60), "AleVectorEnv vs ale-py")
    assert_episode_ends(rows, terminated=False)
    for core in (
        GymnasiumEnv("Breakout", atari_preset="machado"),
        GymnasiumVectorEnv("Breakout", atari_preset="machado"),
    ):
        assert_rows_equal(collect(core, actions), rows, f"{type(core).__name__} vs AleVectorEnv")


@needs_ale
def test_ale_vector_frame_stacks_restart_at_each_reset_row(monkeypatch) -> None:
    """A stacked preset (``baselines``: 4 gray frames) without ALE's randomness: AleVectorEnv's reset rows hold a
    stack of the new episode's first frame (ale-py pads it black), as the Gymnasium backends' stacks do."""
    from rl_lightning.envs import AleVectorEnv

    preset = dataclasses.replace(
        PRESETS["baselines"], max_episode_frames=60, noop_max=0, fire_reset=False, episodic_life=False
    )
    monkeypatch.setitem(PRESETS, "baselines", preset)
    actions = breakout_actions(40, 2, 4)
    rows = collect(AleVectorEnv("Breakout", atari_preset="baselines"), actions)
    assert tuple(rows[keys.OBS].shape) == (40, 2, 4, 84, 84)
    assert_episode_ends(rows, terminated=False)
    first = rows[keys.OBS][rows[keys.IS_FIRST]]
    assert bool((first == first[:, -1:]).all())  # every frame of a reset row's stack is its first frame
    assert_rows_equal(collect(GymnasiumEnv("Breakout", atari_preset="baselines"), actions), rows, "in-process vs ALE")


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("GymnasiumEnv", marks=needs_ale, id="in_process"),
        pytest.param("AleVectorEnv", marks=needs_ale, id="ale_vector"),
        pytest.param("EnvPoolEnv", marks=needs_envpool, id="envpool"),
    ],
)
def test_atari_life_loss_episodes_in_the_stream(backend: str) -> None:
    """``baselines`` training (a lost life ends the episode, the game goes on) in next-step mode, NOOP policy
    (GymnasiumVectorEnv runs the in-process backend's wrappers, so it is left out here):
    every lost life is a terminal row followed by a reset row of the next life, each life short (FIRE was pressed
    at it: Breakout's ball moves only after FIRE), five episodes per game, the fifth a game over."""
    import rl_lightning.envs as envs

    collector = SequenceCollector(BatchedEnv(getattr(envs, backend)("Breakout", atari_preset="baselines"), 1), seed=0)
    outs, step = [], collector.env.step
    collector.env.step = lambda action: outs.append(step(action)) or outs[-1]  # the env's own outputs, recorded
    noop = lambda view, gen: TensorDict({keys.ACTION: torch.zeros(1, dtype=torch.int64)}, batch_size=[1])  # noqa: E731
    rows = collector.rollout(noop, 450, policy_version=0)[:, 0]
    collector.close()
    ends = torch.nonzero(rows[keys.TERMINATED] | rows[keys.TRUNCATED])[:, 0]
    assert not bool(rows[keys.TRUNCATED].any())
    assert len(ends) >= 5, f"{backend}: {len(ends)} lives ended in 450 NOOP ticks: FIRE not pressed at a new life"
    assert bool(rows[keys.IS_FIRST][ends[ends < 449] + 1].all())
    first = rows[keys.OBS][rows[keys.IS_FIRST]]
    assert bool((first == first[:, -1:]).all()), f"{backend}: a reset row's stack holds frames of the last life"
    assert int(torch.diff(ends).max()) <= 150, f"{backend}: a life outlasted 150 NOOP ticks: FIRE not pressed"
    over = torch.nonzero(torch.stack([out[keys.GAME_OVER][0] for out in outs]))[:, 0] + 1  # row = step + 1
    assert len(over) >= 1, f"{backend}: no game over: the game restarts at each lost life"
    lives_lost = torch.searchsorted(ends, over, right=True)
    assert torch.equal(lives_lost, 5 * torch.arange(1, len(over) + 1)), f"{backend}: {lives_lost.tolist()}"


# ----- refusals ----------------------------------------------------------------------------------------------


class _NoSnapshotCartPole(CartPole):
    """A torch env that can neither snapshot nor reset on the next step."""

    can_snapshot = False


def test_an_env_that_can_neither_snapshot_nor_reset_next_step_is_one_line() -> None:
    from rl_lightning.errors import ConfigError

    with pytest.raises(ConfigError, match=r"data.env=_NoSnapshotCartPole: .*resets on the next step.*snapshot"):
        SequenceCollector(BatchedEnv(_NoSnapshotCartPole(), 2), seed=0)
    assert stepping(CartPole()) == "hold"


# ----- DreamerV3 fits on every backend ---------------------------------------------------------------------


def _backend(name: str):
    from rl_lightning import envs

    if name == "in_process":
        return GymnasiumEnv("CartPole-v1", {"max_episode_steps": 10})
    if name in ("sync", "async"):
        return GymnasiumVectorEnv("Pendulum-v1", {"max_episode_steps": 10}, mode=name)
    pytest.importorskip("envpool")
    return envs.EnvPoolEnv("HalfCheetah-v5", {"max_episode_steps": 10})


@pytest.mark.parametrize("name", ["in_process", "sync", "async", "envpool"])
def test_dreamer_fits_on_every_backend(tmp_path, name: str) -> None:
    """A few gradient steps of a tiny DreamerV3 on each Gymnasium backend, from replay rows written there
    (AleVectorEnv: ``test_cli_fit_of_the_atari_config_on_ale_vector_env``)."""
    from tests.helpers import tiny_dreamer, trainer

    model, datamodule = tiny_dreamer(_backend(name), total_env_steps=48, learning_starts=16)
    trainer(tmp_path).fit(model, datamodule)
    assert model.updates > 0
    assert datamodule.local_gradient_steps >= 2
    for key in ("train/loss_pred", "train/loss_dyn", "train/loss_policy", "train/loss_value"):
        assert math.isfinite(float(model.last_metrics[key])), key
    ring = datamodule.replay
    assert ring is not None
    assert len(ring) == 48  # every tick wrote one row per env: 24 ticks x 2 envs


CHECKPOINT = {"every_n_updates": 1000, "save_last": True}
TINY_CLI = {
    "model": {"init_args": {"size": "tiny", "horizon": 3, "bins": 15, "warmup_steps": 0}},
    "data": {
        "init_args": {
            "num_envs": 2, "rollout_length": 4, "total_env_steps": 48, "buffer_size": 128, "batch_size": 2,
            "sequence_length": 4, "replay_ratio": 0.25, "learning_starts": 16, "commit_stride": 2, "save_replay": True,
        }
    },
    "trainer": {
        "enable_progress_bar": False,
        "callbacks": [{"class_path": "rl_lightning.callbacks.RLCheckpoint", "init_args": CHECKPOINT}],
    },
}  # fmt: skip


def fit_cli(tmp_path, config: str, env: dict | None = None) -> dict:
    """``rl-lightning fit --config configs/<config>`` shrunk by ``TINY_CLI`` (``env`` replaces the config's env);
    returns the replay ring of the last checkpoint."""
    import yaml

    from tests.cli_subprocess import ROOT, run_cli

    tiny = {**TINY_CLI, "data": {"init_args": {**TINY_CLI["data"]["init_args"], **({"env": env} if env else {})}}}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny))
    args = ["fit", "--config", str(ROOT / "configs" / config), "--config", "tiny.yaml"]
    done = run_cli([*args, "--trainer.logger.init_args.save_dir", "runs"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (last,) = (tmp_path / "runs").rglob("last.ckpt")
    (ring,) = [rank["ring"] for rank in torch.load(last, weights_only=False)["DreamerDataModule"]["replay"]]
    return ring


@pytest.mark.slow  # the default suite's CLI fit of DreamerV3 on MuJoCo is test_backend_matrix_fits (dreamer, mujoco)
def test_cli_fit_on_mujoco_through_a_vector_backend(tmp_path) -> None:
    """DreamerV3 from the CLI on HalfCheetah-v5 stepped by Gymnasium's SyncVectorEnv: the ring holds its states."""
    env = {
        "class_path": "rl_lightning.envs.GymnasiumVectorEnv",
        "init_args": {"env_id": "HalfCheetah-v5", "env_kwargs": {"max_episode_steps": 10}},
    }
    ring = fit_cli(tmp_path, "dreamer.yaml", env)
    obs = ring["storage"]["obs"][: ring["size"]]
    assert tuple(obs.shape[-1:]) == (17,)
    assert bool(ring["storage"]["truncated"][: ring["size"]].any())
    assert len(torch.unique(obs.reshape(-1, 17), dim=0)) > 0.9 * obs.shape[0] * obs.shape[1]  # the env moved


@pytest.mark.slow  # default suite: test_cli's fit of dreamer_atari.yaml and test_backend_matrix_fits (dreamer, ale);
@needs_ale  # the ring's frames against ale-py's own: test_ale_vector_rows_are_ale_py_s_frames_...
def test_cli_fit_of_the_atari_config_on_ale_vector_env(tmp_path) -> None:
    """``configs/dreamer_atari.yaml`` as shipped (AleVectorEnv), shrunk: the ring holds frames the game produced,
    not one frame over and over (what stepping fresh env copies gave)."""
    ring = fit_cli(tmp_path, "dreamer_atari.yaml")
    frames = ring["storage"]["obs"][: ring["size"]]
    assert frames.dtype == torch.uint8
    rows = frames.reshape(-1, *frames.shape[2:])
    assert len(torch.unique(rows.reshape(len(rows), -1), dim=0)) >= len(rows) // 4
