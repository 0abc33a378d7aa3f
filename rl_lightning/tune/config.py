"""Fit configs for tuning: the resolved config of ``fit`` arguments, checked candidates, per-trial and best YAMLs."""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rl_lightning.errors import ConfigError
from rl_lightning.lightning_cli import cli_main, one_callback_per_class
from rl_lightning.tune.space import Param, assign

REPORT_CALLBACK = "rl_lightning.tune.report.TrialReport"


def resolve_fit_config(fit_args: Sequence[str]) -> dict[str, Any]:
    """The full config ``rl-lightning fit FIT_ARGS`` would run (its ``--print_config``), parsed in this process.

    Nothing is built or written. A bad argument is the CLI's own one-line error, raised as ``ConfigError``.
    """
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli_main(["fit", *fit_args, "--print_config"])  # exits once printed: nothing is built
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            lines = [line for line in err.getvalue().splitlines() if line.strip()]
            message = lines[-1] if lines else f"exit code {exit_.code}"
            raise ConfigError(message.removeprefix("rl-lightning: error: ")) from None
    config = yaml.safe_load(out.getvalue())
    if not isinstance(config, dict):
        raise ConfigError(f"could not resolve the fit config of {list(fit_args)}")
    callbacks = (config.get("trainer") or {}).get("callbacks")
    if isinstance(callbacks, list):  # as the fit will run them: a later callback of a class replaces an earlier one
        config["trainer"]["callbacks"] = one_callback_per_class(callbacks)
    return config


def resolve_dict(config: dict[str, Any]) -> dict[str, Any]:
    """``resolve_fit_config`` of a config given as a dict (through a temporary file, removed at once)."""
    with tempfile.TemporaryDirectory(prefix="rl_lightning_tune_") as folder:
        path = Path(folder) / "candidate.yaml"
        path.write_text(to_yaml(config))
        return resolve_fit_config(["--config", str(path)])


def check_candidates(config: dict[str, Any], params: list[Param], where: str) -> None:
    """Parse the config with every range end and every choice in place; one line naming the first refused value.

    Catches values the config's type hints refuse (a string choice for a float, a float for an int key) before
    any trial runs. Values only a constructor checks (an unknown activation name) fail that trial instead.
    """
    rounds = max(len(p.bounds()) for p in params)
    for index in range(rounds):
        candidate = copy.deepcopy(config)
        for param in params:
            values = param.bounds()
            assign(candidate, param.key, values[min(index, len(values) - 1)])
        try:
            resolve_dict(candidate)
        except ConfigError as err:
            raise ConfigError(f"{where}: {_culprit(config, params, index)}: {err}") from None


def _culprit(config: dict[str, Any], params: list[Param], index: int) -> str:
    """Which key's value made round ``index`` fail (re-parsed one key at a time, only on the failure path)."""
    for param in params:
        values = param.bounds()
        value = values[min(index, len(values) - 1)]
        candidate = copy.deepcopy(config)
        assign(candidate, param.key, value)
        try:
            resolve_dict(candidate)
        except ConfigError:
            label = f"choice {value!r}" if param.kind == "categorical" else f"value {value!r}"
            return f"{param.key}: {label} is refused by the config"
    return "a combination of values is refused by the config"


def with_params(config: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with each dotted key set to its value."""
    result = copy.deepcopy(config)
    for key, value in values.items():
        assign(result, key, value)
    return result


def base_seed(config: dict[str, Any]) -> int:
    """The seed trial seeds count up from: the config's ``seed_everything`` if it is a number, else 0."""
    seed = config.get("seed_everything")
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else 0


def trial_config(
    config: dict[str, Any], values: dict[str, Any], seed: int, study_dir: str, name: str, version: str, report: str
) -> dict[str, Any]:
    """One seed's fit config of a trial: the values, ``seed``, a TensorBoard run ``study_dir/name/version``, no
    progress bar, and the ``TrialReport`` callback writing each evaluation to ``report``."""
    result = with_params(config, values)
    result["seed_everything"] = seed
    trainer = result.setdefault("trainer", {})
    trainer["logger"] = {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": study_dir, "name": name, "version": version},
    }
    trainer["enable_progress_bar"] = False
    callbacks = list(trainer.get("callbacks") or [])
    callbacks.append({"class_path": REPORT_CALLBACK, "init_args": {"path": report}})
    trainer["callbacks"] = callbacks
    return result


def has_evaluation(config: dict[str, Any]) -> bool:
    """Whether the config's callbacks include ``rl_lightning.callbacks.Evaluation`` (the objective's source)."""
    callbacks = (config.get("trainer") or {}).get("callbacks") or []
    return any(
        isinstance(c, dict) and str(c.get("class_path", "")).rsplit(".", 1)[-1] == "Evaluation" for c in callbacks
    )


def to_yaml(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False)
