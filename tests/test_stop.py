"""``rl_lightning.processes.stop``: SIGTERM / Ctrl+C handlers that request a stop, and the Python API's exit code."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rl_lightning.cli import main
from rl_lightning.processes import stop
from rl_lightning.processes.stop import Interrupted


def test_first_ctrl_c_requests_a_stop_and_a_second_aborts_at_once(capsys):
    before = signal.getsignal(signal.SIGINT)
    with stop.signals_request_stop():
        stop.check()  # nothing requested yet
        signal.raise_signal(signal.SIGINT)  # handled: no KeyboardInterrupt
        assert stop.requested() == signal.SIGINT
        with pytest.raises(Interrupted) as raised:
            stop.check()
        assert raised.value.code == 128 + signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before
    assert stop.requested() is None  # a later run in this process starts clean
    assert "Ctrl+C again to abort at once" in capsys.readouterr().err


def test_sigterm_still_reaches_the_handler_installed_before():
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with stop.signals_request_stop():
            with stop.signals_request_stop():  # nested (CLI, then FaultCheckpoint): changes nothing
                signal.raise_signal(signal.SIGTERM)
                assert stop.requested() == signal.SIGTERM
            assert stop.requested() == signal.SIGTERM
            signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM, signal.SIGTERM]
        assert stop.requested() is None
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_python_api_exits_with_128_plus_the_signal_and_one_line(tmp_path: Path, capsys):
    fragment = tmp_path / "signal.yaml"
    fragment.write_text(
        "trainer:\n  callbacks+:\n    - class_path: tests.slow_phases.SignalAfterUpdates\n"
        "      init_args: {signum: 2, updates: 1}\n"
    )
    args = [
        "fit", "--config", "ppo", "--config", str(fragment),
        "--data.init_args.num_envs", "2", "--data.init_args.num_steps", "8", "--data.init_args.total_env_steps", "160",
        "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    before = signal.getsignal(signal.SIGINT)  # Python's default_int_handler; SIG_IGN in an xdist worker
    with pytest.raises(SystemExit) as raised:
        main(args)
    assert raised.value.code == 128 + signal.SIGINT
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rl-lightning: error:")]
    assert len(lines) == 1
    assert lines[0].startswith("rl-lightning: error: stopped by SIGINT; checkpoint of update 1 saved to "), lines[0]
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored after the run


def test_the_first_stop_request_wins():
    """Ctrl+C then SIGTERM (a scheduler's notice during the wind-down) is still the Ctrl+C's stop: 130, not 143."""
    with stop.signals_request_stop():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
        assert stop.requested() == signal.SIGINT
        with pytest.raises(Interrupted) as raised:
            stop.check()
        assert raised.value.code == 128 + signal.SIGINT


def test_sigint_then_sigterm_exits_130_through_the_python_api(tmp_path: Path, capsys):
    fragment = tmp_path / "signal.yaml"
    fragment.write_text(
        "trainer:\n  callbacks+:\n    - class_path: tests.slow_phases.SignalAfterUpdates\n"
        "      init_args: {signum: 2, updates: 1, then: 15}\n"
    )
    args = [
        "fit", "--config", "ppo", "--config", str(fragment),
        "--data.init_args.num_envs", "2", "--data.init_args.num_steps", "8", "--data.init_args.total_env_steps", "160",
        "--model.init_args.update_epochs", "1", "--model.init_args.num_minibatches", "2",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    with pytest.raises(SystemExit) as raised:
        main(args)
    assert raised.value.code == 128 + signal.SIGINT
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rl-lightning: error:")]
    assert len(lines) == 1
    assert lines[0].startswith("rl-lightning: error: stopped by SIGINT; checkpoint of update 1 saved to "), lines[0]


def test_only_fit_validate_and_test_turn_signals_into_stop_requests(monkeypatch):
    """The other commands poll nothing: they keep Python's SIGTERM (end now) and Ctrl+C (KeyboardInterrupt)."""
    import rl_lightning.cli as cli
    import rl_lightning.export.cli as export_cli

    seen = {}
    monkeypatch.setattr(cli, "cli_main", lambda args, **_: seen.setdefault("fit", signal.getsignal(signal.SIGTERM)))
    monkeypatch.setattr(export_cli, "main", lambda argv: seen.setdefault("export", signal.getsignal(signal.SIGTERM)))
    outside = signal.getsignal(signal.SIGTERM)
    cli.main(["fit"])
    cli.main(["export"])
    assert seen["export"] is outside
    assert seen["fit"] is not outside  # the stop handler, while the fit runs
    assert signal.getsignal(signal.SIGTERM) is outside
