"""Bad tuning inputs fail before any trial, in one line, writing nothing; the objective's arithmetic."""

from __future__ import annotations

import pytest
import yaml

from rl_lightning.errors import ConfigError
from tests.cli_subprocess import error_line, run_cli, snapshot

pytest.importorskip("optuna")
from rl_lightning.tune.cli import main as tune_main  # noqa: E402
from rl_lightning.tune.trial import objective  # noqa: E402

BAD_SPACES = [
    ({"model.init_args.lrr": {"low": 1e-4, "high": 1e-2}}, "model.init_args.lrr", "did you mean model.init_args.lr"),
    ({"model.init_args.lr": {"low": 1e-2, "high": 1e-4}}, "model.init_args.lr", "low=0.01 > high=0.0001"),
    ({"model.init_args.activation": {"low": 0, "high": 1}}, "model.init_args.activation", "for a str value"),
    ({"model.init_args.activation": {"choices": []}}, "model.init_args.activation", "non-empty list"),
    ({"model.init_args.update_epochs": {"choices": [4, "many"]}}, "update_epochs: choice 'many'", "refused"),
    ({"model.init_args.lr": {"low": 0.0, "high": 1e-2, "log": True}}, "model.init_args.lr", "log=true needs low > 0"),
    ({"model.init_args.lr": {"low": 1e-4, "hihg": 1e-2}}, "model.init_args.lr", "unknown field(s) hihg"),
    ({"model.init_args.update_epochs": {"low": 1.5, "high": 4}}, "update_epochs", "not an integer"),
    ({"trainer.callbacks.9.init_args.num_episodes": {"low": 1, "high": 4}}, "trainer.callbacks.9", "no such key"),
]


@pytest.mark.parametrize(("space", "field", "reason"), BAD_SPACES)
def test_bad_search_space_is_one_config_error_before_any_trial(tmp_path, monkeypatch, space, field, reason):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "search.yaml").write_text(yaml.safe_dump(space))
    with pytest.raises(ConfigError) as err:
        tune_main(["--config", "ppo.yaml", "--search", "search.yaml", "--n_trials", "2"])
    message = str(err.value)
    assert "\n" not in message
    assert field in message, message
    assert reason in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["search.yaml"]  # no study dir, no db


def test_nested_and_list_keys_are_accepted(tmp_path, monkeypatch):
    """Keys inside class init_args and list items by index resolve against the parsed config (no trial run)."""
    from rl_lightning.tune.config import resolve_fit_config
    from rl_lightning.tune.space import parse_param

    config = resolve_fit_config(["--config", "ppo.yaml"])
    nested = parse_param("s", "data.init_args.env.init_args.max_episode_steps", {"low": 100, "high": 500}, config)
    listed = parse_param("s", "trainer.callbacks.0.init_args.num_episodes", {"low": 2, "high": 8, "step": 2}, config)
    assert (nested.kind, listed.kind) == ("int", "int")


def test_bad_input_from_the_cli_is_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "search.yaml").write_text(yaml.safe_dump({"model.init_args.lr": {"low": 1e-2, "high": 1e-4}}))
    before = snapshot(tmp_path)
    result = run_cli(["tune", "--config", "ppo.yaml", "--search", "search.yaml", "--n_trials", "2"], cwd=tmp_path)
    assert "low=0.01 > high=0.0001" in error_line(result)
    assert snapshot(tmp_path) == before
    missing = run_cli(["tune", "--config", "ppo.yaml", "--n_trials", "2"], cwd=tmp_path)
    assert "--search" in error_line(missing)


def test_objective_last_k_and_area_under_the_curve():
    curve = [{"env_steps": 100, "value": 10.0}, {"env_steps": 200, "value": 20.0}, {"env_steps": 400, "value": 50.0}]
    assert objective(curve, "last_k", 2) == 35.0
    assert objective(curve, "last_k", 9) == pytest.approx(80 / 3)
    assert objective(curve, "auc", 1) == pytest.approx((100 * 15 + 200 * 35) / 300)
    assert objective(curve[:1], "auc", 1) == 10.0
