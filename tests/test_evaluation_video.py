"""Evaluation videos: the torch envs' rgb renderers, frames in TensorBoard at the evaluation's env step, the extra."""

from __future__ import annotations

import io
import math

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rl_lightning.callbacks import Evaluation
from rl_lightning.envs import CartPole, Catch, GymnasiumEnv, GymnasiumVectorEnv, Pendulum
from rl_lightning.errors import ConfigError
from rl_lightning.evaluation import video
from rl_lightning.evaluation.episodes import run_episodes
from rl_lightning.evaluation.video import FrameRecorder
from tests.cli_subprocess import error_line, run_cli, snapshot
from tests.helpers import tiny_ppo, trainer

POLE = torch.tensor([202, 152, 101], dtype=torch.uint8)
ROD = torch.tensor([204, 77, 77], dtype=torch.uint8)


def _state(env, physics: list[list[float]]):
    state = env.reset_state(len(physics), torch.Generator().manual_seed(0))
    state["physics"] = torch.tensor(physics, dtype=state["physics"].dtype)
    return state


def _mean_xy(frame: torch.Tensor, colour: torch.Tensor) -> tuple[float, float]:
    """Mean (column, row) of the pixels of ``colour`` in an ``[H, W, 3]`` frame (rows count down)."""
    rows, cols = (frame == colour).all(-1).nonzero(as_tuple=True)
    assert len(rows) > 0, "nothing of that colour was drawn"
    return cols.float().mean().item(), rows.float().mean().item()


@pytest.mark.parametrize("env", [CartPole(), Pendulum(), Catch(size=16)], ids=lambda e: e.spec.name)
def test_renderers_draw_uint8_rgb_frames_per_row(env):
    state = env.reset_state(3, torch.Generator().manual_seed(1))
    frames = env.render_rgb(state)
    assert env.renders_rgb
    assert frames.dtype == torch.uint8
    assert frames.ndim == 4
    assert frames.shape[0] == 3
    assert frames.shape[-1] == 3
    assert frames.shape[1] >= 64
    assert frames.shape[2] >= 64
    assert frames.min() < 128 < frames.max()  # something is drawn on the background


def test_cartpole_cart_moves_with_x_and_pole_leans_with_theta():
    env = CartPole()
    frames = env.render_rgb(_state(env, [[0.0, 0, -0.15, 0], [0.0, 0, 0.0, 0], [0.0, 0, 0.15, 0], [1.0, 0, 0.0, 0]]))
    assert all(not torch.equal(frames[i], frames[j]) for i in range(4) for j in range(i))
    left, upright, right = (_mean_xy(frames[i], POLE)[0] for i in range(3))
    assert left < upright - 2
    assert right > upright + 2
    assert upright == pytest.approx(env.render_width / 2, abs=1.0)  # x = 0 is the middle of the screen
    moved, _ = _mean_xy(frames[3], POLE)
    assert moved == pytest.approx(upright + env.render_width / 4.8, abs=1.0)  # 1 m right: screen spans 4.8 m


def test_pendulum_rod_points_up_at_zero_and_turns_counter_clockwise():
    env = Pendulum()
    frames = env.render_rgb(_state(env, [[0.0, 0.0], [math.pi / 2, 0.0], [math.pi, 0.0]]))
    centre = env.render_size / 2
    up, side, down = (_mean_xy(frames[i], ROD) for i in range(3))
    assert up[1] < centre - 10
    assert abs(up[0] - centre) < 2
    assert side[0] < centre - 10
    assert abs(side[1] - centre) < 2
    assert down[1] > centre + 10


def test_catch_frames_are_the_observation_upscaled():
    env = Catch(size=16)
    state = env.reset_state(2, torch.Generator().manual_seed(3))
    obs = env.observe(state)["obs"][:, 0]  # [B, 16, 16]
    frames = env.render_rgb(state)
    assert frames.shape == (2, 128, 128, 3)
    assert torch.equal(frames[:, ::8, ::8, 0], obs)
    assert torch.equal(frames[..., 0], frames[..., 2])


def test_recorder_keeps_each_recorded_episodes_frames_and_holds_the_last():
    env = Catch(rows=8, size=16)  # every episode lasts rows - 1 = 7 steps
    recorder = FrameRecorder(env, rows=2)
    _, lengths = run_episodes("random", env, 3, torch.device("cpu"), seed=0, max_steps=40, recorder=recorder)
    clip = recorder.video(lengths)
    assert clip.shape == (2, 7, 3, 128, 128)
    assert clip.dtype == torch.uint8
    ball_rows = [_mean_xy(clip[0, t].permute(1, 2, 0), torch.tensor([255, 255, 255], dtype=torch.uint8))[1]
                 for t in range(7)]  # fmt: skip
    assert ball_rows == sorted(ball_rows)  # the ball falls over the episode's frames
    short = FrameRecorder(env, rows=2)
    short.frames = [torch.full((2, 4, 4, 3), t, dtype=torch.uint8) for t in range(5)]
    held = short.video(torch.tensor([5.0, 2.0]))
    assert held[0, :, 0, 0, 0].tolist() == [0, 1, 2, 3, 4]
    assert held[1, :, 0, 0, 0].tolist() == [0, 1, 1, 1, 1]  # a finished episode holds its last frame


def _videos(log_dir) -> list:
    accumulator = EventAccumulator(str(log_dir), size_guidance={"images": 0})
    accumulator.Reload()
    assert "eval/video" in accumulator.Tags()["images"]
    return accumulator.Images("eval/video")


def _fit_with_video(tmp_path, env, num_episodes: int = 2):
    pl.seed_everything(0)
    module, dm = tiny_ppo(env=env, total_env_steps=64 * 2)
    evaluation = Evaluation(every_n_updates=1, num_episodes=num_episodes, record_video=1, max_steps=40)
    logger = TensorBoardLogger(str(tmp_path), name="run")
    trainer(tmp_path, callbacks=[evaluation], logger=logger).fit(module, dm)
    return evaluation, _videos(logger.log_dir)


def _gif_frames(event) -> tuple[int, tuple[int, int]]:
    from PIL import Image

    image = Image.open(io.BytesIO(event.encoded_image_string))
    assert image.format == "GIF"
    return image.n_frames, image.size


@pytest.mark.parametrize(
    ("make_env", "size", "gymnasium"),
    [
        pytest.param(lambda: CartPole(max_episode_steps=10), (240, 160), False, id="torch-CartPole"),
        pytest.param(lambda: GymnasiumEnv("CartPole-v1", {"max_episode_steps": 10}), (600, 400), True, id="in-process"),
        pytest.param(
            lambda: GymnasiumVectorEnv("CartPole-v1", {"max_episode_steps": 10}), (600, 400), True, id="vector-sync"
        ),
    ],
)
def test_fit_writes_one_video_per_evaluation_at_its_env_step(tmp_path, make_env, size, gymnasium):
    pytest.importorskip("moviepy.editor", reason="needs the [video] extra")
    if gymnasium:
        pytest.importorskip("pygame", reason="Gymnasium's CartPole renders with pygame (in the [video] extra)")
    evaluation, videos = _fit_with_video(tmp_path, make_env())
    assert [v.step for v in videos] == [h["env_steps"] for h in evaluation.history] == [64, 128]
    for event in videos:
        frames, frame_size = _gif_frames(event)
        assert 1 < frames <= 10  # one frame per step of the recorded episode (max_episode_steps=10)
        assert frame_size == size  # one recorded episode: the GIF is that episode's frames, not a grid


def test_missing_extra_is_one_line_naming_the_extra(monkeypatch):
    real = video.importlib.util.find_spec
    monkeypatch.setattr(video.importlib.util, "find_spec", lambda name, *a: None if "moviepy" in name else real(name))
    with pytest.raises(ConfigError, match=r'record_video=1.*moviepy.*pip install -e "\.\[video\]"'):
        Evaluation(every_n_updates=1, num_episodes=2, record_video=1)
    Evaluation(every_n_updates=1, num_episodes=2)  # no video asked for: no check


@pytest.mark.parametrize("bad", [{"record_video": 3}, {"record_video": -1}, {"video_fps": 0}])
def test_bad_video_options_are_refused(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        Evaluation(every_n_updates=1, num_episodes=2, **bad)


def test_cli_record_video_without_the_extra_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['moviepy'] = None  # as if not installed\n")
    monkeypatch.setenv("PYTHONPATH", str(hide))
    config = tmp_path / "video.yaml"
    config.write_text(
        "trainer:\n  callbacks+:\n    - class_path: rl_lightning.callbacks.Evaluation\n"
        "      init_args: {every_n_updates: 1, num_episodes: 2, record_video: 1}\n"
    )
    before = snapshot(tmp_path)
    line = error_line(run_cli(["fit", "--config", "ppo", "--config", str(config)], tmp_path))
    assert "record_video=1" in line
    assert 'pip install -e ".[video]"' in line
    assert snapshot(tmp_path) == before
