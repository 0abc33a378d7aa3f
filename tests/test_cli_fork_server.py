"""The CLI tests' fork server behaves as ``python ARGV`` in a fresh interpreter would (tests/cli_fork_server.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli_subprocess import run_cli, run_python

PROBE = """
import json, os, sys
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "pid": os.getpid(),
                  "name": __name__, "probe": os.environ.get("RL_LIGHTNING_PROBE")}))
sys.stderr.write("to stderr\\n")
raise SystemExit(int(sys.argv[1]))
"""


def _probe(cwd: Path, code: int, **kwargs) -> tuple[dict, str, int]:
    done = run_python(["-c", PROBE, str(code)], cwd, **kwargs)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr, done.returncode


def test_a_forked_run_is_its_own_process_with_its_cwd_argv_exit_code_and_output(tmp_path, monkeypatch):
    forked, stderr, code = _probe(tmp_path, 3)
    assert code == 3
    assert stderr.endswith("to stderr\n")
    assert forked["pid"] != os.getpid()
    assert (forked["argv"], forked["path0"], forked["cwd"], forked["name"]) == (
        ["-c", "3"],
        "",
        str(tmp_path),
        "__main__",
    )
    fresh, _, code = _probe(tmp_path, 0, fresh_interpreter=True)
    assert code == 0
    assert {k: v for k, v in fresh.items() if k != "pid"} == {**{k: v for k, v in forked.items() if k != "pid"},
                                                              "argv": ["-c", "0"]}  # fmt: skip
    monkeypatch.setenv("RL_LIGHTNING_PROBE", "seen")  # a variable read at run time reaches the forked child
    forked, _, _ = _probe(tmp_path, 0)
    assert forked["probe"] == "seen"


def test_a_module_run_finds_the_working_directory_and_extra_path_first(tmp_path):
    (tmp_path / "here_mod.py").write_text("import sys; print('here', sys.argv[1:])")
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "extra_mod.py").write_text("print('extra')")
    done = run_python(["-m", "here_mod", "a", "b"], tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, "here ['a', 'b']")
    assert run_python(["-m", "extra_mod"], tmp_path).returncode != 0
    done = run_python(["-m", "extra_mod"], tmp_path, extra_path=[extra])
    assert (done.returncode, done.stdout.strip()) == (0, "extra")


def test_a_refusal_reads_the_same_forked_as_from_a_fresh_interpreter(tmp_path):
    args = ["validate", "--config", "ppo", "--trainer.enable_progress_bar", "false"]
    forked, fresh = run_cli(args, tmp_path), run_cli(args, tmp_path, fresh_interpreter=True)
    assert forked.returncode == fresh.returncode == 2
    assert forked.stderr == fresh.stderr
    assert forked.stderr.startswith("rl-lightning: error: validate needs --ckpt_path")


def test_a_run_past_its_timeout_is_killed_and_the_server_serves_the_next(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(["-c", "import time; print('started', flush=True); time.sleep(60)"], tmp_path, timeout=1)
    forked, _, code = _probe(tmp_path, 5)
    assert code == 5
    assert forked["cwd"] == str(tmp_path)
