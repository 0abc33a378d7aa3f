"""A seed's ``rl-lightning fit`` as its own process, forked from a server that has imported the CLI once.

A fresh ``python -m rl_lightning.cli`` spends ~4-5 CPU seconds importing torch and Lightning before its fit starts,
as long as a short trial's whole fit. ``child_processes.forking_context`` starts one clean server per tuning process
that imports the CLI's modules, and forks every fit from it: each is still its own process (own pid, globals,
threads, seeds, exit code) and runs exactly what ``python -m rl_lightning.cli fit --config FILE`` runs, ``__main__``
included (Lightning's DDP launcher re-executes it). Where the platform has no ``forkserver``, ``spawn`` does the same
at the import's cost.
"""

from __future__ import annotations

import atexit
import os
import runpy
import signal
import sys
from pathlib import Path

from rl_lightning.processes.child_processes import (
    child_environ,
    die_with_parent,
    forking_context,
    server_environ,
    signal_when_gone,
)

CLI_MODULE = "rl_lightning.cli"


class FitProcess:
    """``python -m rl_lightning.cli ARGS`` in ``cwd`` (default: this process's), stdout and stderr into ``log``: the
    part of ``subprocess.Popen``'s interface a trial uses (``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``,
    ``returncode``, negative for a signal as ``Popen`` reports it)."""

    def __init__(self, args: list[str], log: Path, cwd: Path | None = None) -> None:
        context = forking_context(["rl_lightning.lightning_cli"])
        where = None if cwd is None else str(cwd)
        self._process = context.Process(target=_run_cli, args=(list(args), str(log), os.getpid(), where), daemon=False)
        with child_environ(**server_environ()):
            self._process.start()
        self.pid: int = self._process.pid  # type: ignore[assignment]

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        """The exit code once the fit has ended (reaped), else None."""
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """Block until the fit ends; raises ``TimeoutError`` past ``timeout`` seconds."""
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise TimeoutError(f"fit {self.pid} still running after {timeout} s")
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _run_cli(args: list[str], log: str, tuner_pid: int, cwd: str | None) -> None:
    """In the forked process: what ``python -m rl_lightning.cli ARGS > log 2>&1 < /dev/null`` does; exits with its
    code. It gets SIGTERM (and stops within one env step, saving a checkpoint) when the tuning process dies: from the
    kernel if its parent is the tuner (``spawn``), else from a watch on the tuner's pid (its parent is the fork
    server, which outlives the tuner while this process lives)."""
    die_with_parent(signal.SIGTERM)
    signal_when_gone(tuner_pid, signal.SIGTERM)
    if cwd is not None:
        os.chdir(cwd)
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        handle = os.open(path, flags, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    os.dup2(1, 2)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the interpreter's own stdin object, now /dev/null
    code = 0
    try:
        sys.argv = [CLI_MODULE, *args]
        sys.modules.pop(CLI_MODULE, None)  # as in a fresh interpreter, only its imports are already loaded
        runpy.run_module(CLI_MODULE, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int | None):
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - uncaught: the traceback and exit code 1, as the interpreter does
        import traceback

        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()  # a forked process leaves through os._exit, which skips them (TensorBoard's flush)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
