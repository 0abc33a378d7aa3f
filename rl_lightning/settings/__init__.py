"""Checks and fixes of a run's settings before anything is built: the command line (bundled config names, YAML
errors), the parser's errors, ``trainer.*``, ``trainer.logger`` and ``trainer.precision``.

They need only ``rl_lightning.errors`` and Lightning, so the CLI and every subcommand may use them.
"""
