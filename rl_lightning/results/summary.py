"""The compact per-run summary: one JSON file per run that ``rl-lightning plot`` reads exactly like its event folder.

Benchmark suites commit these instead of event files. ``write_summary(run_dir, path)`` (or ``rl-lightning plot ...
--write-summaries DIR``) writes one; ``rl-lightning plot`` accepts ``*.json`` files (or folders holding them)
beside run folders, with the same figures and the same table. The format is stable; a change bumps ``FORMAT``.
The summary of a 4,096-step fit of ``ppo.yaml`` (its other tags left out; ``#`` comments are not part of the file)::

    {
      "format": "rl_lightning.run_summary/1",
      "source": "runs/ppo_cartpole/version_0",   # the run folder it was made from
      "task": "CartPole",                         # env_id, else the env class's name; null when unknown
      "group": "ppo_cartpole",                    # what it was drawn as: its label, else its config's name
      "label": null,                              # the --label that named the group, null for a config group
      "config": "ppo_cartpole",                   # the TensorBoard logger's name (else the run's folder)
      "config_digest": "8f9db2b478f6",            # the config without seeds and logger: equal for seeds of one config
      "algorithm": "PPO",                         # the model's class name; null when unknown
      "seed": 1,                                  # seed_everything; null when unknown
      "env_steps": 4096,                          # the last env step any scalar was logged at
      "wall_seconds": 0.720473051071167,          # first event to last scalar
      "scalars": {                                # every scalar tag: three lists of one length, in logging order
        "eval/episode_return": {"steps": [4096], "wall_times": [0.7203891277313232], "values": [158.60000610351562]}
      }
    }

``steps`` are env steps (the TensorBoard step ``rl_lightning`` logs at), ``wall_times`` seconds since the run's
first event, ``values`` the logged floats. ``env_steps`` and ``wall_seconds`` are informative: a reader recomputes
them from ``scalars``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rl_lightning.errors import ConfigError
from rl_lightning.results.events import read_run
from rl_lightning.results.run import Run, Series

FORMAT = "rl_lightning.run_summary/1"


def write_summary(run_dir: str | Path, path: str | Path) -> Path:
    """Write the summary of the TensorBoard run in ``run_dir`` to ``path`` (its group is its config's name)."""
    run = read_run(Path(run_dir), str(run_dir))
    run.group = run.config
    return save(run, Path(path))


def save(run: Run, path: Path) -> Path:
    """Write ``run`` as a summary JSON at ``path`` (folders made as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_dict(run), indent=1) + "\n")
    return path


def to_dict(run: Run) -> dict[str, Any]:
    """The summary of ``run`` as JSON-ready data (the module docstring's format)."""
    return {
        "format": FORMAT,
        "source": run.source,
        "task": run.task,
        "group": run.group or run.config,
        "label": run.label,
        "config": run.config,
        "config_digest": run.digest,
        "algorithm": run.algorithm,
        "seed": run.seed,
        "env_steps": run.env_steps,
        "wall_seconds": run.wall_seconds,
        "scalars": {
            tag: {"steps": s.steps.tolist(), "wall_times": s.wall.tolist(), "values": s.values.tolist()}
            for tag, s in run.scalars.items()
        },
    }


def is_summary(data: Any) -> bool:
    """Whether parsed JSON ``data`` is a run summary (of any version of the format)."""
    return isinstance(data, dict) and str(data.get("format", "")).startswith("rl_lightning.run_summary/")


def read_summary(path: Path, source: str | None = None) -> Run:
    """The ``Run`` a summary JSON holds; a file that is not one (or of another version) is refused in one line."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: not a readable JSON run summary ({type(err).__name__}: {err})") from None
    if not is_summary(data) or data["format"] != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ConfigError(
            f"{path}: not a run summary of format {FORMAT} (its format: {found!r}); "
            "write one with rl-lightning plot RUN_DIR --write-summaries DIR"
        )
    try:
        scalars = {
            tag: Series(
                steps=np.asarray(s["steps"], dtype=np.int64),
                wall=np.asarray(s["wall_times"], dtype=np.float64),
                values=np.asarray(s["values"], dtype=np.float64),
            )
            for tag, s in data["scalars"].items()
        }
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"{path}: scalars must map each tag to steps, wall_times and values lists ({err})") from None
    label = data.get("label")
    return Run(
        source=source or str(path),
        task=data.get("task"),
        config=str(data.get("config") or path.stem),
        digest=str(data.get("config_digest") or ""),
        algorithm=data.get("algorithm"),
        seed=data.get("seed"),
        scalars=scalars,
        group=str(data.get("group") or ""),
        label=label,
    )
