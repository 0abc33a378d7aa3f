"""One callback per class: a ``callbacks/*.yaml`` fragment replaces the bundled config's callback of its class."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rl_lightning.cli import cli_main
from tests.bundled_configs import bundled_configs

ROOT = Path(__file__).resolve().parents[1]
FRAGMENTS = sorted((ROOT / "callbacks").glob("*.yaml"))


def _one_config_per_callback_layout() -> list:
    """One bundled config per (algorithm, ordered callback classes): the merge depends on nothing else, and the
    Atari and MuJoCo configs only add seconds of env and CNN construction. The cheapest config of each layout."""
    chosen: dict[tuple, object] = {}
    costly = ("atari", "halfcheetah")

    def cost(param) -> tuple[bool, str]:
        return any(c in param.values[0].stem for c in costly), param.values[0].stem

    for param in sorted(bundled_configs(), key=cost):
        loaded = yaml.safe_load(param.values[0].read_text())
        layout = (loaded["model"]["class_path"], tuple(_short(cb["class_path"]) for cb in _entries_of(loaded)))
        chosen.setdefault(layout, param)
    return sorted(chosen.values(), key=lambda p: p.values[0].stem)


def _entries_of(loaded: dict) -> list[dict]:
    trainer = loaded.get("trainer") or {}
    return trainer.get("callbacks") or trainer.get("callbacks+") or []


def _entries(path: Path) -> list[dict]:
    return _entries_of(yaml.safe_load(path.read_text()))


def _short(class_path: str) -> str:
    return class_path.rsplit(".", 1)[-1]


CONFIGS = _one_config_per_callback_layout()


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=lambda p: p.stem)
@pytest.mark.parametrize("config", CONFIGS)
def test_fragment_replaces_the_bundled_callback_of_its_class(tmp_path, monkeypatch, config, fragment):
    monkeypatch.chdir(tmp_path)
    cli = cli_main(["--config", str(config), "--config", str(fragment), "--trainer.enable_progress_bar", "false"],
                   run=False)  # fmt: skip
    base = [_short(entry["class_path"]) for entry in _entries(config)]
    added = _entries(fragment)
    expected = base + [_short(entry["class_path"]) for entry in added if _short(entry["class_path"]) not in base]
    running = [cb for cb in cli.trainer.callbacks if type(cb).__name__ in expected]
    assert sorted(type(cb).__name__ for cb in running) == sorted(expected)  # one of each, nothing lost
    for entry in added:  # the fragment's settings are the ones in force
        (callback,) = [cb for cb in running if type(cb).__name__ == _short(entry["class_path"])]
        for key, value in (entry.get("init_args") or {}).items():
            assert getattr(callback, key) == value, (key, getattr(callback, key), value)
    names = [type(cb).__name__ for cb in running]
    evaluations = [name for name in names if name in ("Evaluation", "GameEvaluation")]  # GameEvaluation in games
    if "EarlyStopping" in names and evaluations:  # it reads eval/*, so it must run after the evaluation
        assert names.index(evaluations[0]) < names.index("EarlyStopping")


def test_checkpoint_fragment_keeps_the_best_and_writes_last(tmp_path, monkeypatch):
    """``callbacks/checkpoint.yaml`` is the run's only RLCheckpoint, so it must also write last.ckpt for resume."""
    monkeypatch.chdir(tmp_path)
    every_update = tmp_path / "eval_every_update.yaml"
    every_update.write_text(
        "trainer:\n  callbacks+:\n    - class_path: rl_lightning.callbacks.Evaluation\n"
        "      init_args: {every_n_updates: 1, num_episodes: 2}\n"
    )
    args = ["fit", "--config", "ppo", "--config", "callbacks/checkpoint.yaml", "--config", str(every_update),
            "--data.init_args.num_steps", "16", "--data.init_args.total_env_steps", "256",
            "--model.init_args.update_epochs", "1", "--trainer.enable_progress_bar", "false"]  # fmt: skip
    cli = cli_main(args)
    assert [type(cb).__name__ for cb in cli.trainer.callbacks].count("RLCheckpoint") == 1
    saved = sorted(p.name for p in (Path(cli.trainer.log_dir) / "checkpoints").glob("*.ckpt"))
    assert "last.ckpt" in saved
    assert [name for name in saved if name.startswith("best-")]
