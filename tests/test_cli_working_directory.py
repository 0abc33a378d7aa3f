"""The ``rl-lightning`` command imports a user's env module from the working directory, as ``python -m`` does.

The installed console script's ``sys.path[0]`` is the directory of the script (``.venv/bin``), not the working
directory; ``rl_lightning.cli.main`` puts the working directory on the path, and actor processes inherit it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.cli_subprocess import run_python

#: What pip writes as the ``rl-lightning`` console script (``[project.scripts]`` in pyproject.toml).
CONSOLE_SCRIPT = """\
import sys
from rl_lightning.cli import main
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit(main())
"""

#: A user's env, in a module of the working directory (not a package, not installed).
MY_ENV = """\
import gymnasium
import numpy as np
from gymnasium import spaces


class Walk(gymnasium.Env):
    def __init__(self, length: int = 4):
        self.length = length
        self.observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self._pos = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self._pos = max(0, self._pos + (1 if int(action) == 1 else -1))
        done = self._pos >= self.length
        return np.array([self._pos / self.length], np.float32), float(done), done, False, {}
"""


@pytest.mark.parametrize("num_actors", [0, 1])
def test_console_script_imports_an_env_module_of_the_working_directory(tmp_path: Path, num_actors: int) -> None:
    work, bin_dir = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    (work / "my_env.py").write_text(MY_ENV)
    script = bin_dir / "rl-lightning"
    script.write_text(f"#!{sys.executable}\n{CONSOLE_SCRIPT}")
    args = [
        "fit", "--config", "ppo", "--data.init_args.env", "rl_lightning.envs.GymnasiumEnv",
        "--data.init_args.env.init_args.env_class", "{class_path: my_env.Walk}",
        "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "8",
        "--data.init_args.total_env_steps", "64", "--data.init_args.num_actors", str(num_actors),
        "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
        "--model.init_args.hidden_sizes", "[8]", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", "runs",
    ]  # fmt: skip
    done = run_python([str(script), *args], cwd=work)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "does not import" not in done.stderr
    assert list((work / "runs").rglob("last.ckpt"))
