"""``rl-lightning``: ``fit``/``validate``/``test`` (``rl_lightning.lightning_cli``) and the subcommands plugged in here.

Each subcommand is a module with ``main(argv)`` (``export``, ``record``, ``tune``), registered in ``SUBCOMMANDS``;
none imports this module back (docs/architecture.md). The names below ``main`` are re-exported for scripts and tests
that import them from here.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import ModuleType

import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from rl_lightning.data import record_cli
from rl_lightning.errors import ConfigError, EnvError
from rl_lightning.export import cli as export_cli
from rl_lightning.lightning_cli import TRAINER_DEFAULTS, RLLightningCLI, cli_main, one_callback_per_class
from rl_lightning.processes import stop
from rl_lightning.results import plot_cli
from rl_lightning.settings.cli_args import bundled_dirs, resolve_config, resolve_config_args
from rl_lightning.settings.parser_errors import RLArgumentParser, condense_error
from rl_lightning.tune import cli as tune_cli

__all__ = [
    "SUBCOMMANDS", "SUBCOMMAND_HELP", "TRAINER_DEFAULTS", "RLArgumentParser", "RLLightningCLI", "bundled_dirs",
    "cli_main", "close_process_group", "condense_error", "main", "one_callback_per_class",
    "put_working_directory_on_path", "resolve_config", "resolve_config_args",
]  # fmt: skip

#: ``rl-lightning NAME ...`` → the module whose ``main(argv)`` runs it (looked up at call time, so tests may patch it).
SUBCOMMANDS: dict[str, ModuleType] = {
    "export": export_cli,  # a checkpoint's policy as an ONNX or torch.export file: its own parser, no trainer
    "plot": plot_cli,  # curves, tables and rliable aggregates from TensorBoard runs (rl_lightning/results/)
    "record": record_cli,  # a bot's games as behaviour-cloning records (rl_lightning/data/records.py)
    "tune": tune_cli,  # an Optuna study whose trials are fits (rl_lightning/tune/)
}
#: What ``rl-lightning --help`` says of each (one line: argparse's help column is about 55 characters wide).
SUBCOMMAND_HELP = {
    "export": "Write a policy as an ONNX or torch.export file.",
    "plot": "Draw runs against env steps and wall time; tabulate.",
    "tune": "Search hyper-parameters: an Optuna study of fits.",
    "record": "Play a bot's games and save them for cloning (bc).",
}


def main(args: Sequence[str] | None = None) -> None:
    """Console entry point: bad input, a failing env or a stop signal becomes one ``rl-lightning: error: ...`` line.

    Exit codes: 2 for bad input or a failing env, 128 + the signal number after SIGTERM/SIGINT, which stop the
    run at the next env step or gradient step (``processes.stop``). The notes ``FaultCheckpoint`` adds (which
    checkpoint it saved) are part of the line.
    """
    put_working_directory_on_path()
    try:
        argv = list(sys.argv[1:] if args is None else args)
        if argv[:1] and argv[0] in SUBCOMMANDS:
            SUBCOMMANDS[argv[0]].main(argv[1:])
        else:  # only fit/validate/test poll the stop request; the other commands keep Python's signal defaults
            with stop.signals_request_stop():
                try:
                    cli_main(args, plugged={name: SUBCOMMAND_HELP.get(name, "") for name in SUBCOMMANDS})
                except SIGTERMException as err:  # Lightning raises its own when a SIGTERM followed a Ctrl+C
                    err.signum = stop.requested() or getattr(err, "signum", signal.SIGTERM)  # the first one wins
                    raise
        close_process_group()
    except SIGTERMException as err:  # SIGTERM or a first Ctrl+C: raised by ``stop.check()`` or at an update boundary
        signum = getattr(err, "signum", signal.SIGTERM)
        notes = "".join(f"; {note}" for note in getattr(err, "__notes__", []))
        print(f"rl-lightning: error: stopped by {signal.Signals(signum).name}{notes}", file=sys.stderr)
        raise SystemExit(128 + signum) from None
    except Exception as err:  # noqa: BLE001 - re-raised unless it is (or wraps) bad user input or a failing env
        cause = _user_error(err) or (err if isinstance(err, EnvError) else None)
        if cause is None:
            raise
        if getattr(cause, "said_on_rank_zero", False):  # a DDP rank stopping with rank 0's line: said once, there
            raise SystemExit(2) from None
        notes = "".join(f"; {note}" for note in getattr(err, "__notes__", []))
        print(f"rl-lightning: error: {cause}{notes}", file=sys.stderr)
        raise SystemExit(2) from None


def put_working_directory_on_path() -> None:
    """Put the working directory first on ``sys.path``, as ``python -m rl_lightning.cli`` does: a user's env module
    beside their config (``env_id: my_env:MyEnv-v0``, ``class_path: my_env.MyEnv``) imports from the ``rl-lightning``
    command too, whose ``sys.path[0]`` is the directory of the installed script. Actor processes unpickle their env
    with the learner's ``sys.path`` (multiprocessing hands it to every child it starts), DDP ranks re-run this
    function. ``python -P`` / ``PYTHONSAFEPATH`` (no working directory on the path) is respected."""
    working_directory = os.getcwd()
    if not sys.flags.safe_path and working_directory not in sys.path:
        sys.path.insert(0, working_directory)


def close_process_group() -> None:
    """Destroy the process group a DDP run leaves behind. With a gloo group still alive at interpreter exit, a rank
    sometimes aborts after the run has finished (SIGABRT, "terminate called without an active exception": 4 of 30
    two-rank CPU fits), which a script would read as a failed run."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _user_error(err: BaseException) -> BaseException | None:
    """The ConfigError/FloatingPointError behind ``err`` (jsonargparse wraps errors raised in constructors)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ConfigError | FloatingPointError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


if __name__ == "__main__":
    main()
