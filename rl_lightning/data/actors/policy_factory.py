"""``PolicyFactory``: what an actor process needs to build its own copy of a module's acting policy."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

#: Constructor arguments an actor's copy never needs: its weights arrive from the learner.
_LEARNER_ONLY = ("init_weights",)


@dataclass(frozen=True)
class PolicyFactory:
    """A picklable recipe for the acting module: its class path and constructor arguments, never the module itself.

    The actor builds the module once and then only copies weights into it (``SharedWeights.read_into``), so the
    recipe crosses the process boundary once, when the actor starts.

    Attributes:
        class_path: ``package.module.ClassName`` of the LightningModule.
        kwargs: its constructor arguments (``lineage.constructor_args`` of its hyper-parameters).
    """

    class_path: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, module: Any, kwargs: dict[str, Any]) -> PolicyFactory:
        """The recipe for ``module``'s class with ``kwargs``, less what only the learner uses."""
        kind = type(module)
        args = {name: value for name, value in kwargs.items() if name not in _LEARNER_ONLY}
        return cls(f"{kind.__module__}.{kind.__qualname__}", args)

    def build(self) -> Any:
        """A fresh module on the CPU, in training mode (as the serial collector's module acts during a fit)."""
        module_name, _, class_name = self.class_path.rpartition(".")
        kind = getattr(importlib.import_module(module_name), class_name)
        return kind(**self.kwargs)
