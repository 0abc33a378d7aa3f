"""The ``rl-lightning plot`` options that carry a small syntax (``GLOB=LABEL``, ``NAME=VALUE[@TASK]``, ``WxH``),
parsed before any run is read so that a malformed one is refused in one line."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rl_lightning.errors import ConfigError


@dataclass(frozen=True)
class Reference:
    """A published figure drawn as a horizontal line: ``--reference NAME=VALUE[@TASK]``."""

    name: str
    value: float
    task: str | None


@dataclass(frozen=True)
class PeerRuns:
    """A peer's runs drawn as another curve: ``--reference-runs LABEL=GLOB[@TASK]``."""

    label: str
    pattern: str
    task: str | None


@dataclass(frozen=True)
class Normalise:
    """A task's score range for the aggregate: ``--normalise TASK=LOW:HIGH`` maps LOW to 0 and HIGH to 1."""

    task: str
    low: float
    high: float


def pair(option: str, text: str, left: str, right: str) -> tuple[str, str]:
    """``LEFT=RIGHT`` split at its last ``=``, both sides non-empty (``--label 'runs/ppo*=PPO'``)."""
    head, sep, tail = text.rpartition("=")
    if not sep or not head.strip() or not tail.strip():
        raise ConfigError(f"{option} {text!r}: expected {left}={right}, e.g. {option} {_example(option)}")
    return head.strip(), tail.strip()


def reference(text: str) -> Reference:
    """Parse ``--reference NAME=VALUE[@TASK]``."""
    name, rest = pair("--reference", text, "NAME", "VALUE[@TASK]")
    value_text, _, task = rest.partition("@")
    return Reference(name=name, value=_number("--reference", text, value_text), task=task.strip() or None)


def peer_runs(text: str) -> PeerRuns:
    """Parse ``--reference-runs LABEL=GLOB[@TASK]``."""
    label, rest = pair("--reference-runs", text, "LABEL", "GLOB[@TASK]")
    pattern, _, task = rest.rpartition("@") if "@" in rest else (rest, "", "")
    if not pattern.strip():
        raise ConfigError(f"--reference-runs {text!r}: expected LABEL=GLOB[@TASK], e.g. {_example('--reference-runs')}")
    return PeerRuns(label=label, pattern=pattern.strip(), task=task.strip() or None)


def normalise(text: str) -> Normalise:
    """Parse ``--normalise TASK=LOW:HIGH`` (LOW a random policy's score, HIGH a reference's; LOW != HIGH)."""
    task, bounds = pair("--normalise", text, "TASK", "LOW:HIGH")
    low_text, sep, high_text = bounds.partition(":")
    if not sep:
        raise ConfigError(f"--normalise {text!r}: expected TASK=LOW:HIGH, e.g. {_example('--normalise')}")
    low, high = _number("--normalise", text, low_text), _number("--normalise", text, high_text)
    if low == high:
        raise ConfigError(f"--normalise {text!r}: LOW and HIGH are equal; HIGH is a reference score above random")
    return Normalise(task=task, low=low, high=high)


def size(text: str) -> tuple[int, int]:
    """Parse ``--size WxH``, in pixels (``1200x450``): the PNG comes out at exactly this size."""
    width, sep, height = text.lower().partition("x")
    if not sep or not width.isdigit() or not height.isdigit() or not (100 <= int(width) <= 10000 >= int(height) >= 100):
        raise ConfigError(f"--size {text!r}: expected WIDTHxHEIGHT in pixels, each 100 to 10000, e.g. --size 1200x450")
    return int(width), int(height)


def metrics(values: list[str] | None, default: str) -> list[str]:
    """``--metric`` values (repeated or comma lists) in order, without repeats; ``[default]`` when none."""
    tags = [tag.strip() for value in values or [default] for tag in value.split(",")]
    if not all(tags):
        raise ConfigError(f"--metric {','.join(values or [])!r}: an empty tag; e.g. --metric {default}")
    return list(dict.fromkeys(tags))


def _number(option: str, text: str, value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ConfigError(f"{option} {text!r}: {value.strip()!r} is not a finite number; e.g. {_example(option)}")
    return number


def _example(option: str) -> str:
    return {
        "--label": "'runs/ppo_*=PPO'",
        "--task": "'runs/peer/*=HalfCheetah-v5'",
        "--reference": "rl-zoo=5819",
        "--reference-runs": "'cleanrl=peer_runs/*'",
        "--normalise": "HalfCheetah-v5=-280:5819",
    }.get(option, "")
