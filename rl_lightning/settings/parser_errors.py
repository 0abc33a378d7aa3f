"""One-line errors of the ``fit``/``validate``/``test`` parser: the field and its innermost reason, and the valid option
nearest to a misspelt one (a parser's option, or an init argument of the configured class).

jsonargparse reports a bad value as the usage plus a nested report of every subclass it tried; these keep the line a
user can act on.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from typing import Any, NoReturn

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

from rl_lightning.errors import nearest


class RLArgumentParser(LightningArgumentParser):
    """Parser whose errors are one line (field and innermost reason) instead of the usage plus a nested report."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:  # type: ignore[override]
        if not self.exit_on_error:  # jsonargparse's internal trial parses: keep raising for it to catch
            super().error(message, ex)
        close = nearest_option(message, self)
        hint = f"; did you mean {close}?" if close else ""
        print(
            f"rl-lightning: error: {condense_error(message)}{hint} (see: rl-lightning {{fit,validate,test}} --help)",
            file=sys.stderr,
        )
        raise SystemExit(2)


_NOISE = ("Does not validate", "Subtypes:", "Errors:", "Given value", "- Expected a <class 'NoneType'>")


_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?:\S+ )*?(--[^\s=]+)")
_NOT_ACCEPTED_KEY = re.compile(r"(?:Subcommand '\w+'|Group '([\w.]+)') does not accept option '([\w.]+)'")
_NOT_ACCEPTED = re.compile(r"Parser key \"(\w+)\".*class_path '([\w.]+)'.*Option '([\w.]+)' is not accepted", re.S)


def nearest_option(message: str, parser: LightningArgumentParser) -> str | None:
    """The valid option nearest to the misspelt one a jsonargparse error names, if one is close: a class's init
    argument (``model.init_args.simulations``) or a parser's option (``--trainer.max_steps``)."""
    found = _NOT_ACCEPTED.search(message)
    if found:
        field, class_path, key = found.groups()
        first, dot, rest = key.partition(".")
        close = nearest(first, init_arguments(class_path))
        return f"{field}.init_args.{close}{dot}{rest}" if close else None
    subcommands = getattr(parser._subcommands_action, "_name_parser_map", {}) if parser._subcommands_action else {}
    options = {o for p in [parser, *subcommands.values()] for o in p._option_string_actions if o.startswith("--")}
    found = _NOT_ACCEPTED_KEY.search(message)  # a config file's key: the hint is a key too, without dashes
    if found:
        group, key = found.groups()
        close = nearest_option(f"unrecognized arguments: --{group + '.' if group else ''}{key}", parser)
        return close.removeprefix("--") if close else None
    found = _UNRECOGNIZED.search(message)
    if not found:
        return None
    typed = found.group(1)
    close = nearest(typed, options)
    if close:
        return close
    root, dot, rest = typed.partition(".")  # --modle.init_args.lr: nested keys are not options; fix the root
    roots = {option.split(".")[0] for option in options}
    close = None if root in roots else nearest(root, roots)
    return f"{close}{dot}{rest}" if close else None


def init_arguments(class_path: str) -> list[str]:
    """The ``__init__`` arguments of the class at ``class_path``, its bases' too where it passes ``**kwargs`` on."""
    cls = model_class(class_path)
    names: list[str] = []
    for klass in getattr(cls, "__mro__", ()):
        if "__init__" not in vars(klass):
            continue
        params = list(inspect.signature(vars(klass)["__init__"]).parameters.values())[1:]
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


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


def model_class(model_config: Any) -> type | None:
    """The configured model class (its ``family``: ``ppo``, ``spo``, ``dreamer``...), without building it."""
    class_path = model_config if isinstance(model_config, str) else None
    if isinstance(model_config, Namespace | dict):
        class_path = model_config.get("class_path")
    if not class_path:
        return None
    module_name, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module_name), name, None)
