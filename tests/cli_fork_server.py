"""A fork server for CLI tests: one interpreter imports ``rl_lightning.cli`` once, then forks a process per run.

Importing Python, torch and Lightning costs about 4 s, most of a tiny CLI run. The server
(``python -m tests.cli_fork_server``, started by ``Client``) reads one JSON request per line on stdin, forks, and the
child does what ``python ARGV`` does (``-m rl_lightning.cli ARGS``, ``-c CODE ARGS`` or ``SCRIPT ARGS``): its own pid,
working directory, ``sys.path[0]``, environment, ``sys.argv`` and ``__main__`` (so Lightning's DDP launcher
re-executes ``-m rl_lightning.cli``), stdout and stderr into the request's files, and the exit code (``-N`` for a
signal, as ``subprocess`` reports it).
The server itself never runs a torch op, so the forked children start with no thread pools.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Client:
    """The test process's end: starts the server and runs one CLI call at a time through it."""

    def __init__(self, environ: dict[str, str]) -> None:
        command = [sys.executable, "-m", "tests.cli_fork_server"]
        self._server = subprocess.Popen(command, cwd=ROOT, env=environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._buffer = b""
        self._lock = threading.Lock()  # one request at a time: the replies are read in order
        atexit.register(self.close)

    def run(self, request: dict, out: str, err: str, timeout: float) -> int:
        """``python ARGV`` as ``request`` describes it (``argv``, ``cwd``, ``environ``, ``extra_path``) in a forked
        child, stdout and stderr to the files ``out`` and ``err``; its exit code, after killing it if it outlives
        ``timeout``."""
        request = {**request, "out": out, "err": err}
        with self._lock:
            self._server.stdin.write(json.dumps(request).encode() + b"\n")
            self._server.stdin.flush()
            pid = self._reply(timeout=60)["pid"]
            try:
                return self._reply(timeout)["code"]
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                self._reply(timeout=60)
        output = Path(out).read_text(errors="replace") if Path(out).exists() else ""
        raise subprocess.TimeoutExpired([sys.executable, *request["argv"]], timeout, output)

    def _reply(self, timeout: float) -> dict:
        with selectors.DefaultSelector() as selector:
            selector.register(self._server.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                if not selector.select(timeout):
                    raise TimeoutError
                chunk = os.read(self._server.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(f"the CLI fork server exited with code {self._server.wait()}")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        if self._server.poll() is None:
            self._server.stdin.close()
            self._server.wait(timeout=30)


def _serve() -> None:
    import_stderr = _import_cli()
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # a stray print of the server must not corrupt the replies
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            replies.close()
            _child(**request, import_stderr=import_stderr)
        print(json.dumps({"pid": pid}), file=replies, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), file=replies, flush=True)


def _import_cli() -> bytes:
    """Import ``rl_lightning.cli`` (the import every child inherits); what it printed to stderr (warnings)."""
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            import rl_lightning.cli  # noqa: F401

            sys.stderr.flush()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        return captured.read()


def _child(argv: list[str], cwd: str, environ: dict[str, str], extra_path: list[str], out: str, err: str,
           import_stderr: bytes) -> None:  # fmt: skip
    """In the forked process: what ``python ARGV`` would do (``-m MODULE``, ``-c CODE`` or a script), then exit.

    What the server's import printed to stderr (a warning) is written first, as a fresh interpreter prints it.
    """
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):  # fmt: skip
        handle = os.open(path, flags, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    os.write(2, import_stderr)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the interpreter's own stdin object, now /dev/null
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environ)
    sys.path[1:1] = extra_path  # PYTHONPATH's entries come right after the script's or working directory
    code = 0
    try:
        if argv[0] == "-m":  # the working directory first on the path, the module run as __main__
            sys.path[0] = cwd
            sys.argv = [argv[1], *argv[2:]]
            sys.modules.pop(argv[1], None)  # as in a fresh interpreter, only its imports are already loaded
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.path[0] = ""
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        else:
            script = str(Path(cwd, argv[0]))
            sys.path[0] = str(Path(script).parent)
            sys.argv = list(argv)
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - uncaught: the traceback and exit code 1, as the interpreter does
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    _serve()
