"""``rl-lightning tune`` as a user runs it: a study of real fits, its database, table, best config and pruning."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from tests.cli_subprocess import run_cli

optuna = pytest.importorskip("optuna")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

# The heavy tier (whole tune studies): not in the default run; CI runs it as a step of its own.
pytestmark = pytest.mark.heavy

# Tiny budgets: 4 updates of 64 env steps, evaluated every 128 env steps on 2 episodes.
FAST = [
    "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16", "--data.init_args.total_env_steps", "512",
    "--model.init_args.update_epochs", "2",
]  # fmt: skip
EVAL = {"trainer": {"callbacks+": [{"class_path": "rl_lightning.callbacks.Evaluation",
                                     "init_args": {"every_n_env_steps": 128, "num_episodes": 2}}]}}  # fmt: skip


def _write(path: Path, data: dict) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _eval_curve(run_dir: Path) -> list[tuple[int, float]]:
    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    return [(e.step, e.value) for e in accumulator.Scalars("eval/episode_return")]


def test_tune_cli_end_to_end_pendulum_two_seeds(tmp_path):
    """Study db, table, per-seed TensorBoard runs whose eval/episode_return is the objective (mean over seeds of
    the last 2 evaluations), seeds applied (different seeds, different curves), and a best.yaml that fit runs."""
    search = _write(tmp_path / "search.yaml", {"model.init_args.lr": {"low": 1e-4, "high": 1e-2, "log": True}})
    ev = _write(tmp_path / "eval.yaml", EVAL)
    args = ["tune", "--config", "ppo_pendulum.yaml", "--config", ev, "--search", search, "--n_trials", "2",
            "--seeds_per_trial", "2", "--last_k", "2", "--pruner", "none", "--dir", "study", *FAST]  # fmt: skip
    result = run_cli(args, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    study_dir = tmp_path / "study"
    assert (study_dir / "study.db").is_file()
    header = next(line for line in result.stdout.splitlines() if line.startswith("trial "))
    assert "state" in header
    assert "model.init_args.lr" in header
    study = optuna.load_study(study_name="ppo_pendulum", storage=f"sqlite:///{study_dir / 'study.db'}")
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    for trial in trials:
        per_seed = []
        for seed in range(2):
            run = study_dir / f"trial_{trial.number:04d}" / f"seed_{seed}"
            assert yaml.safe_load((run / "config.yaml").read_text())["seed_everything"] == 1 + seed
            curve = _eval_curve(run)
            assert [s for s, _ in curve] == [128, 256, 384, 512]
            per_seed.append(sum(v for _, v in curve[-2:]) / 2)
        assert per_seed[0] != per_seed[1], "both seeds gave the same evaluations: seeds not applied"
        assert trial.value == pytest.approx(sum(per_seed) / 2, rel=1e-5)
        assert sorted(trial.intermediate_values) == [128, 256, 384, 512]
    best = max(trials, key=lambda t: t.value)
    best_config = yaml.safe_load((study_dir / "best.yaml").read_text())
    assert best_config["model"]["init_args"]["lr"] == pytest.approx(best.params["model.init_args.lr"])
    fit = run_cli(["fit", "--config", str(study_dir / "best.yaml"), "--trainer.logger.init_args.save_dir", "again"],
                  cwd=tmp_path, timeout=300)  # fmt: skip
    assert fit.returncode == 0, fit.stderr[-3000:]
    assert math.isfinite(_eval_curve(next((tmp_path / "again").rglob("events.out.*")).parent)[-1][1])


def test_median_pruner_stops_a_bad_trial_of_another_rollout_size_before_its_budget(tmp_path):
    """A good enqueued trial (4 envs: 64 env steps per update), then one with 9 envs (144 per update, so it never
    evaluates at a good trial's env step before 1152) whose episodes are cut at 5 steps (returns <= 5, where any
    CartPole policy lasts ~8 or more): both report at env steps rounded down to the evaluation cadence, so the median
    pruner compares them, prunes the bad one, and its fit stops early. The study is opened as ``tune`` opens it."""
    from rl_lightning.tune.study import make_pruner, open_study

    envs, steps_key = "data.init_args.num_envs", "data.init_args.env.init_args.max_episode_steps"
    search = _write(tmp_path / "search.yaml", {envs: {"low": 4, "high": 9}, steps_key: {"low": 5, "high": 500}})
    ev = _write(tmp_path / "eval.yaml", EVAL)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = open_study(storage, "prune", make_pruner("median", 1, 0), None, 10)
    for params in ({envs: 4, steps_key: 500}, {envs: 9, steps_key: 5}):
        study.enqueue_trial(params)
    budget = ["--data.init_args.total_env_steps", "1024", "--model.init_args.update_epochs", "4"]
    args = ["tune", "--config", "ppo.yaml", "--config", ev, "--search", search, "--n_trials", "2",
            "--storage", storage, "--study_name", "prune", "--dir", "study", "--pruner_startup_trials", "1",
            *FAST, *budget]  # fmt: skip
    result = run_cli(args, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    trials = optuna.load_study(study_name="prune", storage=storage).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED"], result.stdout[-2000:]
    assert set(trials[1].intermediate_values) <= set(trials[0].intermediate_values)  # steps both trials share
    steps = [s for s, _ in _eval_curve(tmp_path / "study" / "trial_0001" / "seed_0")]
    assert steps[0] == 144
    assert max(steps) < 1152, f"the pruned fit went on to {steps}"


def test_a_failed_fit_fails_its_trial_only_and_best_yaml_is_the_best_trial_not_the_last(tmp_path):
    """Three enqueued trials: an activation only the model's constructor refuses (its fit fails: the trial is told
    FAIL with the fit's error and the study goes on), a good one, then a worse one (episodes cut at 5 steps), so
    best.yaml must come from the middle trial."""
    act, steps_key = "model.init_args.activation", "data.init_args.env.init_args.max_episode_steps"
    search = _write(tmp_path / "search.yaml", {act: {"choices": ["tanh", "nonsense"]}, steps_key: {"low": 5,
                                                                                                    "high": 500}})
    ev = _write(tmp_path / "eval.yaml", EVAL)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="ppo", storage=storage, direction="maximize")
    for params in ({act: "nonsense", steps_key: 500}, {act: "tanh", steps_key: 500}, {act: "tanh", steps_key: 5}):
        study.enqueue_trial(params)
    args = ["tune", "--config", "ppo.yaml", "--config", ev, "--search", search, "--n_trials", "3", "--storage",
            storage, "--dir", "study", "--pruner", "none", "--heartbeat", "1", *FAST,
            "--data.init_args.total_env_steps", "256"]  # fmt: skip
    result = run_cli(args, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    trials = optuna.load_study(study_name="ppo", storage=storage).get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"], result.stdout[-2000:]
    assert "activation='nonsense'" in trials[0].user_attrs["fit_failed"]
    assert "trial 0 failed" in result.stdout
    assert trials[1].value > trials[2].value  # the last trial is not the best
    best = yaml.safe_load((tmp_path / "study" / "best.yaml").read_text())
    assert best["data"]["init_args"]["env"]["init_args"]["max_episode_steps"] == 500
    assert best["model"]["init_args"]["activation"] == "tanh"
