"""The env-step progress bar as a user sees it (a subprocess, stdout piped): its total stays known to the end."""

from __future__ import annotations

import re

from tests.cli_subprocess import run_cli

BUDGET = 300  # not a whole number of 64-step rollouts: the run collects 5 of them, 320 env steps


def test_the_bar_counts_to_the_budget_rounded_up_to_whole_rollouts(tmp_path):
    """A run ends on the first whole rollout at or past ``data.total_env_steps``; the bar's total was the budget, so
    the last rollout overshot it and tqdm showed ``320/?`` (``50176/?`` for ppo.yaml's 50,000)."""
    args = ["fit", "--config", "ppo", "--data.init_args.num_envs", "4", "--data.init_args.num_steps", "16",
            "--data.init_args.total_env_steps", str(BUDGET), "--model.init_args.hidden_sizes", "[8]",
            "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
            "--trainer.callbacks", "[]"]  # fmt: skip
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # Every frame of the env-step bar.
    shown = re.findall(r"Training:.*?\| (\d+)/(\S+) \[[^\]\r\n]* env steps/s", result.stdout)
    assert shown, result.stdout[-3000:]
    assert all(total.isdigit() for _, total in shown), sorted({total for _, total in shown})
    done, total = (int(x) for x in shown[-1])
    steps = sorted({int(n) for n, _ in shown})
    rollout = steps[1] - steps[0] if len(steps) > 1 else steps[0]
    assert done == total, shown[-1]  # the bar ends full
    assert BUDGET <= total < BUDGET + rollout  # the budget rounded up to whole rollouts, no more
