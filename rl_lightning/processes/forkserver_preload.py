"""Imported by the fork server of this package's child processes before it forks any (``child_processes.
forking_context``): it imports the program's main module by name (``python -m rl_lightning.cli``), for the modules
that module imports, then forgets the module itself.

Every child re-runs the main module as ``__mp_main__``, as ``spawn`` does; with its imports already loaded in the
server that costs milliseconds, and with the module itself out of ``sys.modules`` runpy has no reason to warn that
it was imported twice.
"""

from __future__ import annotations

import importlib
import os
import sys

MAIN_MODULE_VARIABLE = "RL_LIGHTNING_FORKSERVER_MAIN"

_name = os.environ.get(MAIN_MODULE_VARIABLE)
if _name:
    importlib.import_module(_name)
    sys.modules.pop(_name, None)
