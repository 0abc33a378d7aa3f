"""What counts as a warning in a CLI run's terminal output (shared by the subprocess tests)."""

from __future__ import annotations

import re

# How warnings reach a terminal: Python's "file.py:LINE: Category: msg", Lightning's shorter "file.py:LINE: msg"
# (it drops the category for its own warnings), and Lightning's INFO-level "💡 Tip:" adverts.
WARNING_LINE = re.compile(r"\.py:\d+: |warn|💡|Tip:", re.IGNORECASE)


def warning_lines(output: str) -> list[str]:
    """The lines of ``output`` that look like a warning."""
    return [line for line in output.splitlines() if WARNING_LINE.search(line)]
