"""Logged curves as TensorBoard's UI loads them: one eval point per evaluation, every curve against env steps."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
from tensorboard.util import tensor_util

from rl_lightning.callbacks import Evaluation
from tests.helpers import tiny_ppo, trainer


def _curves(log_dir) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` of the one run under ``log_dir``, read by the multiplexer the UI uses."""
    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(log_dir))
    mux.Reload()
    runs = mux.PluginRunToTagToContent("scalars")
    assert len(runs) == 1
    run, tags = next(iter(runs.items()))
    return {
        tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in mux.Tensors(run, tag)] for tag in tags
    }


def test_one_eval_point_per_evaluation_at_its_env_step_and_every_curve_monotonic(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=64 * 7)  # 7 updates of 64 env steps
    evaluation = Evaluation(every_n_updates=2, num_episodes=2)  # after updates 2, 4, 6, and at the end (7)
    logger = TensorBoardLogger(str(tmp_path), name="run")
    trainer(tmp_path, callbacks=[evaluation], logger=logger).fit(module, dm)
    assert [h["updates"] for h in evaluation.history] == [2, 4, 6, 7]
    curves = _curves(tmp_path)
    for tag in ("eval/episode_return", "eval/episode_length", "eval/margin_over_random"):
        points = curves[tag]
        assert [step for step, _ in points] == [h["env_steps"] for h in evaluation.history], tag
        assert [value for _, value in points] == [h[tag] for h in evaluation.history], tag
    update_steps = {64 * k for k in range(1, 8)}
    assert [step for step, _ in curves["train/loss"]] == sorted(update_steps)
    for tag, points in curves.items():
        steps = [step for step, _ in points]
        assert steps == sorted(set(steps)), f"{tag}: steps {steps} go back or repeat"
        if tag != "hp_metric":  # Lightning's hyper-parameter placeholder, written once at step 0
            assert set(steps) <= update_steps, f"{tag}: steps {steps} are not env steps of an update"
