"""``Evaluation(background=true)``: episodes played on a frozen copy of the policy in the learner's waits for its
actors, exactly the foreground's for the same weights, logged at the env step they were taken at; stop requests and
errors reach the learner; refusals; a fit through the CLI with an actor process."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

import rl_lightning.callbacks.evaluation as evaluation_module
from rl_lightning.algos import PPO
from rl_lightning.callbacks import Evaluation, background_run
from rl_lightning.callbacks.background_run import plays_beside_training
from rl_lightning.envs import CartPole
from rl_lightning.errors import ConfigError
from rl_lightning.processes import stop
from tests.cli_subprocess import run_cli
from tests.test_evaluation_baseline import RaisingCartPole
from tests.test_game_evaluation import _scalars


def _stub_trainer(num_actors: int = 1) -> SimpleNamespace:
    """What Evaluation reads of a fitting trainer to play, log and decide: one rank, no logger, the monitors' dict.
    ``training`` is False so the foreground ``evaluate`` skips ``LightningModule.log_dict`` (no real trainer)."""
    return SimpleNamespace(
        global_rank=0,
        is_global_zero=True,
        world_size=1,
        sanity_checking=False,
        training=False,
        state=SimpleNamespace(fn="fit"),
        strategy=SimpleNamespace(reduce=lambda value, reduce_op: value),
        loggers=[],
        callback_metrics={},
        datamodule=SimpleNamespace(num_actors=num_actors),
    )


def _balancing_ppo() -> PPO:
    """A PPO whose deterministic policy pushes the cart toward the pole's fall (angle + angular velocity), seen
    through an observation normaliser with non-trivial statistics: both the weights and the buffers decide it."""
    module = PPO(env_spec=CartPole().spec, hidden_sizes=(8,), normalize_obs=True, update_epochs=1, num_minibatches=1)
    first, last = module.actor[0], module.actor[-1]
    with torch.no_grad():
        for layer in (first, last):
            layer.weight.zero_()
            layer.bias.zero_()
        first.weight[0, 2] = first.weight[0, 3] = 0.5
        last.weight[0, 0], last.weight[1, 0] = -1.0, 1.0
        module.obs_normalizer.rms.mean.copy_(torch.tensor([0.0, 0.0, 0.1, 0.0], dtype=torch.float64))
        module.obs_normalizer.rms.var.copy_(torch.tensor([1.0, 1.0, 0.01, 1.0], dtype=torch.float64))
    module.updates = 3
    return module


@pytest.fixture
def module(monkeypatch) -> PPO:
    monkeypatch.setattr(PPO, "env_steps", property(lambda self: 40))
    return _balancing_ppo()


@pytest.fixture
def played(monkeypatch) -> list[tuple[str, object]]:
    """Every ``play_episodes`` the callback calls, with the thread that played it."""
    calls: list[tuple[str, object]] = []
    real = evaluation_module.play_episodes

    def recording(*args, **kwargs):
        episodes = real(*args, **kwargs)
        calls.append((threading.current_thread().name, episodes))
        return episodes

    monkeypatch.setattr(evaluation_module, "play_episodes", recording)
    return calls


def _evaluation(background: bool, deterministic: bool = True, env=None) -> Evaluation:
    return Evaluation(every_n_env_steps=32, num_episodes=6, deterministic=deterministic, env=env or CartPole(),
                      seed=3, max_steps=1_000, background=background)  # fmt: skip


def _background_record(callback: Evaluation, trainer: SimpleNamespace, module: PPO) -> dict[str, float]:
    callback._start_background(trainer, module)
    callback._log_pending(trainer, module)
    return callback.history[-1]


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_background_evaluation_plays_exactly_the_foregrounds_episodes(module, played, deterministic) -> None:
    trainer = _stub_trainer()
    foreground = _evaluation(False, deterministic).evaluate(trainer, module)
    background = _background_record(_evaluation(True, deterministic), trainer, module)
    assert background == foreground  # every eval/* value, and the env step and update it stands for
    assert (background["env_steps"], background["updates"]) == (40, 3)
    assert float(trainer.callback_metrics["eval/episode_return"]) == foreground["eval/episode_return"]
    (_, fg_random), (_, fg_policy), (bg_thread, bg_random), (_, bg_policy) = played
    assert bg_thread == "background-evaluation"
    for fg, bg in ((fg_random, bg_random), (fg_policy, bg_policy)):
        for field in ("returns", "lengths", "finished"):
            assert torch.equal(getattr(fg, field), getattr(bg, field)), field
    assert fg_policy.lengths.max() > 50  # the policy, not a fall after a few steps, decides these episodes


def test_the_copy_is_frozen_when_taken_and_plays_only_while_the_learner_waits(module) -> None:
    trainer = _stub_trainer()
    as_due = _evaluation(False).evaluate(trainer, module)
    callback = _evaluation(True)
    callback._start_background(trainer, module)
    time.sleep(0.3)
    assert not callback._pending.done()  # the learner is busy (not waiting for actors): not one env step
    with torch.no_grad():  # an update lands meanwhile: the live policy now always pushes left, with other statistics
        module.actor[-1].bias.copy_(torch.tensor([50.0, -50.0]))
        module.obs_normalizer.rms.mean.fill_(3.0)
    module.updates = 4
    changed = _evaluation(False).evaluate(trainer, module)
    assert changed["eval/episode_return"] < as_due["eval/episode_return"] / 5  # the change shows in the episodes
    callback._log_pending(trainer, module)
    assert callback.history[-1] == as_due
    assert callback.last_updates == 4  # the update whose end it reached the monitors at (EarlyStopping checks then)


def test_a_stop_request_and_an_error_in_the_background_reach_the_learner(module, monkeypatch) -> None:
    trainer = _stub_trainer()
    broken = _evaluation(True, env=RaisingCartPole())
    broken._start_background(trainer, module)
    with pytest.raises(RuntimeError, match="simulator crashed"):
        broken._log_pending(trainer, module)
    callback = _evaluation(True)
    callback._start_background(trainer, module)
    monkeypatch.setattr(stop, "_requested", signal.SIGTERM)
    start = time.perf_counter()
    with pytest.raises(stop.Interrupted):
        callback._log_pending(trainer, module)
    assert time.perf_counter() - start < 2.0
    assert callback.state_dict()["cadence"]["last_seen"] == 31  # the checkpoint of the stop replays it on resume
    pending = _evaluation(True)
    pending._start_background(trainer, module)
    pending.teardown(trainer, module, "fit")  # the run ended without waiting: the thread stops at its next step
    assert pending._pending is None


def test_a_checkpoint_saved_while_it_plays_replays_it_after_resume(module) -> None:
    trainer = _stub_trainer()
    callback = _evaluation(True)
    assert callback.should_evaluate(module)  # 0 -> 40 crossed 32
    callback._start_background(trainer, module)
    saved = callback.state_dict()
    callback._log_pending(trainer, module)
    for state, replays in ((saved, True), (callback.state_dict(), False)):
        resumed = _evaluation(True)
        resumed.load_state_dict(state)
        assert resumed.should_evaluate(SimpleNamespace(env_steps=48, updates=4)) is replays


def test_bad_combinations_are_refused_in_one_line_and_a_serial_fit_plays_in_the_foreground(module, monkeypatch) -> None:
    for settings, field in (({"record_video": 1}, "record_video=1"), ({"compile": True}, "compile=true")):
        with pytest.raises(ConfigError, match=field) as info:
            Evaluation(every_n_updates=1, num_episodes=2, background=True, **settings)
        assert "\n" not in str(info.value)
        assert "background" in str(info.value)
    for num_actors, world_size, beside in ((1, 1, True), (0, 1, False), (1, 2, False)):
        assert plays_beside_training("Evaluation", SimpleNamespace(num_actors=num_actors), world_size) is beside
    notices: list[str] = []
    monkeypatch.setattr(background_run, "rank_zero_info", notices.append)
    callback = _evaluation(True)
    callback.setup(_stub_trainer(num_actors=0), module, "fit")
    assert not callback._in_background
    assert notices == ["Evaluation: background=true, but with data.num_actors=0 the learner never waits for actors: "
                       "evaluations play in the foreground"]  # fmt: skip
    callback.setup(_stub_trainer(num_actors=1), module, "fit")
    assert callback._in_background
    callback.setup(_stub_trainer(num_actors=1), module, "validate")
    assert not callback._in_background  # validate/test play in the foreground


def test_a_fit_with_an_actor_logs_each_evaluation_at_the_env_step_it_was_taken_at(tmp_path: Path) -> None:
    evaluation = {
        "class_path": "rl_lightning.callbacks.Evaluation",
        "init_args": {"every_n_env_steps": 512, "num_episodes": 4, "background": True},
    }
    best = {
        "class_path": "rl_lightning.callbacks.RLCheckpoint",
        "init_args": {"every_n_env_steps": 512, "monitor": "eval/episode_return", "mode": "max", "save_top_k": 1},
    }
    fragment = tmp_path / "eval.yaml"
    stopping = {"class_path": "rl_lightning.callbacks.EarlyStopping", "init_args": {"patience": 100}}  # strict monitor
    fragment.write_text(yaml.safe_dump({"trainer": {"callbacks": [evaluation, stopping, best]}}))
    args = ["fit", "--config", "ppo.yaml", "--config", str(fragment), "--data.init_args.num_actors", "1",
            "--data.init_args.total_env_steps", "1280", "--trainer.enable_progress_bar", "false"]  # fmt: skip
    result = run_cli(args, tmp_path)  # 5 updates of 256 env steps, one actor process
    assert result.returncode == 0, result.stderr[-3000:]
    assert "play in the foreground" not in result.stdout + result.stderr
    logged = _scalars(tmp_path / "runs" / "ppo_cartpole" / "version_0")
    # What the foreground logs: the cadence points 512 and 1024, then the last update (1280), once each.
    for key in ("eval/episode_return", "eval/episode_length", "eval/margin_over_random"):
        assert [step for step, _ in logged[key]] == [512, 1024, 1280], key
    checkpoints = {path.name for path in (tmp_path / "runs" / "ppo_cartpole" / "version_0" / "checkpoints").iterdir()}
    assert "last.ckpt" in checkpoints, checkpoints
    assert len(checkpoints) == 2, checkpoints  # and the best one, ranked by a value that arrived
