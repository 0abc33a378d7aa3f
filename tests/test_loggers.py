"""CSV and MLflow loggers get the same scalars at the same env steps as TensorBoard, read back from their files."""

from __future__ import annotations

import csv
import math

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.cli_subprocess import error_line, run_cli, snapshot

mlflow = pytest.importorskip("mlflow")

FAST = [
    "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16", "--data.init_args.total_env_steps", "320",
    "--model.init_args.update_epochs", "2",
]  # fmt: skip
LOGGERS = {
    "trainer": {
        "logger": [
            {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "tb", "name": "r"}},
            {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "csv", "name": "r"}},
            {"class_path": "lightning.pytorch.loggers.MLFlowLogger",
             "init_args": {"experiment_name": "rl", "tracking_uri": "file:./mlruns"}},
        ],
        "callbacks+": [{"class_path": "rl_lightning.callbacks.Evaluation",
                        "init_args": {"every_n_env_steps": 128, "num_episodes": 2}}],
    }
}  # fmt: skip


def _tensorboard(root) -> dict[str, list[tuple[int, float]]]:
    accumulator = EventAccumulator(str(next(root.rglob("events.out.*")).parent))
    accumulator.Reload()
    tags = [t for t in accumulator.Tags()["scalars"] if t != "hp_metric"]  # Lightning's placeholder, step 0
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in tags}


def _csv(root) -> dict[str, list[tuple[int, float]]]:
    with next(root.rglob("metrics.csv")).open() as file:
        rows = list(csv.DictReader(file))
    curves: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and value != "":
                curves.setdefault(key, []).append((int(row["step"]), float(value)))
    return curves


def _mlflow(uri: str) -> dict[str, list[tuple[int, float]]]:
    client = mlflow.tracking.MlflowClient(uri)
    experiment = client.get_experiment_by_name("rl")
    (run,) = client.search_runs([experiment.experiment_id])
    return {
        key: [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
        for key in run.data.metrics
    }


def _same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    return [s for s, _ in a] == [s for s, _ in b] and all(
        math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6) for (_, x), (_, y) in zip(a, b)
    )


def test_csv_and_mlflow_match_tensorboard_keys_steps_and_values(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    (tmp_path / "loggers.yaml").write_text(yaml.safe_dump(LOGGERS))
    result = run_cli(["fit", "--config", "ppo.yaml", "--config", "loggers.yaml", *FAST], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    board = _tensorboard(tmp_path / "tb")
    assert {"train/loss", "eval/episode_return", "rollout/episode_return", "perf/env_sps"} <= set(board)
    assert [s for s, _ in board["train/loss"]] == [64, 128, 192, 256, 320]
    assert [s for s, _ in board["eval/episode_return"]] == [128, 256, 320]
    for name, curves in (("csv", _csv(tmp_path / "csv")), ("mlflow", _mlflow(f"file:{tmp_path / 'mlruns'}"))):
        assert set(curves) == set(board), (name, set(curves) ^ set(board))
        for key in board:
            assert _same(sorted(curves[key]), board[key]), (name, key, curves[key], board[key])


def test_mlflow_file_store_without_the_opt_in_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    from mlflow import environment_variables

    if getattr(environment_variables, "MLFLOW_ALLOW_FILE_STORE", None) is None:
        pytest.skip("this MLflow still accepts file stores without the opt-in")
    before = snapshot(tmp_path)
    args = ["fit", "--config", "ppo.yaml", "--trainer.logger", "lightning.pytorch.loggers.MLFlowLogger",
            "--trainer.logger.tracking_uri", "file:./mlruns", *FAST]  # fmt: skip
    line = error_line(run_cli(args, cwd=tmp_path))
    assert "MLFLOW_ALLOW_FILE_STORE=true" in line
    assert "sqlite:///mlflow.db" in line
    assert snapshot(tmp_path) == before
