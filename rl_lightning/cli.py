"""``rl-lightning``: LightningCLI for RL runs (``fit``/``validate``/``test``), bundled configs by name."""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import lightning.pytorch as pl
import torch
from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from rl_lightning import stop
from rl_lightning.algos.base import RLModule
from rl_lightning.callbacks.histograms import check_histograms_config
from rl_lightning.callbacks.progress import EnvStepProgressBar
from rl_lightning.cli_args import check_yaml_syntax, join_negative_values
from rl_lightning.errors import ConfigError, EnvError
from rl_lightning.lineage import check_env_spec, check_family, check_weights_fit, read_checkpoint
from rl_lightning.loggers import check_logger_config
from rl_lightning.trainer_errors import trainer_setting_error

_REPO_ROOT = Path(__file__).resolve().parents[1]
_SHARE_ROOT = Path(sys.prefix) / "share" / "rl_lightning"

TRAINER_DEFAULTS: dict[str, Any] = {
    "max_epochs": -1,  # RL runs end on data.total_env_steps (or trainer.max_steps), never on epochs
    "log_every_n_steps": 1,  # one log call per update already
    "num_sanity_val_steps": 0,
    "logger": {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": "runs", "name": "rl_lightning"},
    },
}


class RLArgumentParser(LightningArgumentParser):
    """Parser whose errors are one line (field and innermost reason) instead of the usage plus a nested report."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:  # type: ignore[override]
        if not self.exit_on_error:  # jsonargparse's internal trial parses: keep raising for it to catch
            super().error(message, ex)
        print(
            f"rl-lightning: error: {condense_error(message)} (see: rl-lightning {{fit,validate,test}} --help)",
            file=sys.stderr,
        )
        raise SystemExit(2)


_NOISE = ("Does not validate", "Subtypes:", "Errors:", "Given value", "- Expected a <class 'NoneType'>")


def condense_error(message: str) -> str:
    """Field of a jsonargparse error plus its most specific reason, on one line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return "invalid arguments"
    details = [line.lstrip("- ") for line in lines if not line.startswith(_NOISE)]
    keys_path = [d.split('"')[1] for d in details if d.startswith("Parser key") and d.count('"') >= 2]
    reasons = [d for d in details if not d.startswith(("Parser key", "Problem with given class_path"))]
    field = ".".join(keys_path)
    reason = reasons[0] if reasons else (details[-1] if details else "invalid value")
    return f"{field}: {reason}" if field else reason


class RLLightningCLI(LightningCLI):
    """LightningCLI with env dims linked data → model, a thread-count knob, and RL-aware checkpoint checks.

    ``--ckpt_path`` restores weights and training state only: the config the user gave (files and command-line
    overrides) wins over the checkpoint's saved hyper-parameters. A checkpoint that cannot be read, was written by
    another algorithm family, or was trained on an env of other observation/action shapes is refused with one line,
    for ``fit``, ``validate`` and ``test`` alike; ``validate``/``test`` need a checkpoint (a path or ``last``).
    """

    _checkpoint: dict[str, Any] | None = None  # read by _parse_ckpt_path, checked against the model, then dropped

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--num_threads",
            type=int,
            default=1,
            help="torch intra-op CPU threads; 1 is fastest for small RL nets on few cores (applied at start-up)",
        )
        parser.link_arguments("data.env_spec", "model.init_args.env_spec", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        threads = config.get("num_threads", 1)
        if threads < 1:
            raise ConfigError(f"num_threads={threads}: must be >= 1 (1 is fastest for small nets on CPU)")
        torch.set_num_threads(threads)
        check_logger_config(config.get("trainer.logger"))
        if self.subcommand == "fit":
            check_histograms_config(config)
        if isinstance(config.get("trainer.callbacks"), list):
            config["trainer.callbacks"] = one_callback_per_class(config["trainer.callbacks"])

    def _parse_ckpt_path(self) -> None:
        """Check ``--ckpt_path`` before any env or network is built, instead of LightningCLI's loading the
        checkpoint's hyper-parameters over the user's config (which dropped their overrides and hid a foreign
        checkpoint from every check)."""
        subcommand = self.config.get("subcommand")
        if subcommand is None:
            return
        config = self.config[subcommand]
        ckpt_path = config.get("ckpt_path")
        if ckpt_path is None and subcommand in ("validate", "test"):
            raise ConfigError(
                f"{subcommand} needs --ckpt_path (without one it would evaluate freshly initialised weights); "
                "pass --ckpt_path PATH (a .ckpt from a fit run) or --ckpt_path last (the newest last.ckpt of this run)"
            )
        if ckpt_path is None or ckpt_path == "last":  # 'last' is found once the logger's folder is known
            return
        self._checkpoint = read_checkpoint(ckpt_path)
        model_class = _model_class(config.get("model"))
        family = getattr(model_class, "family", None)
        if family:
            played = getattr(model_class, "plays_families", ()) if subcommand in ("validate", "test") else ()
            check_family(self._checkpoint, family, source=f"ckpt_path={ckpt_path!r}", accepted=played)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> pl.Trainer:
        configured = list(config.get("callbacks") or []) + list(callbacks)
        if config.get("enable_progress_bar", True) is not False and not any(
            isinstance(cb, ProgressBar) for cb in configured
        ):
            callbacks = [*callbacks, EnvStepProgressBar()]
        try:
            return super()._instantiate_trainer(config, callbacks)
        except ConfigError:
            raise
        except (MisconfigurationException, ValueError, TypeError) as err:
            raise trainer_setting_error(err, config) from err

    def before_fit(self) -> None:
        self._check_checkpoint_fits()

    def before_validate(self) -> None:
        self._check_checkpoint_fits()

    def before_test(self) -> None:
        self._check_checkpoint_fits()

    def _check_checkpoint_fits(self) -> None:
        """Resolve ``ckpt_path=last``, then refuse a checkpoint whose env shapes or weights do not fit the model."""
        kwargs = self.config_init[self.subcommand]
        ckpt_path = kwargs.get("ckpt_path")
        if ckpt_path == "last":
            kwargs["ckpt_path"] = ckpt_path = _find_last_checkpoint(self.trainer, required=self.subcommand != "fit")
            if ckpt_path is not None:
                self._checkpoint = read_checkpoint(ckpt_path)
                if isinstance(self.model, RLModule):
                    check_family(self._checkpoint, self.model.family, source=f"ckpt_path=last ({ckpt_path})")
        checkpoint, self._checkpoint = self._checkpoint, None
        if checkpoint is None or not isinstance(self.model, RLModule):
            return
        source = f"ckpt_path={ckpt_path!r}"
        check_env_spec(checkpoint, self.model.env_spec, source=source)
        check_weights_fit(checkpoint, self.model, source=source)


def one_callback_per_class(callbacks: list[Any]) -> list[Any]:
    """One callback per class: a later entry replaces an earlier one of the same ``class_path``, in its place.

    So ``--config ppo.yaml --config callbacks/eval.yaml`` runs the fragment's ``Evaluation`` instead of a second one
    fighting over the same ``eval/*`` keys; the bundled callback's position (and so the order) is kept.
    """
    kept: list[Any] = []
    position: dict[str, int] = {}
    for callback in callbacks:
        class_path = callback.get("class_path") if isinstance(callback, Namespace | dict) else None
        if class_path in position:
            kept[position[class_path]] = callback
            continue
        if class_path is not None:
            position[class_path] = len(kept)
        kept.append(callback)
    return kept


def _model_class(model_config: Any) -> type | None:
    """The configured model class (its ``family``: ``ppo``, ``spo``, ``dreamer``...), without building it."""
    class_path = model_config.get("class_path") if isinstance(model_config, Namespace | dict) else None
    if not class_path:
        return None
    module_name, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module_name), name, None)


def _find_last_checkpoint(trainer: pl.Trainer, required: bool) -> str | None:
    """Newest ``last*.ckpt`` of any earlier version of this run (its logger's ``save_dir/name``), if one exists."""
    roots = []
    logger = trainer.logger
    if logger is not None and getattr(logger, "root_dir", None):
        roots.append(Path(logger.root_dir))
    for callback in trainer.checkpoint_callbacks:
        if getattr(callback, "dirpath", None):
            roots.append(Path(callback.dirpath))
    found = [p for root in roots if root.exists() for p in root.rglob("last*.ckpt")]
    if not found and required:
        raise ConfigError(
            f"ckpt_path=last: no last*.ckpt under {[str(r) for r in roots]}; pass --ckpt_path PATH, or the same "
            "trainer.logger save_dir/name as the fit run"
        )
    if not found:
        pl.utilities.rank_zero_warn(f"ckpt_path=last: no last*.ckpt under {[str(r) for r in roots]}; starting fresh")
        return None
    return str(max(found, key=lambda p: p.stat().st_mtime))


def bundled_dirs() -> list[Path]:
    """Where bundled ``configs/`` and ``callbacks/`` live: the source tree, or the installed share dir."""
    return [root for root in (_REPO_ROOT, _SHARE_ROOT) if (root / "configs").is_dir()]


def resolve_config(value: str) -> str:
    """A ``--config`` value as given if it exists, else the bundled config or fragment of that name."""
    if Path(value).is_file() or value.lstrip().startswith(("{", "[")) or "\n" in value:
        return value
    name = value if value.endswith((".yaml", ".yml")) else f"{value}.yaml"
    candidates = []
    for root in bundled_dirs():
        candidates += [root / name, root / "configs" / name, root / "callbacks" / name]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    available = sorted(
        f"{sub}/{p.name}"
        for root in bundled_dirs()
        for sub in ("configs", "callbacks")
        for p in (root / sub).glob("*.yaml")
    )
    raise ConfigError(
        f"--config {value!r}: no such file and no bundled config of that name; bundled: {', '.join(available)}"
    )


def resolve_config_args(args: Sequence[str]) -> list[str]:
    """Rewrite every ``--config X`` / ``--config=X`` so bundled names work from any directory (and check its YAML
    syntax), and join ``--key -1e-3`` into ``--key=-1e-3``."""
    out: list[str] = []
    expect_value = False
    for arg in join_negative_values(args):
        if expect_value:
            out.append(_checked_config(arg))
            expect_value = False
        elif arg == "--config":
            out.append(arg)
            expect_value = True
        elif arg.startswith("--config="):
            out.append("--config=" + _checked_config(arg.split("=", 1)[1]))
        else:
            out.append(arg)
    return out


def _checked_config(value: str) -> str:
    resolved = resolve_config(value)
    if Path(resolved).is_file():
        check_yaml_syntax(resolved)
    return resolved


def cli_main(args: Sequence[str] | None = None, run: bool = True) -> RLLightningCLI:
    """Build (and by default run) the CLI; ``args`` defaults to ``sys.argv[1:]``."""
    if args is None:  # rewrite sys.argv in place: LightningCLI warns when given both
        sys.argv[1:] = resolve_config_args(sys.argv[1:])
        argv = None
    else:
        argv = resolve_config_args(list(args))
    return RLLightningCLI(
        RLModule,
        pl.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        trainer_defaults=TRAINER_DEFAULTS,
        parser_class=RLArgumentParser,
        save_config_kwargs={"overwrite": True},
        args=argv,
        run=run,
    )


def main(args: Sequence[str] | None = None) -> None:
    """Console entry point: bad input, a failing env or a stop signal becomes one ``rl-lightning: error: ...`` line.

    Exit codes: 2 for bad input or a failing env, 128 + the signal number after SIGTERM/SIGINT, which stop the
    run at the next env step or gradient step (``rl_lightning.stop``). The notes ``FaultCheckpoint`` adds (which
    checkpoint it saved) are part of the line.
    """
    try:
        argv = list(sys.argv[1:] if args is None else args)
        if argv[:1] == ["export"]:  # its own small parser: no trainer, no config
            from rl_lightning.export.cli import main as export_main

            export_main(argv[1:])
        elif argv[:1] == ["record"]:  # a bot's games as behaviour-cloning records (rl_lightning/data/records.py)
            from rl_lightning.data.record_cli import main as record_main

            record_main(argv[1:])
        elif argv[:1] == ["tune"]:  # an Optuna study whose trials are fits (rl_lightning/tune/)
            from rl_lightning.tune.cli import main as tune_main

            tune_main(argv[1:])
        else:  # only fit/validate/test poll the stop request; the other commands keep Python's signal defaults
            with stop.signals_request_stop():
                cli_main(args)
        close_process_group()
    except SIGTERMException as err:  # SIGTERM or a first Ctrl+C: raised by ``stop.check()`` or at an update boundary
        signum = getattr(err, "signum", signal.SIGTERM)
        notes = "".join(f"; {note}" for note in getattr(err, "__notes__", []))
        print(f"rl-lightning: error: stopped by {signal.Signals(signum).name}{notes}", file=sys.stderr)
        raise SystemExit(128 + signum) from None
    except Exception as err:  # noqa: BLE001 - re-raised unless it is (or wraps) bad user input or a failing env
        cause = _user_error(err) or (err if isinstance(err, EnvError) else None)
        if cause is None:
            raise
        notes = "".join(f"; {note}" for note in getattr(err, "__notes__", []))
        print(f"rl-lightning: error: {cause}{notes}", file=sys.stderr)
        raise SystemExit(2) from None


def close_process_group() -> None:
    """Destroy the process group a DDP run leaves behind. With a gloo group still alive at interpreter exit, a rank
    sometimes aborts after the run has finished (SIGABRT, "terminate called without an active exception": 4 of 30
    two-rank CPU fits), which a script would read as a failed run."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _user_error(err: BaseException) -> BaseException | None:
    """The ConfigError/FloatingPointError behind ``err`` (jsonargparse wraps errors raised in constructors)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ConfigError | FloatingPointError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


if __name__ == "__main__":
    main()
