"""Every import and every dotted ``rl_lightning.…`` name the docs and the README show resolves in the package.

The docs are the public surface: a module that moves, or a name that is renamed, fails here with the page and line
that still shows the old path, instead of in a reader's first paste.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

#: ``import rl_lightning…`` / ``from rl_lightning… import a, b`` at the start of a line (code blocks, most often);
#: a parenthesised name list runs on to its closing parenthesis.
IMPORT = re.compile(
    r"^[ \t]*(?:from rl_lightning[\w.]* import (?:\([^)]*\)|[^\n]*)|import rl_lightning[\w.]*[^\n]*)", re.M
)
#: A dotted name anywhere (prose, YAML ``class_path``, mkdocstrings ``::: rl_lightning.x.Y``); not a format id such as
#: ``rl_lightning.run_summary/1``.
DOTTED = re.compile(r"(?<![\w/.])rl_lightning(?:\.[A-Za-z_]\w*)+(?![\w/])")


def _statements(page: Path) -> list[tuple[int, str]]:
    text = page.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(0).strip()) for m in IMPORT.finditer(text)]


def _dotted(page: Path) -> list[tuple[int, str]]:
    text = page.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in DOTTED.finditer(text)]


def _cases(collect) -> list:
    cases = [(page, line, item) for page in PAGES for line, item in collect(page)]
    return [pytest.param(item, id=f"{page.relative_to(ROOT)}:{line}") for page, line, item in cases]


def resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest prefix that imports as a module, then attributes from there."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError as err:
            if err.name is None or not ".".join(parts[:split]).startswith(err.name):
                raise  # a module that exists but fails to import a dependency of its own
            continue
        for attribute in parts[split:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("statement", _cases(_statements))
def test_every_import_the_docs_show_works(statement):
    """Each imported name exists: ``from m import a`` is ``m.a`` (an attribute, or a submodule)."""
    for node in ast.parse(statement).body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                resolve(f"{node.module}.{alias.name}")
        else:
            assert isinstance(node, ast.Import), statement
            for alias in node.names:
                importlib.import_module(alias.name)


@pytest.mark.parametrize("dotted", _cases(_dotted))
def test_every_dotted_name_the_docs_show_resolves(dotted):
    resolve(dotted)


def test_the_pages_show_imports_and_names_to_check():
    """The patterns still find what they are for (a page format change would otherwise pass every case vacuously)."""
    assert sum(len(_statements(page)) for page in PAGES) >= 5
    assert sum(len(_dotted(page)) for page in PAGES) >= 100
