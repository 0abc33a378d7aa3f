"""The layers of docs/architecture.md hold: ``lint-imports`` (import-linter, contracts in pyproject.toml) passes.

The contracts: one layers contract (errors/keys -> envs -> networks -> objectives -> data -> algos -> games ->
callbacks -> inference | lightning_cli -> export | tune -> cli, every top-level module placed), two independence
contracts (the algorithm families; Gymnasium backends and game engines) and no circles between siblings at any depth.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> list[str]:
    found = shutil.which("lint-imports") or shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip('import-linter is not installed (pip install -e ".[dev]")')
    return [found, "--config", str(ROOT / "pyproject.toml")]


def test_the_import_contracts_are_kept():
    result = subprocess.run(_lint_imports(), cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env())
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_an_up_import_breaks_the_layers_contract(tmp_path):
    """The contract is live: a copy of the package whose ``envs`` imports ``algos`` fails it, naming the import."""
    package = tmp_path / "rl_lightning"
    shutil.copytree(ROOT / "rl_lightning", package, ignore=shutil.ignore_patterns("__pycache__"))
    with (package / "envs" / "catch.py").open("a") as stream:
        stream.write("\nfrom rl_lightning.algos.base import RLModule  # noqa: E402,F401 - the up-import under test\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    result = subprocess.run(
        _lint_imports()[:1] + ["--config", str(tmp_path / "pyproject.toml")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=_env(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-4000:]
    assert "rl_lightning.envs is not allowed to import rl_lightning.algos" in result.stdout
    assert "rl_lightning.envs.catch -> rl_lightning.algos.base" in result.stdout


def _env(root: Path = ROOT) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root)}


#: A repository file a comment names: ``docs/architecture.md``, ``tests/test_layers.py``, ``mkdocs.yml``.
CITED = re.compile(r"(?<![\w/.*-])((?:[\w.-]+/)*[\w-]+\.(?:md|toml|py|yaml|yml))\b")


@pytest.mark.parametrize("name", [".ci/run", "pyproject.toml"])
def test_every_file_the_ci_and_the_contracts_cite_is_in_the_repository(name):
    """``.ci/run`` and the contracts' comments sent a reader to "DESIGN.md section 11", which is not in the
    repository; the layers are explained in ``docs/architecture.md``."""
    cited = set(CITED.findall((ROOT / name).read_text()))
    assert cited, name  # the pattern still finds what the file names
    assert sorted(path for path in cited if not (ROOT / path).is_file()) == []
