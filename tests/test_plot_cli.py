"""``rl-lightning plot`` as a user runs it (its own process) on TensorBoard logs the tests write: the PNG decodes at
the size asked, the SVG parses, the table's numbers are the events' numbers, and bad input is one line, exit 2."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import yaml

from tests.cli_subprocess import error_line, run_cli, run_python

pytest.importorskip("matplotlib")

from matplotlib import image  # noqa: E402 - after the skip: matplotlib comes with the plot extra

#: The wall time (seconds since the epoch) at which every test run's writer starts: its first event.
START = 1_000_000.0
STEPS = [1000, 2000, 3000, 4000]


def write_run(
    folder: Path,
    values: dict[str, list[float]],
    wall: list[float],
    steps: list[int] = STEPS,
    seed: int | None = 1,
    env: dict | None = None,
    name: str = "ppo_cartpole",
    config: bool = True,
) -> Path:
    """A TensorBoard run folder as ``rl-lightning fit`` leaves one: events (first event at ``START``, scalars at
    ``START + wall``, at env steps ``steps``) and, with ``config``, a ``config.yaml`` of that seed, env and name."""
    from torch.utils.tensorboard import SummaryWriter

    folder.mkdir(parents=True)
    with mock.patch("time.time", return_value=START):  # the writer's first event (file_version) and file name
        writer = SummaryWriter(str(folder))
    for tag, series in values.items():
        for step, seconds, value in zip(steps, wall, series):
            writer.add_scalar(tag, value, step, walltime=START + seconds)
    writer.close()
    if config:
        cfg = {
            "seed_everything": seed,
            "trainer": {"logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                                   "init_args": {"save_dir": "runs", "name": name}}},
            "model": {"class_path": "rl_lightning.algos.PPO", "init_args": {"lr": 0.001}},
            "data": {"class_path": "rl_lightning.data.OnPolicyDataModule",
                     "init_args": {"env": env or {"class_path": "rl_lightning.envs.CartPole"}, "num_envs": 8}},
        }  # fmt: skip
        (folder / "config.yaml").write_text(yaml.safe_dump(cfg))
    return folder


#: Three seeds of one config: eval/episode_return per seed at STEPS, wall seconds per seed.
RETURNS = {1: [10.0, 50.0, 120.0, 200.0], 2: [12.0, 40.0, 150.0, 300.0], 3: [9.0, 60.0, 100.0, 250.0]}
WALL = {1: [1.0, 2.0, 3.0, 4.0], 2: [1.5, 3.0, 4.5, 8.0], 3: [0.5, 1.0, 1.5, 2.5]}


def three_seeds(root: Path) -> Path:
    for seed, returns in RETURNS.items():
        losses = [1.0 / (k + seed) for k in range(4)]
        write_run(root / "runs" / "ppo_cartpole" / f"version_{seed - 1}",
                  {"eval/episode_return": returns, "train/loss": losses}, WALL[seed], seed=seed)  # fmt: skip
    return root / "runs"


def table_rows(markdown: str, metric: str = "eval/episode_return") -> list[dict[str, str]]:
    """The rows of the markdown table under ``## metric``, as column name → cell."""
    section = markdown.split(f"## {metric}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))) for line in lines[2:]]


def plot(args: list[str], cwd: Path):
    result = run_cli(["plot", *args], cwd)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_three_seeds_give_a_figure_of_the_size_asked_and_a_table_of_the_logged_numbers(tmp_path):
    three_seeds(tmp_path)
    plot(["runs", "--out", "out", "--size", "900x350", "--reference", "rl-zoo=275"], tmp_path)
    out = tmp_path / "out"
    pixels = image.imread(out / "CartPole__eval_episode_return.png")
    assert pixels.shape[:2] == (350, 900)  # height x width: the size asked, to the pixel
    assert pixels[..., :3].std() > 0.05  # something drawn, not a blank canvas
    svg = ET.parse(out / "CartPole__eval_episode_return.svg").getroot()
    assert svg.tag.endswith("svg")
    assert "rl-zoo (275)" in (out / "CartPole__eval_episode_return.svg").read_text()  # the reference's legend
    (row,) = table_rows((out / "summary.md").read_text())
    finals = {seed: returns[-1] for seed, returns in RETURNS.items()}
    assert (row["task"], row["group"], row["seeds"]) == ("CartPole", "ppo_cartpole", "3")
    assert row["final per seed"] == "; ".join(f"seed {s}: {finals[s]:g}" for s in sorted(finals))
    assert float(row["median"]) == pytest.approx(np.median(list(finals.values())))
    q25, q75 = np.percentile(list(finals.values()), [25, 75])
    assert float(row["IQR"]) == pytest.approx(q75 - q25)
    walls = [WALL[s][-1] for s in finals]  # seconds from each writer's first event to its last scalar
    assert float(row["wall time (s)"]) == pytest.approx(np.median(walls))
    assert float(row["env steps/s"]) == pytest.approx(np.median([STEPS[-1] / w for w in walls]), rel=1e-5)
    assert row["env steps"] == str(STEPS[-1])
    assert "References: rl-zoo 275" in (out / "summary.md").read_text()
    runs = json.loads((out / "summary.json").read_text())["groups"][0]["runs"]
    assert [(r["seed"], r["final"], r["wall_seconds"]) for r in runs] == [(s, finals[s], WALL[s][-1]) for s in finals]


def test_the_same_runs_draw_the_same_files_and_their_summaries_draw_them_again(tmp_path):
    """Determinism under the bootstrap seed, and the compact summaries read exactly like the event folders."""
    three_seeds(tmp_path)
    plot(["runs", "--out", "a", "--metric", "eval/episode_return,train/loss", "--write-summaries", "s"], tmp_path)
    plot(["runs", "--out", "b", "--metric", "eval/episode_return", "--metric", "train/loss"], tmp_path)
    summaries = sorted((tmp_path / "s").glob("*.json"))
    assert [p.name for p in summaries] == [f"runs_ppo_cartpole_version_{i}.json" for i in range(3)]
    first = json.loads(summaries[0].read_text())
    identity = (first["task"], first["group"], first["seed"], first["config"])
    assert identity == ("CartPole", "ppo_cartpole", 1, "ppo_cartpole")
    assert first["scalars"]["eval/episode_return"] == {"steps": STEPS, "wall_times": WALL[1], "values": RETURNS[1]}
    plot(["s", "--out", "c", "--metric", "eval/episode_return,train/loss"], tmp_path)
    for name in ("summary.md", "CartPole__eval_episode_return.png", "CartPole__train_loss.svg"):
        reference = (tmp_path / "a" / name).read_bytes()
        assert (tmp_path / "b" / name).read_bytes() == reference, name
        assert (tmp_path / "c" / name).read_bytes() == reference, name


def test_labels_group_runs_across_configs_and_mixed_tasks_get_a_figure_each(tmp_path):
    hopper = {"class_path": "rl_lightning.envs.GymnasiumEnv", "init_args": {"env_id": "Hopper-v5"}}
    for seed in (1, 2):
        write_run(tmp_path / "runs" / "a" / f"version_{seed}", {"eval/episode_return": RETURNS[seed]}, WALL[seed],
                  seed=seed, name="ppo_a")  # fmt: skip
        write_run(tmp_path / "runs" / "b" / f"version_{seed}", {"eval/episode_return": RETURNS[seed]}, WALL[seed],
                  seed=seed, name="ppo_b")  # fmt: skip
        write_run(tmp_path / "runs" / "h" / f"version_{seed}", {"eval/episode_return": RETURNS[seed]}, WALL[seed],
                  seed=seed, env=hopper, name="ppo_hopper")  # fmt: skip
    # run folders between the options, as a script building the command per group writes them
    plot(["runs/a", "--out", "out", "runs/b", "--label", "*/runs/[ab]=PPO",
          "runs/h", "--reference", "zoo=2410@Hopper-v5"], tmp_path)  # fmt: skip
    rows = table_rows((tmp_path / "out" / "summary.md").read_text())
    groups = [(r["task"], r["group"], r["seeds"]) for r in rows]
    assert groups == [("CartPole", "PPO", "4"), ("Hopper-v5", "ppo_hopper", "2")]
    for task in ("CartPole", "Hopper-v5"):
        assert image.imread(tmp_path / "out" / f"{task}__eval_episode_return.png").shape[:2] == (450, 1200)
    assert "zoo (2410)" in (tmp_path / "out" / "Hopper-v5__eval_episode_return.svg").read_text()
    assert "zoo (2410)" not in (tmp_path / "out" / "CartPole__eval_episode_return.svg").read_text()


def test_a_peers_runs_are_a_dashed_curve_and_a_row_of_their_own(tmp_path):
    three_seeds(tmp_path)
    write_run(tmp_path / "peer" / "run0", {"eval/episode_return": [5.0, 6.0, 7.0, 8.0]}, [1, 2, 3, 4], config=False)
    plot(["runs", "--out", "out", "--reference-runs", "cleanrl=peer"], tmp_path)
    rows = table_rows((tmp_path / "out" / "summary.md").read_text())
    assert [(r["group"], r["final per seed"]) for r in rows][1] == ("cleanrl (reference runs)", "run 1: 8")


def test_a_real_fit_is_read_at_its_env_steps_with_its_config(tmp_path):
    """A real ``rl-lightning fit`` of ppo.yaml: its TensorBoard step is the env step, its config.yaml names it."""
    fit = run_cli(["fit", "--config", "ppo.yaml", "--data.init_args.total_env_steps", "2048",
                   "--trainer.enable_progress_bar", "false"], tmp_path)  # fmt: skip
    assert fit.returncode == 0, fit.stderr[-3000:]
    plot(["runs", "--out", "out", "--metric", "rollout/episode_return"], tmp_path)
    (row,) = table_rows((tmp_path / "out" / "summary.md").read_text(), "rollout/episode_return")
    assert (row["task"], row["group"], row["env steps"]) == ("CartPole", "ppo_cartpole", "2048")
    assert row["final per seed"].startswith("seed 1: ")


def test_log_y_draws_the_metric_on_a_log_axis_of_both_panels(tmp_path, monkeypatch):
    """``--log-y`` (exploitability spans decades): both panels' y axis is logarithmic, and the figure is written."""
    from rl_lightning.results import draw, plot_cli

    three_seeds(tmp_path)
    plot(["runs", "--out", "out", "--metric", "train/loss", "--log-y"], tmp_path)
    assert image.imread(tmp_path / "out" / "CartPole__train_loss.png").shape[:2] == (450, 1200)
    scales = []
    monkeypatch.setattr(draw, "_save", lambda figure, stem: scales.extend(a.get_yscale() for a in figure.axes) or [])
    monkeypatch.chdir(tmp_path)
    for log_y in ([], ["--log-y"]):
        plot_cli.main(["runs", "--out", "again", "--metric", "train/loss", *log_y])
    assert scales == ["linear", "linear", "log", "log"]


def _bad_inputs(root: Path) -> dict[str, tuple[list[str], str]]:
    """Case → (arguments after ``plot``, what its one line must say)."""
    three_seeds(root)
    (root / "empty" / "version_0").mkdir(parents=True)
    write_run(root / "other" / "run0", {"eval/episode_return": [1, 2, 3, 4]}, [1, 2, 3, 4], config=False)
    hopper = {"class_path": "rl_lightning.envs.GymnasiumEnv", "init_args": {"env_id": "Hopper-v5"}}
    write_run(root / "hopper" / "version_0", {"eval/episode_return": [1, 2, 3, 4]}, [1, 2, 3, 4], env=hopper)
    write_run(root / "zero" / "version_0", {"eval/episode_return": [0.5, 0.1, 0.0, 0.2]}, [1, 2, 3, 4])
    out = ["--out", "out"]
    return {
        "no event files": (["empty", *out], "empty: no TensorBoard event files (events.out.tfevents.*)"),
        "no such path": (["nowhere/*", *out], "nowhere/*: no such file or folder"),
        "tag no run has": (["runs", *out, "--metric", "eval/return"],
                           "--metric eval/return: no run has this tag; the runs' scalar tags: eval/episode_return, "
                           "train/loss"),
        "task unknown among known tasks": (["runs", "other", *out], "other/run0: nothing names its task"),
        "reference of which task": (["runs", "hopper", *out, "--reference", "zoo=1"],
                                    "--reference zoo=1: the runs are of 2 tasks (CartPole, Hopper-v5); say which"),
        "label without =": (["runs", *out, "--label", "runs"], "--label 'runs': expected GLOB=LABEL"),
        "reference not a number": (["runs", *out, "--reference", "zoo=high"], "'high' is not a finite number"),
        "normalise without range": (["runs", *out, "--normalise", "CartPole=500"], "expected TASK=LOW:HIGH"),
        "normalise a task of no run": (["runs", *out, "--normalise", "Pong=0:1", "--normalise", "CartPole=0:500"],
                                       "--normalise Pong: no run is of that task"),
        "normalise one task of two": (["runs", "hopper", *out, "--normalise", "CartPole=0:500"],
                                      "--normalise: no range for task Hopper-v5"),
        "size": (["runs", *out, "--size", "big"], "--size 'big': expected WIDTHxHEIGHT in pixels"),
        "log axis of a value at 0": (["zero", *out, "--log-y"], "--log-y: zero/version_0 logs eval/episode_return = 0, "
                                     "which a log axis cannot show; drop --log-y"),
        "no --out": (["runs"], "plot: the following arguments are required: --out; usage: rl-lightning plot [-h]"),
    }  # fmt: skip


def test_bad_input_is_one_line_and_exit_2_before_anything_is_written(tmp_path):
    for case, (args, said) in _bad_inputs(tmp_path).items():
        result = run_cli(["plot", *args], tmp_path)
        assert result.returncode == 2, (case, result.stderr[-2000:])
        line = error_line(result)
        assert said in line, (case, line)
        assert len(result.stderr.strip().splitlines()) == 1, (case, result.stderr)
        assert not (tmp_path / "out").exists(), case


def test_the_aggregate_iqm_is_the_interquartile_mean_of_the_normalised_finals(tmp_path):
    from scipy.stats import trim_mean

    pytest.importorskip("rliable")
    hopper = {"class_path": "rl_lightning.envs.GymnasiumEnv", "init_args": {"env_id": "Hopper-v5"}}
    cart = [[10.0, 100.0], [10.0, 300.0], [10.0, 420.0], [10.0, 475.0]]
    hop = [[0.0, 800.0], [0.0, 1500.0], [0.0, 2410.0], [0.0, 3000.0]]
    for seed in range(4):
        write_run(tmp_path / "runs" / "c" / f"version_{seed}", {"eval/episode_return": cart[seed]}, [1, 2],
                  steps=[1000, 2000], seed=seed)  # fmt: skip
        write_run(tmp_path / "runs" / "h" / f"version_{seed}", {"eval/episode_return": hop[seed]}, [1, 2],
                  steps=[1000, 2000], seed=seed, env=hopper, name="ppo_hopper")  # fmt: skip
    plot(["runs", "--out", "out", "--normalise", "CartPole=0:500", "--normalise", "Hopper-v5=0:2410"], tmp_path)
    (row,) = json.loads((tmp_path / "out" / "summary.json").read_text())["aggregate"]
    scores = np.array([[c[-1] / 500, h[-1] / 2410] for c, h in zip(cart, hop)])  # [runs, tasks]
    assert (row["algorithm"], row["runs_per_task"]) == ("PPO", 4)
    assert row["iqm"] == pytest.approx(trim_mean(scores, 0.25, axis=None))
    assert row["ci_low"] <= row["iqm"] <= row["ci_high"]
    assert image.imread(tmp_path / "out" / "aggregate.png").shape[:2] == (450, 1200)
    assert re.search(r"\| PPO \| CartPole, Hopper-v5 \| 4 \| ", (tmp_path / "out" / "summary.md").read_text())


def test_without_the_plot_extra_it_says_how_to_install_it(tmp_path):
    three_seeds(tmp_path)
    code = "import sys; sys.modules['matplotlib'] = None; from rl_lightning.cli import main; main(sys.argv[1:])"
    result = run_python(["-c", code, "plot", "runs", "--out", "out"], tmp_path)
    assert result.returncode == 2
    assert 'plot: matplotlib is not installed; pip install -e ".[plot]"' in error_line(result)
    assert not (tmp_path / "out").exists()
