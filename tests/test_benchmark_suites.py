"""The benchmark suites' command (``benchmarks/suites/run.py``) as a user runs it: a small suite of two CartPole
seeds is fitted, summarised from its event files and drawn onto a results page whose numbers are the logs'; run
again it fits nothing; cut short by SIGTERM it leaves no fit behind and the next run resumes; every bundled suite
file names configs that exist and parses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.cli_subprocess import ROOT, cli_environ, run_python

pytest.importorskip("matplotlib")

RUN = ROOT / "benchmarks" / "suites" / "run.py"


def _suite(tmp_path: Path, env_steps: int, seeds: list[int]) -> Path:
    path = tmp_path / "tiny.yaml"
    entry = {
        "name": "ppo_cartpole",
        "config": "configs/ppo.yaml",
        "task": "CartPole",
        "seeds": seeds,
        "env_steps": env_steps,
        "args": ["--trainer.enable_progress_bar", "false"],
        "target": 0,
        "minutes": 10,
        "references": [{"label": "paper", "value": 490, "source": "somewhere"}],
    }
    path.write_text(yaml.safe_dump({"title": "Tiny", "metric": "eval/episode_return", "entries": [entry]}))
    return path


def _events_final(run_dir: Path, tag: str = "eval/episode_return") -> float:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return accumulator.Scalars(tag)[-1].value


def test_a_suite_is_fitted_summarised_and_drawn_from_its_logs_and_a_finished_run_is_never_rerun(tmp_path):
    suite = _suite(tmp_path, 1024, [0, 1])
    args = [str(RUN), "tiny", "--suite-file", str(suite), "--root", str(tmp_path)]
    first = run_python(args, ROOT, timeout=400)
    assert first.returncode == 0, first.stdout + first.stderr
    results = tmp_path / "benchmarks" / "results" / "tiny" / "ppo_cartpole"
    finals = {}
    for seed in (0, 1):
        summary = json.loads((results / f"seed{seed}.json").read_text())
        process = json.loads((results / f"seed{seed}.process.json").read_text())
        assert summary["seed"] == seed
        assert process["segments"][0]["exit_code"] == 0
        assert process["wall_s"] > 0
        assert process["cpu_s"] > 0
        assert 0 < process["segments"][0]["speed_probe_ms"] < 100  # the machine's speed, taken before the fit
        finals[seed] = _events_final(tmp_path / "benchmarks" / "runs" / "tiny" / "ppo_cartpole" / f"seed{seed}")
        assert summary["scalars"]["eval/episode_return"]["values"][-1] == pytest.approx(finals[seed])
    page = (tmp_path / "docs" / "benchmarks" / "tiny.md").read_text()
    assert "python benchmarks/suites/run.py tiny" in page
    sys.path.insert(0, str(RUN.parent))
    try:
        from page import figure
    finally:
        sys.path.remove(str(RUN.parent))
    assert f"{figure(finals[0])}, {figure(finals[1])}" in page  # the final values, seed by seed, are the events'
    assert "paper **490** (somewhere)" in page
    assert "2 of 2 seeds" in page
    probes = sorted(json.loads((results / f"seed{s}.process.json").read_text())["segments"][0]["speed_probe_ms"]
                    for s in (0, 1))  # fmt: skip
    assert f"lower is faster): {probes[0]:.2f}" in page
    pngs = list((tmp_path / "docs" / "benchmarks" / "tiny").glob("*.png"))
    assert pngs
    assert all(f"](tiny/{png.name})" in page for png in pngs)

    again = run_python([*args, "--no-draw"], ROOT, timeout=200)
    assert again.returncode == 0, again.stderr
    assert "starting" not in again.stdout  # nothing fitted again
    assert len(json.loads((results / "seed0.process.json").read_text())["segments"]) == 1


@pytest.mark.slow
def test_sigterm_stops_the_fit_with_the_suite_and_the_next_run_resumes_it(tmp_path):
    suite = _suite(tmp_path, 200_000, [0])
    args = [sys.executable, str(RUN), "tiny", "--suite-file", str(suite), "--root", str(tmp_path), "--no-draw"]
    runner = subprocess.Popen(args, cwd=ROOT, env=cli_environ(), stdout=subprocess.PIPE, text=True)
    run_dir = tmp_path / "benchmarks" / "runs" / "tiny" / "ppo_cartpole" / "seed0"
    deadline = time.monotonic() + 120
    while not list(run_dir.glob("**/last.ckpt")):  # past its first checkpoint
        assert time.monotonic() < deadline, "no checkpoint written"
        time.sleep(0.5)
    fits = _fits_under(runner.pid)
    assert fits
    runner.send_signal(signal.SIGTERM)
    runner.communicate(timeout=120)
    assert runner.returncode != 0
    assert not any(_alive(pid) for pid in fits)  # the fit went with it
    record = json.loads((tmp_path / "benchmarks/results/tiny/ppo_cartpole/seed0.process.json").read_text())
    assert record["segments"][0]["exit_code"] != 0
    resumed = run_python([*args[1:-1], "--only", "ppo_cartpole"], ROOT, timeout=400)  # drawing too
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout
    record = json.loads((tmp_path / "benchmarks/results/tiny/ppo_cartpole/seed0.process.json").read_text())
    assert [s["exit_code"] for s in record["segments"]][-1] == 0
    assert record["resumed"] is True
    assert "--ckpt_path" in record["segments"][-1]["command"]


def _fits_under(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid,ppid"], capture_output=True, text=True).stdout.split()[2:]
    return [int(c) for c, p in zip(out[::2], out[1::2], strict=True) if int(p) == pid]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks" / "suites").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_bundled_suite_parses_and_names_configs_that_exist(path):
    sys.path.insert(0, str(path.parent))
    try:
        from suite import load_suite

        suite = load_suite(path.stem)
    finally:
        sys.path.remove(str(path.parent))
    assert suite.entries
    for entry in suite.entries:
        assert (ROOT / entry.config).is_file()
        assert entry.references or entry.target is not None, entry.name


def test_a_run_made_from_another_recipe_is_fitted_again_but_a_comment_changes_nothing(tmp_path):
    """A committed run is never rerun, unless its config's settings, budget or arguments changed since; editing the
    config's comments (where the measured figures are written down) keeps it."""
    sys.path.insert(0, str(RUN.parent))
    try:
        import runs
        from suite import Entry, Suite
    finally:
        sys.path.remove(str(RUN.parent))
    config = ROOT / "configs" / "ppo.yaml"
    copy = tmp_path / "configs" / "recipe.yaml"
    copy.parent.mkdir()
    copy.write_text(config.read_text())
    entry = Entry("ppo", str(copy.relative_to(tmp_path)), "CartPole", (0,), 1000)
    suite = Suite("s", "S", "eval/episode_return", (entry,))
    old_repo, runs.REPO, runs.ROOT[0] = runs.REPO, tmp_path, tmp_path
    try:
        summary, record = runs.summary_path(suite, entry, 0), runs.process_path(suite, entry, 0)
        summary.parent.mkdir(parents=True)
        summary.write_text("{}")
        record.write_text(json.dumps({"recipe_digest": runs.recipe_digest(entry)}))
        assert runs.finished(suite, entry, 0)
        copy.write_text("# measured: 500 on 5 of 5 seeds\n" + config.read_text())
        assert runs.finished(suite, entry, 0)  # a comment is not a recipe
        assert not runs.finished(suite, Entry("ppo", entry.config, "CartPole", (0,), 2000), 0)  # another budget
        fragment = tmp_path / "callbacks" / "more.yaml"  # a config file the entry's arguments add
        fragment.parent.mkdir()
        fragment.write_text("trainer: {max_time: '00:00:10:00'}\n")
        with_fragment = Entry("ppo", entry.config, "CartPole", (0,), 1000, ("--config", "callbacks/more.yaml"))
        record.write_text(json.dumps({"recipe_digest": runs.recipe_digest(with_fragment)}))
        assert runs.finished(suite, with_fragment, 0)
        fragment.write_text("# a comment\ntrainer: {max_time: '00:00:10:00'}\n")
        assert runs.finished(suite, with_fragment, 0)
        fragment.write_text("trainer: {max_time: '00:00:20:00'}\n")
        assert not runs.finished(suite, with_fragment, 0)  # the fragment's settings are the recipe's too
        record.write_text(json.dumps({"recipe_digest": runs.recipe_digest(entry)}))
        copy.write_text(config.read_text().replace("num_envs: 8", "num_envs: 4"))
        assert not runs.finished(suite, entry, 0)
        runs.forget(suite, entry, 0, log=lambda line: None)
        assert not summary.exists()
        assert not record.exists()
    finally:
        runs.REPO, runs.ROOT[0] = old_repo, ROOT


def test_a_table_prints_small_finals_with_their_digits_and_returns_with_one_decimal():
    sys.path.insert(0, str(RUN.parent))
    try:
        from page import figure
    finally:
        sys.path.remove(str(RUN.parent))
    assert [figure(v) for v in (0.00734, 0.36, 4.1634, 97.13, -149.34, 6309.44)] == [
        "0.00734", "0.36", "4.163", "97.13", "-149.3", "6,309.4"]  # fmt: skip


def test_the_sb3_timing_table_takes_each_ratio_pair_by_pair_and_medians_them():
    """``versus_sb3.table``: a pair's ratio is ours over SB3's of the same pair (not the ratio of the medians), so
    a slow stretch of the machine under one pair moves both sides of it."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "suites"))
    try:
        from versus_sb3 import table
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "suites"))
    record = {
        "env_steps": 50_000, "machine": "test box", "date": "2026-12-02",
        "recipes": {"walker2d": "configs/ppo_walker2d.yaml"},
        "rows": [
            {"task": "walker2d", "seed": seed, "ours": {"wall_s": a, "cpu_s": b}, "sb3": {"wall_s": c, "cpu_s": d}}
            for seed, (a, b, c, d) in enumerate([(10, 20, 40, 40), (30, 30, 60, 30), (20, 10, 100, 50)])
        ],
    }  # fmt: skip
    (row,) = [line for line in table(record).splitlines() if line.startswith("| Walker2d-v5")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    # medians 20 / 60 s; pair ratios 0.25, 0.5, 0.2 -> 0.25 (the ratio of the medians would say 0.33)
    assert cells[2:5] == ["20.0", "60.0", "0.25x"]
    # CPU: medians 20 / 40; pair ratios 0.5, 1.0, 0.2 -> 0.5
    assert cells[5:8] == ["20.0", "40.0", "0.50x"]
    assert cells[8] == "400"  # 20 s / 50,000 env steps in µs


def test_a_run_folder_of_another_recipe_is_cleared_rather_than_resumed(tmp_path):
    """A checkpoint left in a run's folder resumes only a fit of the same recipe: after the config changed (or in a
    folder that does not say what made it) the folder is removed and the fit starts afresh."""
    sys.path.insert(0, str(RUN.parent))
    try:
        import runs
        from suite import Entry, Suite
    finally:
        sys.path.remove(str(RUN.parent))
    copy = tmp_path / "configs" / "recipe.yaml"
    copy.parent.mkdir()
    copy.write_text((ROOT / "configs" / "ppo.yaml").read_text())
    entry = Entry("ppo", str(copy.relative_to(tmp_path)), "CartPole", (0,), 1000)
    suite = Suite("s", "S", "eval/episode_return", (entry,))
    old_repo, runs.REPO, runs.ROOT[0] = runs.REPO, tmp_path, tmp_path
    try:
        folder = runs.run_dir(suite, entry, 0)
        ckpt = folder / "version_0" / "checkpoints" / "last.ckpt"
        ckpt.parent.mkdir(parents=True)
        ckpt.write_bytes(b"weights")
        said = []
        assert runs.resumable(suite, entry, 0, said.append) is None  # no marker: unknown make
        assert not folder.exists()
        assert len(said) == 1
        ckpt.parent.mkdir(parents=True)
        ckpt.write_bytes(b"weights")
        (folder / runs.RECIPE_MARKER).write_text(runs.recipe_digest(entry) + "\n")
        assert runs.resumable(suite, entry, 0, said.append) == ckpt  # the same recipe resumes
        copy.write_text(copy.read_text().replace("num_envs: 8", "num_envs: 4"))
        assert runs.resumable(suite, entry, 0, said.append) is None  # another recipe
        assert not folder.exists()
        assert len(said) == 2
    finally:
        runs.REPO, runs.ROOT[0] = old_repo, ROOT


_FORK_SERVER_BURN = """
import multiprocessing, time
def burn():
    start = time.process_time()
    while time.process_time() - start < 1.0:
        pass
if __name__ == "__main__":
    worker = multiprocessing.get_context("forkserver").Process(target=burn)
    worker.start()
    worker.join()
"""


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="samples /proc")
def test_tree_cpu_counts_a_fork_servers_worker_that_rusage_misses(tmp_path):
    """A worker forked by multiprocessing's fork server (as a fit's actors are) spends its CPU where no wait of the
    caller's sees it; the sampled tree counts it."""
    import resource

    sys.path.insert(0, str(RUN.parent))
    try:
        from tree_cpu import TreeCPU
    finally:
        sys.path.remove(str(RUN.parent))
    script = tmp_path / "burn.py"
    script.write_text(_FORK_SERVER_BURN)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = subprocess.Popen([sys.executable, str(script)])
    sampler = TreeCPU(child.pid, interval=0.05)
    assert child.wait() == 0
    tree = sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    waited = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert tree >= 0.9  # the worker's second of CPU
    assert waited < tree - 0.5  # what rusage alone would have reported


def test_the_aggregate_ranges_run_from_the_logged_random_return_to_the_first_figure_once_every_run_is_in(tmp_path):
    """``normalise: random_to_reference``: a task's range is the median of its runs' first logged random return to
    its first published figure; with a seed missing anywhere there is no aggregate yet (rliable needs as many runs
    on every task), said in a line."""
    suites = str(RUN.parent)
    sys.path.insert(0, suites)
    try:
        import page
        import runs
        from suite import load_suite

        path = tmp_path / "two.yaml"
        entries = [
            {"name": f"ppo_{task}", "label": "PPO", "config": "configs/ppo.yaml", "task": task, "seeds": [0, 1],
             "references": [{"label": "a", "value": high, "source": "s"}, {"label": "b", "value": 1, "source": "s"}]}
            for task, high in (("A", 100.0), ("B", 40.0))
        ]  # fmt: skip
        path.write_text(yaml.safe_dump({"title": "Two", "metric": "eval/episode_return",
                                        "normalise": "random_to_reference", "entries": entries}))  # fmt: skip
        suite = load_suite("two", path)
        assert suite.normalise_from == "random_to_reference"
        runs.ROOT[0] = tmp_path
        randoms = {("A", 0): -10.0, ("A", 1): -30.0, ("B", 0): 2.0, ("B", 1): 4.0}
        done = []
        for (task, seed), random in randoms.items():
            entry = suite.entry(f"ppo_{task}")
            scalars = {page.RANDOM_TAG: {"steps": [10, 20], "values": [random, 99.0]}}
            runs.summary_path(suite, entry, seed).parent.mkdir(parents=True, exist_ok=True)
            runs.summary_path(suite, entry, seed).write_text(json.dumps({"scalars": scalars}))
            runs.process_path(suite, entry, seed).write_text(json.dumps({"recipe_digest": runs.recipe_digest(entry)}))
            done.append((entry, seed))
        said: list[str] = []
        assert page.random_to_reference(suite, done, said.append) == {"A": (-20.0, 100.0), "B": (3.0, 40.0)}
        assert page.random_to_reference(suite, done[:-1], said.append) == {}
        assert said == ["two: the aggregate waits for every run (ppo_B 1 of 2 seeds finished)"]
    finally:
        runs.ROOT[0] = ROOT
        sys.path.remove(suites)
