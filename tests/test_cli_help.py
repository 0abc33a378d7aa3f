"""``rl-lightning --help`` as a user runs it (a subprocess): every subcommand listed, each with one line saying what
it does; Lightning's ``predict``, which an RL module does not serve, is not offered."""

from __future__ import annotations

import re

from tests.cli_subprocess import error_line, run_cli

SUBCOMMANDS = ("fit", "validate", "test", "export", "plot", "tune", "record")


def test_top_level_help_lists_every_subcommand_with_one_line(tmp_path):
    result = run_cli(["--help"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    usage = re.search(r"\{([a-z,]+)\}", result.stdout)
    assert usage is not None, result.stdout
    assert sorted(usage.group(1).split(",")) == sorted(SUBCOMMANDS)  # it offered fit,validate,test,predict only
    listed = dict(re.findall(r"^    ([a-z]+) +(\S.*)$", result.stdout, re.M))
    assert sorted(listed) == sorted(SUBCOMMANDS), result.stdout
    for name, description in listed.items():  # a sentence of its own, not one cut at the column's end
        assert description.endswith("."), f"{name}: {description!r}"


def test_a_plugged_subcommand_after_options_says_where_its_options_go(tmp_path):
    """``export``/``tune``/``record`` parse their own options; LightningCLI reaches one only after options of its
    own, and refuses it in one line instead of running a trainer method of that name."""
    line = error_line(run_cli(["--config", "{}", "export"], tmp_path))
    assert "export takes its own options after its name: rl-lightning export --help" in line
