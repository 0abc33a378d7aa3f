"""The package stays readable at a glance: no file over 400 lines, no function over 70 (STYLE.md, practices 10, 14).

``python tests/test_house_sizes.py`` lists every file and function over its limit, longest first.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rl_lightning"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 70


def long_files(limit: int = MAX_FILE_LINES) -> list[tuple[int, str]]:
    """``(lines, path)`` of every package file over ``limit`` lines."""
    sizes = [(len(path.read_text().splitlines()), str(path.relative_to(PACKAGE.parent))) for path in _sources()]
    return sorted((size for size in sizes if size[0] > limit), reverse=True)


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str]]:
    """``(lines, path:line name)`` of every function or method over ``limit`` lines, decorators not counted."""
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > limit:
                    found.append((lines, f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"))
    return sorted(found, reverse=True)


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_package_file_is_over_the_line_limit():
    assert long_files() == [], f"files over {MAX_FILE_LINES} lines: split them where a reader gains"


def test_no_function_is_over_the_line_limit():
    assert long_functions() == [], f"functions over {MAX_FUNCTION_LINES} lines: name their parts"


def test_the_checks_see_the_package():
    assert len(_sources()) > 100
    assert long_functions(limit=30), "no function over 30 lines at all: the walk is not reading the sources"


if __name__ == "__main__":
    for lines, where in long_files():
        print(f"file {lines:5d}  {where}")
    for lines, where in long_functions():
        print(f"func {lines:5d}  {where}")
