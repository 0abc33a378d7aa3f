"""``GameEvaluation(background=true)``: games played in the learner's waits for its actors, on the policy as it was
when the evaluation fell due, logged at that env step; the gate they pass; refusals; a fit through the CLI."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from rl_lightning.algos import PPO
from rl_lightning.callbacks import GameEvaluation
from rl_lightning.callbacks.background_run import BackgroundRun
from rl_lightning.data.league import frozen_copy
from rl_lightning.errors import ConfigError
from rl_lightning.processes.learner_waits import learner_waiting, pause_point
from tests.cli_subprocess import run_cli
from tests.game_match_toys import HighCard
from tests.test_game_evaluation import MIN_BOT, _config, _scalars


def _wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_background_work_advances_only_while_the_learner_waits() -> None:
    steps: list[int] = []

    def play() -> dict[str, float]:
        for step in range(5):
            pause_point()
            steps.append(step)
        return {"steps": float(len(steps))}

    run = BackgroundRun(play, env_steps=7, updates=1)
    time.sleep(0.3)
    assert steps == []  # the learner is busy: not one step
    assert not run.done()
    with learner_waiting():
        assert _wait_until(run.done)
    assert run.wait() == {"steps": 5.0}
    assert (run.env_steps, run.updates) == (7, 1)
    pause_point()  # in the learner's own thread: returns at once


def test_abandoned_work_stops_at_its_next_step_and_errors_reach_the_learner() -> None:
    def endless() -> dict[str, float]:
        while True:
            pause_point()

    forever = BackgroundRun(endless, env_steps=0, updates=0)
    with learner_waiting():
        time.sleep(0.05)  # it is running now
    forever.abandon()
    assert forever.done()

    def fails() -> dict[str, float]:
        pause_point()
        raise ValueError("the bot broke")

    broken = BackgroundRun(fails, env_steps=0, updates=0)
    with pytest.raises(ValueError, match="the bot broke"):
        broken.wait()


def _stub_trainer() -> SimpleNamespace:
    """What GameEvaluation reads of a trainer to play and log: no logger, the monitors' metrics dict."""
    return SimpleNamespace(loggers=[], callback_metrics={}, datamodule=None)


def _evaluation(env: HighCard) -> GameEvaluation:
    return GameEvaluation(every_n_env_steps=32, opponents=["random", MIN_BOT], num_games=200, rating_games=0,
                          env=env, deterministic=True, background=True)  # fmt: skip


def test_it_plays_the_policy_as_it_was_when_due_while_training_changes_it(monkeypatch) -> None:
    env = HighCard(seats=2, seat_bonus=0.0)
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=1)
    monkeypatch.setattr(PPO, "env_steps", property(lambda self: 40))
    callback, trainer = _evaluation(env), _stub_trainer()
    as_due = callback.measure(trainer, frozen_copy(module))
    callback._start_background(trainer, module)
    with torch.no_grad():  # an update lands meanwhile: the live policy now always plays 0 (the lowest score)
        module.actor[-1].weight.zero_()
        module.actor[-1].bias.copy_(torch.tensor([50.0, -50.0, -50.0]))
    changed = callback.measure(trainer, module)
    assert changed["eval/vs_random/win_rate"] != as_due["eval/vs_random/win_rate"]  # the change shows in the games
    callback._log_pending(trainer)
    record = callback.history[-1]
    assert record["env_steps"] == 40
    for key, value in as_due.items():
        assert record[key] == pytest.approx(value, nan_ok=True), key
        assert float(trainer.callback_metrics[key]) == pytest.approx(value, nan_ok=True), key


def test_a_checkpoint_saved_while_it_plays_replays_it_after_resume(monkeypatch) -> None:
    env = HighCard(seats=2, seat_bonus=0.0)
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=1)
    monkeypatch.setattr(PPO, "env_steps", property(lambda self: 40))
    callback, trainer = _evaluation(env), _stub_trainer()
    assert callback.should_evaluate(module)  # 0 -> 40 crossed 32
    callback._start_background(trainer, module)  # still playing: the learner has not waited yet
    saved = callback.state_dict()
    callback._log_pending(trainer)
    done = callback.state_dict()
    for state, replays in ((saved, True), (done, False)):
        resumed = _evaluation(env)
        resumed.load_state_dict(state)
        assert resumed.should_evaluate(SimpleNamespace(env_steps=48, updates=2)) is replays


def test_exploitability_is_refused_and_serial_or_ddp_fits_play_in_the_foreground() -> None:
    with pytest.raises(ConfigError, match="exploitability is one pass"):
        GameEvaluation(every_n_updates=1, exploitability=True, background=True)
    callback = GameEvaluation(every_n_updates=1, background=True)
    assert callback._plays_in_background(SimpleNamespace(num_actors=1), 1)
    assert not callback._plays_in_background(SimpleNamespace(num_actors=0), 1)
    assert not callback._plays_in_background(SimpleNamespace(num_actors=1), 2)


def test_the_shipped_hearts_config_evaluates_beside_its_actor_at_each_env_step(tmp_path: Path) -> None:
    pytest.importorskip("pyspiel")
    evaluation = {"class_path": "rl_lightning.callbacks.GameEvaluation",
                  "init_args": {"every_n_env_steps": 256, "opponents": ["random", "heuristic"], "num_games": 8,
                                "rating_games": 0, "background": True}}  # fmt: skip
    fragment = tmp_path / "eval.yaml"
    fragment.write_text(yaml.safe_dump({"trainer": {"callbacks": [evaluation]}}))
    args = ["fit", "--config", "ppo_hearts.yaml", "--config", str(fragment), "--data.init_args.num_envs", "8",
            "--data.init_args.num_steps", "32", "--data.init_args.total_env_steps", "768",
            "--trainer.logger.init_args.save_dir", "runs", "--trainer.enable_progress_bar", "false"]  # fmt: skip
    result = run_cli(args, tmp_path)  # the shipped config: one actor process, an OpenSpiel game, league and bots
    assert result.returncode == 0, result.stderr[-3000:]
    logged = _scalars(tmp_path / "runs" / "ppo_hearts" / "version_0")
    for name in ("random", "heuristic"):
        assert sorted(step for step, _ in logged[f"eval/vs_{name}/points_per_hand"]) == [256, 512, 768], name


def test_a_serial_fit_plays_them_in_the_foreground_and_says_so(tmp_path: Path) -> None:
    config = _config(tmp_path / "fit.yaml", "serial", background=True)
    args = ["fit", "--config", "ppo", "--config", config, "--data.init_args.total_env_steps", "128"]
    serial = run_cli(args, tmp_path)
    assert serial.returncode == 0, serial.stderr[-3000:]
    assert "evaluations play in the foreground" in serial.stdout + serial.stderr
    logged = _scalars(tmp_path / "runs" / "serial" / "version_0")
    assert [step for step, _ in logged["eval/vs_random/win_rate"]] == [32, 64, 96, 128]


def test_the_actor_pools_waits_are_the_ones_that_let_it_run() -> None:
    from rl_lightning.data.actors import ActorPool, PoolSettings
    from rl_lightning.envs import CartPole

    env = CartPole()
    module = PPO(env_spec=env.spec, hidden_sizes=(16,))
    pool = ActorPool(PoolSettings(1, 4, 64, 1, 3, 60.0, 100), env, module.policy_factory(), module.state_dict())
    steps: list[int] = []

    def count() -> dict[str, float]:
        while True:
            pause_point()
            steps.append(1)
            time.sleep(0.001)

    run = BackgroundRun(count, env_steps=0, updates=0)
    try:
        time.sleep(0.2)
        assert steps == []  # busy learner (not waiting): nothing
        pool.publish(module.state_dict(), 0)
        for _ in range(3):  # the first waits out the actor's start-up: the learner waits for seconds
            pool.next_rollout(0)
        waited = len(steps)
        time.sleep(0.2)
        assert waited > 0
        assert len(steps) <= waited + 1  # back from the pool: it stops at its next step
    finally:
        run.abandon()
        pool.close()
