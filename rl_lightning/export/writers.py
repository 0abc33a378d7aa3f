"""Write a ``PolicyGraph`` as a file another runtime loads: ONNX (``onnxruntime``, any language) or a
``torch.export`` program (``torch.export.load``; ``.pt2``).

Both go through ``torch.export`` with the batch dimension dynamic (any number of envs or seats per call). The ONNX
file comes from ``torch.onnx.export(..., dynamo=True)``, the exporter PyTorch develops (the TorchScript one is
deprecated since 2.9), which needs ``onnxscript``. A graph the exporter cannot translate is refused with one line
naming the operator or module it stopped at, and nothing is left at the destination: each writer saves to a
temporary file beside it and renames it into place only when the whole file is written.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from rl_lightning.errors import ConfigError
from rl_lightning.export.policy_graph import PolicyGraph

#: The ONNX exporter's operator registry logs "torchvision is not installed. Skipping torchvision::nms" (and three
#: more) on every export where torchvision is absent; a policy graph uses no torchvision operator.
_REGISTRY_LOGGER = "torch.onnx._internal.exporter._registration"


def _not_missing_torchvision(record: logging.LogRecord) -> bool:
    """A logging filter: drop only the registry's "torchvision is not installed" records."""
    return not str(record.msg).startswith("torchvision is not installed")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_OP = re.compile(r"(aten[.:]{1,2}[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?|torch\.ops\.[A-Za-z0-9_.]+)")


def write(graph: PolicyGraph, fmt: str, out: Path) -> None:
    """Write ``graph`` as ``fmt`` (``onnx`` or ``torch_export``) to ``out``, atomically."""
    writer: Callable[[PolicyGraph, Path], None] = {"onnx": _write_onnx, "torch_export": _write_program}[fmt]
    # torch.export.load wants a name ending in .pt2: keep the destination's suffix on the temporary file.
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.tmp", suffix=out.suffix or ".tmp", dir=out.parent)
    os.close(fd)
    try:
        writer(graph, Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it -rw-------; give it the mode open() would have
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _umask() -> int:
    """The process's umask (reading it means setting it: put it straight back)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def exported_program(graph: PolicyGraph) -> torch.export.ExportedProgram:
    """``torch.export`` of ``graph`` (batch dimension dynamic), or a one-line ``ConfigError`` naming what failed."""
    example = graph.example_inputs(2)
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    shapes = tuple({0: batch} for _ in example)
    try:
        with torch.no_grad():
            return torch.export.export(graph, example, dynamic_shapes={"inputs": shapes}, strict=False)
    except Exception as err:  # noqa: BLE001 - any exporter failure becomes one line naming its op
        raise ConfigError(f"export: torch.export cannot trace {type(graph).__name__}: {_culprit(err)}") from err


def _write_program(graph: PolicyGraph, path: Path) -> None:
    torch.export.save(exported_program(graph), str(path))


def _write_onnx(graph: PolicyGraph, path: Path) -> None:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401 - the dynamo exporter translates with it
    except ImportError:
        raise ConfigError('export --format onnx needs onnx and onnxscript: pip install -e ".[export]"') from None
    program = exported_program(graph)
    names = [t.name for t in graph.inputs]
    registry = logging.getLogger(_REGISTRY_LOGGER)
    registry.addFilter(_not_missing_torchvision)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnx_program = torch.onnx.export(
                program, (), dynamo=True, input_names=names, output_names=graph.outputs, optimize=True, verbose=False
            )
        onnx_program.save(str(path), external_data=False)
        _name_batch_dim(path)
    except Exception as err:  # noqa: BLE001 - any exporter failure becomes one line naming its op
        raise ConfigError(f"export: ONNX cannot express {type(graph).__name__}: {_culprit(err)}") from err
    finally:
        registry.removeFilter(_not_missing_torchvision)


def _name_batch_dim(path: Path) -> None:
    """Call the one dynamic dimension ``batch`` (the exporter names it after its symbol, e.g. ``s21``)."""
    import onnx

    model = onnx.load(str(path))
    for value in (*model.graph.input, *model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            dims[0].dim_param = "batch"
    onnx.save(model, str(path))


def _culprit(err: BaseException) -> str:
    """The operator an exporter error names (``aten.xxx``), else the error's first line."""
    seen: BaseException | None = err
    text = ""
    while seen is not None:
        text += f"\n{seen}"
        seen = seen.__cause__ or seen.__context__
    found = _OP.findall(text)
    if found:
        return f"operator {found[0]} has no translation in this format; replace it in the network or try another format"
    first = _ANSI.sub("", str(err)).strip().splitlines()
    return first[0][:300] if first else type(err).__name__
