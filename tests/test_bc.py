"""Behaviour cloning: masked cross-entropy, records, BC training on a bot's games, PPO started from BC's weights."""

from __future__ import annotations

import json

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from rl_lightning import keys
from rl_lightning.algos import BC, PPO
from rl_lightning.algos.bc import masked_cross_entropy
from rl_lightning.data import BCDataModule
from rl_lightning.data.records import load_records, record_games
from rl_lightning.errors import ConfigError
from rl_lightning.lineage import REVISION_KEY

pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')

from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.envs.games.bots import HeartsHeuristic  # noqa: E402


def test_masked_cross_entropy_equals_a_naive_per_row_loop():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 9, generator=gen) * 3
    mask = torch.rand(64, 9, generator=gen) < 0.5
    mask[torch.arange(64), torch.randint(0, 9, (64,), generator=gen)] = True  # at least one legal action per row
    action = torch.where(mask, torch.rand(64, 9, generator=gen), -1.0).argmax(-1)
    loss, accuracy = masked_cross_entropy(logits, mask, action)
    losses, hits = [], []
    for row in range(64):
        legal = mask[row].nonzero().squeeze(-1).tolist()
        z = sum(np.exp(float(logits[row, a])) for a in legal)
        losses.append(-(float(logits[row, action[row]]) - np.log(z)))
        hits.append(max(legal, key=lambda a: float(logits[row, a])) == int(action[row]))
    assert float(loss) == pytest.approx(np.mean(losses), rel=1e-5)
    assert float(accuracy) == pytest.approx(np.mean(hits))
    assert float(loss) < float(torch.nn.functional.cross_entropy(logits, action))  # the mask matters here


@pytest.fixture(scope="module")
def hearts_records(tmp_path_factory):
    env = OpenSpielEnv("open_spiel:hearts")
    path = tmp_path_factory.mktemp("records") / "hearts"
    record_games(env, HeartsHeuristic(), 24, path, seed=3, batch_size=12)
    return env, path


def test_records_hold_the_bots_decisions_in_game_order(hearts_records):
    env, path = hearts_records
    arrays, meta = load_records(path)
    assert meta["games"] == 24
    assert meta["shards"] == ["shard_00000.npz", "shard_00001.npz"]
    assert meta["records"] == len(arrays["action"])
    assert arrays["obs"].shape[1:] == (5088,)
    assert arrays["action_mask"][np.arange(len(arrays["action"])), arrays["action"]].all()
    assert (np.diff(arrays["game"]) >= 0).all()
    assert arrays["terminated"].sum() == 24  # each game ends once
    ends = np.flatnonzero(arrays["terminated"])
    assert (arrays["game"][ends] == np.arange(24)).all()
    assert arrays["reward"].sum() == pytest.approx(24 * (4 * 26 - 26))  # OpenSpiel's returns: 26 - points taken
    replay = HeartsHeuristic()(torch.from_numpy(arrays["obs"]), torch.from_numpy(arrays["action_mask"]),
                               torch.from_numpy(arrays["seat"]), torch.Generator())  # fmt: skip
    assert (replay.numpy() == arrays["action"]).all()
    again = load_records(record_games(env, HeartsHeuristic(), 12, path.with_name("again"), seed=3, batch_size=12))[0]
    assert (again["obs"] == arrays["obs"][: len(again["obs"])]).all()  # seeded: the first chunk's deals again


def test_record_refuses_an_existing_directory(hearts_records):
    env, path = hearts_records
    before = sorted(p.name for p in path.iterdir())
    with pytest.raises(ConfigError, match="exists already"):
        record_games(env, HeartsHeuristic(), 2, path)
    assert sorted(p.name for p in path.iterdir()) == before


def _trainer(epochs):
    return pl.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, accelerator="cpu", num_sanity_val_steps=0)  # fmt: skip


def _fit_bc(env, path, epochs, hidden=(64,), **data):
    pl.seed_everything(0)
    datamodule = BCDataModule(env, str(path), batch_size=64, **data)
    module = BC(env.spec, hidden_sizes=hidden, lr=1e-2)
    trainer = _trainer(epochs)
    trainer.fit(module, datamodule)
    return module, datamodule, trainer


def test_bc_clones_the_hearts_heuristic_on_held_out_games(hearts_records):
    env, path = hearts_records
    module, datamodule, _ = _fit_bc(env, path, epochs=6)
    # Whole held-out games (2 of 24), never trained on; the pass phase (which 3 of 13 cards) is the hard part.
    assert module.last_metrics["val/accuracy"] > 0.8
    assert len(datamodule.val_rows) > 100
    assert module.samples == 6 * len(datamodule.train_rows)


def test_a_users_own_npz_of_obs_mask_action_trains(hearts_records, tmp_path):
    env, path = hearts_records
    arrays, _ = load_records(path)
    mine = tmp_path / "mine.npz"  # only the three required arrays, no meta.json
    np.savez(mine, obs=arrays["obs"], action_mask=arrays["action_mask"], action=arrays["action"])
    module, datamodule, _ = _fit_bc(env, mine, epochs=1)
    assert len(datamodule.train_rows) + len(datamodule.val_rows) == len(arrays["action"])
    assert "val/accuracy" in module.last_metrics


@pytest.mark.parametrize(
    ("arrays", "expected"),
    [
        pytest.param({"obs": np.zeros((4, 5088), np.float32), "action": np.zeros(4, np.int64)},
                     "has no 'action_mask' array", id="no-mask"),  # fmt: skip
        pytest.param({"obs": np.zeros((4, 10), np.float32), "action_mask": np.ones((4, 52), bool),
                      "action": np.zeros(4, np.int64)}, "observations are (10,)", id="other-env"),  # fmt: skip
        pytest.param({"obs": np.zeros((4, 5088), np.float32), "action_mask": np.eye(4, 52, dtype=bool),
                      "action": np.array([0, 1, 3, 3])}, "row 2 of 4 is not", id="illegal-action"),  # fmt: skip
    ],
)
def test_bad_records_are_one_line(tmp_path, arrays, expected):
    np.savez(tmp_path / "bad.npz", **arrays)
    datamodule = BCDataModule(OpenSpielEnv("open_spiel:hearts"), str(tmp_path / "bad.npz"))
    with pytest.raises(ConfigError, match="data.path=") as err:
        datamodule.setup("fit")
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def _save(trainer, tmp_path, name):
    path = tmp_path / name
    trainer.save_checkpoint(path)
    return str(path)


def test_ppo_from_bc_weights_acts_as_the_bc_actor_with_fresh_counters(hearts_records, tmp_path):
    env, path = hearts_records
    bc, datamodule, trainer = _fit_bc(env, path, epochs=1, hidden=(32, 32))
    ckpt = _save(trainer, tmp_path, "bc.ckpt")
    ppo = PPO(env.spec, hidden_sizes=(32, 32), init_weights=ckpt)
    fresh = PPO(env.spec, hidden_sizes=(32, 32))
    rows = datamodule.val_rows[list(range(len(datamodule.val_rows)))]
    td = {keys.OBS: rows[keys.OBS], keys.ACTION_MASK: rows[keys.ACTION_MASK]}
    ppo_logits = ppo._logits(td, ppo.encoder(rows[keys.OBS]))
    bc_logits = bc._logits(td, bc.encoder(rows[keys.OBS]))
    assert torch.equal(ppo_logits, bc_logits)
    assert torch.equal(ppo.critic[0].weight, bc.critic[0].weight)
    assert (ppo.updates, ppo.policy_version, ppo.parent_version) == (fresh.updates, fresh.policy_version, -1) == (
        0, 0, -1)  # fmt: skip
    saved = torch.load(ckpt, weights_only=False)
    assert ppo.revision().parent_digest == saved[REVISION_KEY]["digest"]
    assert fresh.revision().parent_digest == ""


def test_init_weights_normaliser_statistics_travel_with_the_weights(hearts_records, tmp_path):
    env, path = hearts_records
    pl.seed_everything(0)
    module = BC(env.spec, hidden_sizes=(16,), normalize_obs=True)
    datamodule = BCDataModule(env, str(path), batch_size=64)
    trainer = _trainer(1)
    trainer.fit(module, datamodule)
    assert float(module.obs_normalizer.rms.count) > len(datamodule.train_rows)  # fitted to the training rows
    ckpt = _save(trainer, tmp_path, "bc_norm.ckpt")
    ppo = PPO(env.spec, hidden_sizes=(16,), normalize_obs=True, init_weights=ckpt)
    assert torch.equal(ppo.obs_normalizer.rms.mean, module.obs_normalizer.rms.mean)
    with pytest.raises(ConfigError, match="the model has no 'obs_normalizer"):
        PPO(env.spec, hidden_sizes=(16,), init_weights=ckpt)


def test_init_weights_refusals_are_one_line(hearts_records, tmp_path):
    env, path = hearts_records
    _, _, trainer = _fit_bc(env, path, epochs=1, hidden=(32, 32))
    ckpt = _save(trainer, tmp_path, "bc.ckpt")
    four = OpenSpielEnv("open_spiel:connect_four").spec
    cases = [
        ({"env_spec": env.spec, "init_weights": str(tmp_path / "nope.ckpt")}, "no such file"),
        ({"env_spec": env.spec, "hidden_sizes": (32, 16), "init_weights": ckpt},
         "'actor.2.weight' is (32, 32) there but (16, 32) here"),  # fmt: skip
        ({"env_spec": four, "hidden_sizes": (32, 32), "init_weights": ckpt},
         "was trained on open_spiel:hearts (obs_shape=(5088,))"),  # fmt: skip
    ]
    for kwargs, expected in cases:
        with pytest.raises(ConfigError, match="model.init_weights=") as err:
            PPO(**kwargs)
        assert expected in str(err.value)
        assert "\n" not in str(err.value)


def test_meta_json_of_records_is_plain_json(hearts_records):
    _, path = hearts_records
    meta = json.loads((path / "meta.json").read_text())
    assert meta["format"] == "rl_lightning.records"
    assert meta["obs_dtype"] == "float32"


def test_missing_records_are_recorded_at_start_up_when_a_bot_is_set(tmp_path):
    env = OpenSpielEnv("open_spiel:hearts")
    path = tmp_path / "fresh"
    datamodule = BCDataModule(env, str(path), bot="rl_lightning.envs.games.bots.HeartsHeuristic", record_games=2)
    datamodule.prepare_data()
    datamodule.setup("fit")
    assert json.loads((path / "meta.json").read_text())["games"] == 2
    assert len(datamodule.val_rows) > 0  # one of the two games held out
    assert len(datamodule.train_rows) > 0
    with pytest.raises(ConfigError, match="data.path='nowhere': no such records"):
        BCDataModule(env, "nowhere")
