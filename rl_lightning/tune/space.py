"""Search spaces: a YAML map of dotted config keys to distributions, checked against the resolved config.

``search.yaml``::

    model.init_args.lr: {low: 1.0e-5, high: 1.0e-2, log: true}      # float, log-uniform
    model.init_args.update_epochs: {low: 2, high: 20, step: 2}       # int (the key holds an int)
    model.init_args.activation: {choices: [tanh, relu]}              # categorical
    data.init_args.env.init_args.max_episode_steps: {low: 200, high: 500}

A key's kind comes from the value it holds in the resolved config (an int key samples ints, a float key floats);
``type: int|float`` says it where the config holds ``null``. Keys may go into lists by index
(``trainer.callbacks.0.init_args.num_episodes``).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rl_lightning.errors import ConfigError

_NUMERIC_FIELDS = {"low", "high", "log", "step", "type"}
_SHAPES = "a distribution is {low, high[, log][, step][, type]} or {choices: [...]}"


@dataclass(frozen=True)
class Param:
    """One searched key: ``kind`` is ``int``, ``float`` or ``categorical``."""

    key: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def distribution(self) -> Any:
        """The Optuna distribution of this key."""
        import optuna.distributions as od

        if self.kind == "categorical":
            return od.CategoricalDistribution(list(self.choices))
        if self.kind == "int":
            return od.IntDistribution(int(self.low), int(self.high), log=self.log, step=int(self.step or 1))
        return od.FloatDistribution(float(self.low), float(self.high), log=self.log, step=self.step)

    def bounds(self) -> list[Any]:
        """Values a config parse must accept before any trial: the ends of a range, or every choice."""
        return list(self.choices) if self.kind == "categorical" else [self.distribution().low, self.distribution().high]


def load_search(path: str, config: dict[str, Any]) -> list[Param]:
    """Read ``path`` and check every entry against the resolved fit ``config``; one-line ``ConfigError`` if bad."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"--search {path!r}: no such file (a YAML map of dotted config keys to distributions)")
    try:
        spec = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"--search {path}: not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(spec, dict) or not spec:
        raise ConfigError(f"--search {path}: must be a non-empty map of dotted config keys to distributions")
    return [parse_param(f"{path}: {key}", str(key), entry, config) for key, entry in spec.items()]


def parse_param(where: str, key: str, entry: Any, config: dict[str, Any]) -> Param:
    """One ``key: distribution`` entry, checked against the value ``key`` holds in ``config``."""
    current = lookup(config, key, where)
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: {entry!r} is not a distribution; {_SHAPES}")
    if "choices" in entry:
        return _categorical(where, key, entry)
    unknown = sorted(set(entry) - _NUMERIC_FIELDS)
    if unknown or not {"low", "high"} <= set(entry):
        missing = sorted({"low", "high"} - set(entry))
        what = f"unknown field(s) {', '.join(map(str, unknown))}" if unknown else f"missing {', '.join(missing)}"
        raise ConfigError(f"{where}: {what}; {_SHAPES}")
    kind = _numeric_kind(where, current, entry.get("type"))
    low, high, log, step = entry["low"], entry["high"], entry.get("log", False), entry.get("step")
    for name, value in (("low", low), ("high", high), ("step", step)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ConfigError(f"{where}: {name}={value!r} is not a number")
        if kind == "int" and value is not None and value != int(value):
            raise ConfigError(f"{where}: {name}={value!r} is not an integer, but the key holds an int ({current!r})")
    if not isinstance(log, bool):
        raise ConfigError(f"{where}: log={log!r} must be true or false")
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ConfigError(f"{where}: low={low!r} > high={high!r}; give low <= high")
    if log and low <= 0:
        raise ConfigError(f"{where}: log=true needs low > 0 (got low={low!r})")
    if step is not None and (step <= 0 or log):
        raise ConfigError(f"{where}: step={step!r} must be > 0 and cannot be combined with log=true")
    return Param(key, kind, low, high, log, step)


def _categorical(where: str, key: str, entry: dict[str, Any]) -> Param:
    choices = entry["choices"]
    if set(entry) != {"choices"}:
        raise ConfigError(f"{where}: a categorical takes only 'choices' (got {sorted(entry)}); {_SHAPES}")
    if not isinstance(choices, list) or not choices:
        raise ConfigError(f"{where}: choices={choices!r} must be a non-empty list")
    allowed = (type(None), bool, int, float, str)
    for index, choice in enumerate(choices):
        if not isinstance(choice, allowed):
            raise ConfigError(
                f"{where}: choices[{index}]={choice!r} is a {type(choice).__name__}; Optuna stores only "
                "null, booleans, numbers and strings as choices"
            )
    if len({repr(c) for c in choices}) != len(choices):
        raise ConfigError(f"{where}: choices={choices!r} repeats a value")
    return Param(key, "categorical", choices=tuple(choices))


def _numeric_kind(where: str, current: Any, declared: Any) -> str:
    if declared is not None and declared not in ("int", "float"):
        raise ConfigError(f"{where}: type={declared!r} must be int or float")
    if isinstance(current, bool) or not isinstance(current, int | float | type(None)):
        raise ConfigError(
            f"{where}: a numeric range for a {type(current).__name__} value ({current!r}); "
            "use {choices: [...]} for non-numeric keys"
        )
    if current is None:
        if declared is None:
            raise ConfigError(f"{where}: the config holds null here; say type: int or type: float")
        return declared
    kind = "int" if isinstance(current, int) else "float"
    if declared is not None and declared != kind:
        raise ConfigError(f"{where}: type={declared} but the key holds a {kind} ({current!r})")
    return kind


def lookup(config: dict[str, Any], key: str, where: str) -> Any:
    """The value at dotted ``key`` (list items by index) of ``config``; a one-line error naming close keys."""
    node: Any = config
    walked: list[str] = []
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            options = (
                [str(k) for k in node]
                if isinstance(node, dict)
                else [str(i) for i in range(len(node))]
                if (isinstance(node, list))
                else []
            )
            close = difflib.get_close_matches(part, options, n=3)
            hint = (
                f"did you mean {', '.join('.'.join([*walked, c]) for c in close)}?"
                if close
                else (f"keys there: {', '.join(options[:12])}" if options else "that value has no keys")
            )
            raise ConfigError(f"{where}: no such key in the config ({'.'.join([*walked, part])!r}); {hint}")
        walked.append(part)
    return node


def assign(config: dict[str, Any], key: str, value: Any) -> None:
    """Set dotted ``key`` (which ``lookup`` found) of ``config`` to ``value`` in place."""
    *parents, last = key.split(".")
    node: Any = config
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
