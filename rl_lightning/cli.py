"""``rl-lightning``: LightningCLI for RL runs (``fit``/``validate``/``test``), bundled configs by name."""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.exceptions import SIGTERMException

from rl_lightning.algos.base import RLModule
from rl_lightning.callbacks.progress import EnvStepProgressBar
from rl_lightning.errors import ConfigError, EnvError
from rl_lightning.lineage import check_family

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
    """LightningCLI with env dims linked data → model, a thread-count knob, and RL-aware resume checks."""

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

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> pl.Trainer:
        configured = list(config.get("callbacks") or []) + list(callbacks)
        if config.get("enable_progress_bar", True) is not False and not any(
            isinstance(cb, ProgressBar) for cb in configured
        ):
            callbacks = [*callbacks, EnvStepProgressBar()]
        return super()._instantiate_trainer(config, callbacks)

    def before_fit(self) -> None:
        kwargs = self.config_init[self.subcommand]
        ckpt_path = kwargs.get("ckpt_path")
        if ckpt_path == "last":
            kwargs["ckpt_path"] = ckpt_path = _find_last_checkpoint(self.trainer)
        if ckpt_path:
            _check_checkpoint(ckpt_path, self.model)


def _find_last_checkpoint(trainer: pl.Trainer) -> str | None:
    """Newest ``last*.ckpt`` of any earlier version of this run (its logger's ``save_dir/name``), if one exists."""
    roots = []
    logger = trainer.logger
    if logger is not None and getattr(logger, "root_dir", None):
        roots.append(Path(logger.root_dir))
    for callback in trainer.checkpoint_callbacks:
        if getattr(callback, "dirpath", None):
            roots.append(Path(callback.dirpath))
    found = [p for root in roots if root.exists() for p in root.rglob("last*.ckpt")]
    if not found:
        pl.utilities.rank_zero_warn(f"ckpt_path=last: no last*.ckpt under {[str(r) for r in roots]}; starting fresh")
        return None
    return str(max(found, key=lambda p: p.stat().st_mtime))


def _check_checkpoint(ckpt_path: str, model: pl.LightningModule) -> None:
    path = Path(ckpt_path)
    if not path.is_file():
        raise ConfigError(f"ckpt_path={ckpt_path!r}: no such file; pass an existing .ckpt or 'last'")
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    if isinstance(model, RLModule):
        check_family(checkpoint, model.family, source=f"ckpt_path={ckpt_path!r}")


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
    """Rewrite every ``--config X`` / ``--config=X`` so bundled names work from any directory."""
    out: list[str] = []
    expect_value = False
    for arg in args:
        if expect_value:
            out.append(resolve_config(arg))
            expect_value = False
        elif arg == "--config":
            out.append(arg)
            expect_value = True
        elif arg.startswith("--config="):
            out.append("--config=" + resolve_config(arg.split("=", 1)[1]))
        else:
            out.append(arg)
    return out


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

    Exit codes: 2 for bad input or a failing env, 128 + the signal number after SIGTERM/SIGINT. The notes
    ``FaultCheckpoint`` adds (which checkpoint it saved) are part of the line.
    """
    try:
        cli_main(args)
    except SIGTERMException as err:  # SIGTERM, or a Ctrl+C deferred to an update boundary by FaultCheckpoint
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
