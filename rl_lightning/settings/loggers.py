"""Checks on ``trainer.logger`` before anything is built: loggers other than TensorBoard fail in one line.

Every scalar reaches each configured logger through ``Logger.log_metrics(metrics, step=env_steps)``
(``env_step_log.log_at_env_step``), so CSV, MLflow and TensorBoard get the same keys at the same env steps.
MLflow 3 refuses its ``file:`` store (``./mlruns``) unless ``MLFLOW_ALLOW_FILE_STORE=true``; without that the
``MLFlowLogger`` constructor raises deep inside the config parser, so the CLI checks it first.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from rl_lightning.errors import ConfigError

_MLFLOW = "MLFlowLogger"


def check_logger_config(logger: Any) -> None:
    """Refuse, in one line, an ``MLFlowLogger`` that cannot start: mlflow missing, or a refused file store."""
    entries = logger if isinstance(logger, list) else [logger]
    for entry in entries:
        class_path = _get(entry, "class_path")
        if not isinstance(class_path, str) or class_path.rsplit(".", 1)[-1] != _MLFLOW:
            continue
        if importlib.util.find_spec("mlflow") is None:
            raise ConfigError(f'trainer.logger={class_path}: mlflow is not installed; pip install -e ".[mlflow]"')
        init_args = _get(entry, "init_args")
        uri = _get(init_args, "tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
        if (uri is None or uri.startswith("file:") or "://" not in uri) and _file_store_refused():
            raise ConfigError(
                f"trainer.logger.init_args.tracking_uri={uri!r}: this MLflow refuses its file store unless "
                "MLFLOW_ALLOW_FILE_STORE=true is set; set it, or use tracking_uri: sqlite:///mlflow.db"
            )


def _file_store_refused() -> bool:
    """Whether the installed MLflow refuses ``file:`` tracking stores (MLflow 3.x without the opt-in)."""
    from mlflow import environment_variables

    allow = getattr(environment_variables, "MLFLOW_ALLOW_FILE_STORE", None)
    return allow is not None and not allow.get()


def _get(node: Any, key: str) -> Any:
    if node is None:
        return None
    if isinstance(node, dict):
        return node.get(key)
    return getattr(node, key, None)
