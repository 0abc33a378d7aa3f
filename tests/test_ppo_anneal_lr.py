"""``anneal_lr`` and ``anneal_lr_start``: the learning rate of each PPO update against schedules written out by hand."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

import rl_lightning.algos.ppo as ppo_module
from rl_lightning.errors import ConfigError
from tests.helpers import tiny_ppo, trainer


def recorded_lrs(monkeypatch, module, datamodule, tmp_path) -> list[float]:
    """Fit, recording the optimiser's lr at each minibatch loss; one value per update (all equal within one)."""
    seen: list[tuple[int, float]] = []
    loss = ppo_module.ppo_loss

    def spy(*args):
        seen.append((module.updates, module.optimizers().param_groups[0]["lr"]))
        return loss(*args)

    monkeypatch.setattr(ppo_module, "ppo_loss", spy)
    trainer(tmp_path).fit(module, datamodule)
    per_update: dict[int, set[float]] = {}
    for update, lr in seen:
        per_update.setdefault(update, set()).add(lr)
    assert all(len(lrs) == 1 for lrs in per_update.values()), per_update
    return [lrs.pop() for _, lrs in sorted(per_update.items())]


# 10 updates of 64 env steps over a 640-step budget; update k (1-based) sees (k - 1) × 64 steps done before its rollout.
WHOLE_RUN = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1]  # 1 - done / 640
FROM_HALF = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2]  # 1 up to 320 done, then (1 - done / 640) / 0.5


@pytest.mark.parametrize(("start", "fractions"), [(0.0, WHOLE_RUN), (0.5, FROM_HALF)], ids=["whole", "late"])
def test_anneal_lr_follows_the_hand_computed_schedule(start, fractions, monkeypatch, tmp_path):
    pl.seed_everything(0)
    module, datamodule = tiny_ppo(total_env_steps=640, lr=0.01, anneal_lr=True, anneal_lr_start=start)
    lrs = recorded_lrs(monkeypatch, module, datamodule, tmp_path)
    assert lrs == pytest.approx([0.01 * f for f in fractions], abs=1e-12)


def test_lr_fraction_edges():
    assert ppo_module.lr_fraction(0, 100, 0.75) == 1.0
    assert ppo_module.lr_fraction(75, 100, 0.75) == 1.0
    assert ppo_module.lr_fraction(90, 100, 0.75) == pytest.approx(0.4)
    assert ppo_module.lr_fraction(150, 100, 0.75) == 0.0  # past the budget: 0, not negative


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"anneal_lr": True, "anneal_lr_start": 1.0}, r"^model\.anneal_lr_start=1\.0 is invalid: use a fraction"),
        ({"anneal_lr": True, "anneal_lr_start": -0.1}, r"^model\.anneal_lr_start=-0\.1 is invalid"),
        ({"anneal_lr_start": 0.5}, r"^model\.anneal_lr_start=0\.5 is invalid: it only delays anneal_lr"),
    ],
)
def test_bad_anneal_lr_start_is_refused_in_one_line(kwargs, match):
    with pytest.raises(ConfigError, match=match) as caught:
        tiny_ppo(**kwargs)
    assert "\n" not in str(caught.value)
