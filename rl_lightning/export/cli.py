"""``rl-lightning export --ckpt_path P --format onnx|torch_export [--out FILE] [--stochastic]``.

Dispatched by ``rl_lightning.cli.main`` before LightningCLI; its errors are ``ConfigError``s, which ``main`` prints
as one ``rl-lightning: error: ...`` line with exit code 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from rl_lightning.errors import ConfigError
from rl_lightning.export import FORMATS, MASK_DTYPES, export_policy


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are the project's one-line ``ConfigError`` instead of usage text and exit 2."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"export: {message}; usage: {self.format_usage().strip().removeprefix('usage: ')}")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rl-lightning export", description="Write a trained policy as an ONNX or torch.export file.")
    p.add_argument("--ckpt_path", required=True, help="a .ckpt that rl-lightning fit saved")
    p.add_argument("--format", required=True, help=f"one of {', '.join(FORMATS)}")
    p.add_argument("--out", default=None, help="the file to write (default: the checkpoint's path, format suffix)")
    p.add_argument(
        "--stochastic",
        action="store_true",
        help="sample with a `noise` input (U[0,1) per logit, N(0,1) per action dim) instead of the mode",
    )
    p.add_argument("--mask_dtype", default="bool", help=f"dtype of the action_mask input: {', '.join(MASK_DTYPES)}")
    return p


def main(args: Sequence[str]) -> None:
    """Parse ``args`` (after ``export``), write the file and print what it takes and returns."""
    ns = parser().parse_args(list(args))
    path, graph = export_policy(ns.ckpt_path, ns.format, ns.out, ns.stochastic, ns.mask_dtype)
    inputs = ", ".join(f"{t.name} {_dtype(t.dtype)}[B{''.join(f',{d}' for d in t.shape)}]" for t in graph.inputs)
    print(f"wrote {path} ({ns.format}); inputs: {inputs}; outputs: {', '.join(graph.outputs)}")


def _dtype(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")
