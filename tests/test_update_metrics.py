"""Each update's metrics reach the monitors (``trainer.callback_metrics``) without Lightning's per-key ``self.log``.

``RLModule.log_update`` publishes the update's scalars straight into ``trainer.callback_metrics`` (``self.log`` cost
~0.2 ms per key, 10% of a CartPole PPO training step). What a user sees must not change: the values are the ones
the update computed, ``ModelCheckpoint`` and ``EarlyStopping`` can monitor them, and counters stay exact.
"""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from helpers import tiny_dreamer, tiny_ppo, tiny_spo, trainer

from rl_lightning.callbacks import RLCheckpoint
from rl_lightning.envs import CartPole
from rl_lightning.reporting.env_step_log import publish_to_callbacks


class _Seen(pl.Callback):
    """Records, after each update, what monitors would read and what the module computed."""

    def __init__(self) -> None:
        self.published: list[dict[str, float]] = []
        self.computed: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.published.append({k: float(v) for k, v in trainer.callback_metrics.items()})
        self.computed.append({k: float(v) for k, v in pl_module.last_metrics.items()})


def _no_self_log(monkeypatch) -> None:
    def refuse(self, *args, **kwargs):
        raise AssertionError("an update went through LightningModule.log")

    monkeypatch.setattr(pl.LightningModule, "log", refuse)


@pytest.mark.parametrize("algo", ["ppo", "spo", "dreamer"])
def test_each_update_publishes_what_it_computed_without_self_log(tmp_path, monkeypatch, algo):
    builders = {
        "ppo": lambda: tiny_ppo(total_env_steps=192),
        "spo": lambda: tiny_spo(total_env_steps=96),
        "dreamer": lambda: tiny_dreamer(CartPole(max_episode_steps=8), total_env_steps=96, learning_starts=16),
    }
    model, datamodule = builders[algo]()
    _no_self_log(monkeypatch)
    seen = _Seen()
    trainer(tmp_path, callbacks=[seen]).fit(model, datamodule)
    assert len(seen.published) >= 2
    for published, computed in zip(seen.published, seen.computed, strict=True):
        finite = {k: v for k, v in computed.items() if v == v}  # NaN stats are not published
        assert finite
        assert set(finite) <= set(published)
        for key, value in finite.items():
            assert published[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    assert seen.published[-1]["env_steps"] == model.env_steps
    assert seen.published[-1]["updates"] == model.updates


def test_checkpoint_monitors_an_update_metric(tmp_path):
    """``RLCheckpoint(monitor="train/loss", mode="min", save_top_k=1)`` keeps the update with the lowest loss."""
    model, datamodule = tiny_ppo(total_env_steps=320)
    seen = _Seen()
    best = RLCheckpoint(
        every_n_updates=1, dirpath=str(tmp_path / "ckpt"), monitor="train/loss", mode="min", save_top_k=1
    )
    trainer(tmp_path, callbacks=[seen, best], enable_checkpointing=True).fit(model, datamodule)
    losses = [p["train/loss"] for p in seen.published]
    assert len(losses) == 5
    assert float(best.best_model_score) == pytest.approx(min(losses), rel=1e-6)
    saved = torch.load(best.best_model_path, weights_only=False)
    assert saved["global_step"] == 4 * (losses.index(min(losses)) + 1)  # 2 epochs x 2 minibatches per update


def test_published_counters_stay_exact_past_float32():
    """Env-step counters name checkpoints (``{env_steps:.0f}``): 2**24 + 1 must not round to 2**24."""
    trainer_ = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    publish_to_callbacks(trainer_, {"env_steps": float(2**24 + 1), "train/loss": 0.5})
    assert f"{trainer_.callback_metrics['env_steps']:.0f}" == str(2**24 + 1)
    assert float(trainer_.callback_metrics["train/loss"]) == 0.5
