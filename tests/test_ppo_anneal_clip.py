"""``anneal_clip``: the clip range each PPO update's loss uses, against SB3's linear schedule written out naively."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

import rl_lightning.algos.ppo as ppo_module
from rl_lightning.algos import RecurrentPPO
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.envs import CartPole
from tests.helpers import tiny_ppo, trainer


def sb3_linear_clip(clip: float, update: int, per_update: int, total: int) -> float:
    """SB3: after collecting rollout ``update`` (1-based), ``progress_remaining = 1 - num_timesteps / total`` and
    ``lin_<clip>`` gives ``progress_remaining * clip`` (clamped at 0 here: SB3's goes negative past the budget)."""
    num_timesteps = update * per_update
    return max(0.0, 1.0 - num_timesteps / total) * clip


def recorded_clips(monkeypatch, module, datamodule, tmp_path) -> list[float]:
    """Fit, recording the clip range handed to ``ppo_loss`` at each minibatch; one value per update (all equal)."""
    seen: list[tuple[int, float]] = []
    loss = ppo_module.ppo_loss

    def spy(*args):
        seen.append((module.updates, float(args[7])))
        return loss(*args)

    monkeypatch.setattr(ppo_module, "ppo_loss", spy)
    trainer(tmp_path).fit(module, datamodule)
    per_update: dict[int, set[float]] = {}
    for update, clip in seen:
        per_update.setdefault(update, set()).add(clip)
    assert all(len(clips) == 1 for clips in per_update.values()), per_update
    return [clips.pop() for _, clips in sorted(per_update.items())]


def tiny_recurrent(total_env_steps: int, **kwargs):
    env = CartPole(observe="position")
    datamodule = OnPolicyDataModule(env, num_envs=4, num_steps=16, total_env_steps=total_env_steps)
    kwargs = {"core_size": 8, "hidden_sizes": (8,), "update_epochs": 2, "num_minibatches": 2, **kwargs}
    model = RecurrentPPO(datamodule.env_spec, **kwargs)
    return model, datamodule


# RecurrentPPO shares PPO's loss path; its fit took ~30 s on the loaded 2-core box, so it runs with -m slow only.
@pytest.mark.parametrize("make", [tiny_ppo, pytest.param(tiny_recurrent, marks=pytest.mark.slow)], ids=["ppo", "rppo"])
def test_anneal_clip_follows_sb3_linear_schedule(make, monkeypatch, tmp_path):
    """300 env steps in rollouts of 64: 5 updates, the last past the budget (clip 0, where SB3's goes negative)."""
    pl.seed_everything(0)
    module, datamodule = make(total_env_steps=300, anneal_clip=True, clip_coef=0.3)
    clips = recorded_clips(monkeypatch, module, datamodule, tmp_path)
    expected = [sb3_linear_clip(0.3, update, 64, 300) for update in range(1, 6)]
    assert clips == pytest.approx(expected, abs=1e-7)
    assert clips[-1] == 0.0


def test_clip_stays_fixed_without_anneal_clip(monkeypatch, tmp_path):
    pl.seed_everything(0)
    module, datamodule = tiny_ppo(total_env_steps=192, clip_coef=0.3, anneal_lr=True)
    assert recorded_clips(monkeypatch, module, datamodule, tmp_path) == pytest.approx([0.3, 0.3, 0.3])
    assert "clip_now" not in dict(module.named_buffers())
