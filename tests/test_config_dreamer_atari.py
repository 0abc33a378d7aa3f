"""``configs/dreamer_atari.yaml`` as a user runs it (shrunk to seconds): a CLI fit on Breakout under the ``machado``
preset whose checkpoint holds the replay ring's frames as ``uint8`` ``(3, 64, 64)``."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tests.cli_subprocess import ROOT
from tests.test_env_gymnasium_cli import run_cli

TINY = {
    "model": {"init_args": {"size": "tiny"}},
    "data": {
        "init_args": {
            "total_env_steps": 64,
            "learning_starts": 32,
            "batch_size": 2,
            "sequence_length": 8,
            "commit_stride": 4,
            "replay_ratio": 0.05,
            "save_replay": True,
        },
    },  # fmt: skip
    "trainer": {
        "enable_progress_bar": False,
        "callbacks": [
            {
                "class_path": "rl_lightning.callbacks.RLCheckpoint",
                "init_args": {"every_n_updates": 1000, "save_last": True},
            }
        ],
    },
}


@pytest.mark.skipif(
    importlib.util.find_spec("ale_py") is None, reason='needs ale-py: pip install -e ".[atari]"'
)
def test_dreamer_atari_config_fits_with_uint8_frames_in_replay(tmp_path):
    env = {
        "class_path": "rl_lightning.envs.GymnasiumEnv",
        "init_args": {"env_id": "Breakout", "atari_preset": "machado"},
    }
    done = run_cli(tmp_path, env, base=str(ROOT / "configs" / "dreamer_atari.yaml"), tiny=TINY)
    assert done.returncode == 0, done.stderr[-3000:]
    (last,) = (tmp_path / "runs").glob("dreamer_atari/version_0/checkpoints/last.ckpt")
    checkpoint = torch.load(last, weights_only=False)
    (ring,) = [rank["ring"] for rank in checkpoint["DreamerDataModule"]["replay"]]
    frames = ring["storage"]["obs"]
    assert frames.dtype == torch.uint8
    assert tuple(frames.shape[-3:]) == (3, 64, 64)
    assert ring["size"] > 0
