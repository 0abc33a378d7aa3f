"""``rl-lightning fit|validate|test``: the LightningCLI of RL runs (``cli_main``), below the subcommands that reuse it.

``rl_lightning.cli`` dispatches to it; ``rl-lightning tune`` resolves its trials' configs through it. It wires the
callbacks a run's settings ask for (docs/architecture.md: an algorithm builds none of them): ``Histograms`` for
``model.histograms_every_n_updates``, ``EvalRequests`` for ``validate``/``test``, and the env-step progress bar.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import Callback, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.histograms import FIELD
from rl_lightning.callbacks.eval_requests import EvalRequests
from rl_lightning.callbacks.histograms import Histograms, check_histograms_config
from rl_lightning.callbacks.progress import EnvStepProgressBar
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import check_env_spec, check_family, check_weights_fit, read_checkpoint
from rl_lightning.settings.checkpoint_paths import find_last_checkpoint, log_beside_run
from rl_lightning.settings.cli_args import resolve_config_args
from rl_lightning.settings.cpu_bfloat16 import float32_fallback
from rl_lightning.settings.loggers import check_logger_config
from rl_lightning.settings.parser_errors import RLArgumentParser, model_class
from rl_lightning.settings.trainer_errors import trainer_setting_error

TRAINER_DEFAULTS: dict[str, Any] = {
    "max_epochs": -1,  # RL runs end on data.total_env_steps (or trainer.max_steps), never on epochs
    "log_every_n_steps": 1,  # one log call per update already
    "num_sanity_val_steps": 0,
    "logger": {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        # no ``hp_metric = -1`` placeholder tag: every curve here is logged at env steps, none is named hp_metric
        "init_args": {"save_dir": "runs", "name": "rl_lightning", "default_hp_metric": False},
    },
}


#: What ``rl-lightning --help`` says of each LightningCLI subcommand (Lightning's docstring lines were cut mid-sentence,
#: and its ``predict`` is not offered: an RL module has no predict dataloader). One line: argparse's help column.
SUBCOMMAND_HELP = {
    "fit": "Train a policy for data.total_env_steps env steps.",
    "validate": "Evaluate a checkpoint (--ckpt_path); logs eval/*.",
    "test": "Evaluate a checkpoint (--ckpt_path); logs test/*.",
}


class RLLightningCLI(LightningCLI):
    """LightningCLI with env dims linked data → model, a thread-count knob, and RL-aware checkpoint checks.

    ``--ckpt_path`` restores weights and training state only: the config the user gave (files and command-line
    overrides) wins over the checkpoint's saved hyper-parameters. A checkpoint that cannot be read, was written by
    another algorithm family, or was trained on an env of other observation/action shapes is refused with one line,
    for ``fit``, ``validate`` and ``test`` alike; ``validate``/``test`` need a checkpoint (a path or ``last``).
    """

    _checkpoint: dict[str, Any] | None = None  # read by _parse_ckpt_path, checked against the model, then dropped

    def __init__(self, *args: Any, plugged: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        """``plugged``: the subcommands ``rl_lightning.cli`` runs before this CLI (``export``, ...) and the line
        ``--help`` gives each; the other arguments are LightningCLI's."""
        self._plugged = dict(plugged or {})
        super().__init__(*args, **kwargs)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {name: skip for name, skip in LightningCLI.subcommands().items() if name in SUBCOMMAND_HELP}

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        """Lightning's subcommands with this CLI's help lines, then the plugged ones, so ``--help`` lists them all."""
        super()._add_subcommands(parser, **kwargs)
        action = parser._subcommands_action
        for choice in action._choices_actions:
            choice.help = SUBCOMMAND_HELP.get(choice.dest, choice.help)
        for name, summary in self._plugged.items():
            action.add_subcommand(name, self.init_parser(description=summary), help=summary)

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
        if subcommand in self._plugged:  # reached only with options before it: rl-lightning --config x.yaml export
            raise ConfigError(f"{subcommand} takes its own options after its name: rl-lightning {subcommand} --help")
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
        configured = model_class(config.get("model"))
        family = getattr(configured, "family", None)
        if family:
            played = getattr(configured, "plays_families", ()) if subcommand in ("validate", "test") else ()
            check_family(self._checkpoint, family, source=f"ckpt_path={ckpt_path!r}", accepted=played)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Callback]) -> pl.Trainer:
        callbacks = [*callbacks, *self._wired_callbacks(config)]
        configured = list(config.get("callbacks") or []) + list(callbacks)
        if config.get("enable_progress_bar", True) is not False and not any(
            isinstance(cb, ProgressBar) for cb in configured
        ):
            callbacks = [*callbacks, EnvStepProgressBar()]
        notice = float32_fallback(config)  # bfloat16 on a CPU that would emulate it: float32, said in one line
        if notice:
            pl.utilities.rank_zero_warn(notice)
            parsed = self.config.get(str(self.subcommand), self.config) if self.subcommand else self.config
            if parsed.get("trainer") is not None:  # the run's saved config.yaml records the precision it ran in
                parsed["trainer"]["precision"] = config["precision"]
        try:
            return super()._instantiate_trainer(config, callbacks)
        except ConfigError:
            raise
        except (MisconfigurationException, ValueError, TypeError) as err:
            raise trainer_setting_error(err, config) from err

    def _wired_callbacks(self, config: dict[str, Any]) -> list[Callback]:
        """What the run's settings ask for beyond ``trainer.callbacks``: ``Histograms`` for the model's
        ``histograms_every_n_updates`` (it replaces a listed ``Histograms``, so one cadence writes), and
        ``EvalRequests`` for ``validate``/``test`` (which play the run's evaluation)."""
        wired: list[Callback] = []
        every = getattr(self.model, "hparams", {}).get(FIELD)
        if every is not None:
            listed = config.get("callbacks")
            listed = [] if listed is None else listed if isinstance(listed, list) else [listed]
            config["callbacks"] = [cb for cb in listed if not isinstance(cb, Histograms)]
            wired.append(Histograms(every_n_updates=every))
        if self.subcommand in ("validate", "test"):
            wired.append(EvalRequests())
        return wired

    def before_fit(self) -> None:
        self._check_model_fits()
        self._check_checkpoint_fits()

    def before_validate(self) -> None:
        self._check_checkpoint_fits()
        widen_piped_console()

    def before_test(self) -> None:
        self._check_checkpoint_fits()
        widen_piped_console()

    def _check_model_fits(self) -> None:
        """Let the model refuse the datamodule (``check_config``: an env the algorithm cannot learn on, rollout
        arithmetic) before the callbacks judge it: what is trained is named first, not an evaluation's opponent that
        fails on the same game for another reason. The datamodule's setup runs it again among its own checks."""
        if isinstance(self.model, RLModule) and callable(getattr(self.datamodule, "check_fit_config", None)):
            self.model.check_config(self.datamodule)

    def _check_callbacks_fit(self) -> None:
        """Let each callback that can (``check_datamodule``) refuse the datamodule's env before the trainer starts
        (``Evaluation`` on a multi-seat game; ``GameEvaluation`` opponents that do not fit it)."""
        if self.datamodule is None:
            return
        for callback in self.trainer.callbacks:
            check = getattr(callback, "check_datamodule", None)
            if callable(check):
                check(self.datamodule)

    def _check_checkpoint_fits(self) -> None:
        """Refuse callbacks that cannot play the env; resolve ``ckpt_path=last``, then refuse a checkpoint whose env
        shapes or weights do not fit the model."""
        self._check_callbacks_fit()
        kwargs = self.config_init[self.subcommand]
        ckpt_path = kwargs.get("ckpt_path")
        if ckpt_path == "last":
            kwargs["ckpt_path"] = ckpt_path = find_last_checkpoint(self.trainer, required=self.subcommand != "fit")
            if ckpt_path is not None:
                self._checkpoint = read_checkpoint(ckpt_path)
                if isinstance(self.model, RLModule):
                    check_family(self._checkpoint, self.model.family, source=f"ckpt_path=last ({ckpt_path})")
        if ckpt_path is not None and self.subcommand in ("validate", "test"):
            log_beside_run(self.trainer, ckpt_path, self.subcommand)
        checkpoint, self._checkpoint = self._checkpoint, None
        if checkpoint is None or not isinstance(self.model, RLModule):
            return
        source = f"ckpt_path={ckpt_path!r}"
        check_env_spec(checkpoint, self.model.env_spec, source=source)
        check_weights_fit(checkpoint, self.model, source=source)


#: Columns of the results table when stdout is a pipe or file: Lightning sizes each column to the longest metric name
#: (at most 60 characters), so two columns need about 130; Rich would squeeze them into 80 and cut the names.
PIPED_WIDTH = 160


def widen_piped_console() -> None:
    """Let the ``validate``/``test`` results table print whole metric names when stdout is not a terminal.

    Rich takes a pipe to be 80 columns wide, so ``test/vs_heuristic/points_per_hand_seat0`` ... ``_seat3`` all read
    ``test/vs_heuristic/points_per_hand_s…``. A width the user set (``COLUMNS``) is kept.
    """
    try:
        from rich import get_console
    except ImportError:  # Lightning prints a plain table without Rich, folding names at 60 columns (not cutting them)
        return
    # Judged by the stream itself: FORCE_COLOR or TTY_COMPATIBLE (set by many CI runners) make Rich call a pipe a
    # terminal, and TERM=dumb then pins it to 80 columns unless both width and height are given.
    if sys.stdout.isatty() or "COLUMNS" in os.environ:
        return
    console = get_console()
    console.size = (max(console.width, PIPED_WIDTH), console.height)


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


def cli_main(
    args: Sequence[str] | None = None, run: bool = True, plugged: Mapping[str, str] | None = None
) -> RLLightningCLI:
    """Build (and by default run) the CLI; ``args`` defaults to ``sys.argv[1:]``, ``plugged`` as ``RLLightningCLI``."""
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
        plugged=plugged,
    )
