"""The documentation site builds: ``mkdocs build --strict`` (broken links, missing pages and API references fail).

Skips where MkDocs is not installed (``pip install -e '.[docs]'``). ``docs/incoming/`` (guide text other branches
are writing) is excluded from the build; a file dropped there must not break it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mkdocs() -> str:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    found = shutil.which("mkdocs") or shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("the mkdocs command is not installed (pip install -e '.[docs]')")
    return found


def test_the_site_builds_strict(tmp_path):
    """A copy of ``docs/`` plus an incoming page with a broken link: the strict build passes and leaves it out."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    (tmp_path / "docs" / "incoming").mkdir(exist_ok=True)
    (tmp_path / "docs" / "incoming" / "someone.md").write_text("# New guide\n\nSee [a page](nowhere.md).\n")
    site = tmp_path / "site"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    command = [_mkdocs(), "build", "--strict", "--site-dir", str(site)]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for page in ("index.html", "getting-started/index.html", "guides/games/index.html", "reference/algos/index.html"):
        assert (site / page).is_file(), page
    assert "gae_lambda" in (site / "reference/algos/index.html").read_text()  # the API pages come from docstrings
    assert not (site / "incoming").exists()
