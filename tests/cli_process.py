"""A CLI run a test signals: ``rl-lightning ARGS`` as its own process, forked from the fork server that ``tune``
forks its fits from (``rl_lightning/tune/fit_process.py``), with ``subprocess.Popen``'s interface.

``tests.cli_subprocess.run_cli`` covers runs that are only waited for; this one is for runs a test signals, kills or
watches while they run (SIGTERM, Ctrl+C, an actor killed), which need the run's pid at once. stdout and stderr go to
one file, returned by ``communicate`` as stderr.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from rl_lightning.tune.fit_process import FitProcess


class CliRun(FitProcess):
    """``python -m rl_lightning.cli ARGS`` in ``cwd``; ``communicate`` returns ``("", its output)``."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self._output = Path(tempfile.mkstemp(prefix="rl_lightning_cli_", suffix=".log")[1])
        super().__init__(args, self._output, cwd)

    def output(self) -> str:
        """What the run has written so far (stdout and stderr)."""
        return self._output.read_text(errors="replace")

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return "", self.output()
