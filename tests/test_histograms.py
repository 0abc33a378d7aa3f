"""``model.histograms_every_n_updates``: TensorBoard histograms of each algorithm's update tensors, read back with
TensorBoard's own loader from tiny CLI fits and checked against the numbers the update actually had."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import HISTOGRAMS, EventAccumulator

from rl_lightning import keys
from rl_lightning.algos import PPO, SPO, RecurrentPPO
from rl_lightning.algos.dreamer import update_graphs
from rl_lightning.callbacks import Histograms
from rl_lightning.cli import cli_main, main
from rl_lightning.errors import ConfigError
from tests.cli_subprocess import snapshot

QUIET = {"trainer": {"callbacks": [], "enable_progress_bar": False, "enable_model_summary": False}}
ROLLOUT = ("advantage", "return", "value")


def _fit(tmp_path: Path, monkeypatch: Any, config: str, overrides: dict[str, Any], **trainer: Any) -> Any:
    """A tiny in-process ``rl-lightning fit --config CONFIG`` without the config's callbacks (or with
    ``trainer``'s settings)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quiet.yaml").write_text(yaml.safe_dump({"trainer": {**QUIET["trainer"], **trainer}}))
    args = [item for key, value in overrides.items() for item in (f"--{key}", str(value))]
    return cli_main(["fit", "--config", config, "--config", "quiet.yaml", *args])


def _histograms(log_dir: str) -> dict[str, list[tuple[int, Any]]]:
    """``{tag: [(step, HistogramValue)]}`` as TensorBoard's Histograms tab loads them."""
    accumulator = EventAccumulator(log_dir, size_guidance={HISTOGRAMS: 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.histogram_value) for event in accumulator.Histograms(tag)]
        for tag in accumulator.Tags()[HISTOGRAMS]
    }


def _record_updates(monkeypatch: Any, cls: type) -> dict[int, Any]:
    """``{update number: the batch that update trained on}``, recorded from ``cls.update``, which also checks that
    no earlier update's data is still kept (the callback drops it in the step that made it)."""
    batches: dict[int, Any] = {}
    original = cls.update

    def update(self: Any, batch: Any, optimizer: Any) -> Any:
        assert self.histogram_source is None, f"update {self.updates}'s data still kept"
        batches[self.updates + 1] = batch.clone()
        return original(self, batch, optimizer)

    monkeypatch.setattr(cls, "update", update)
    return batches


def _same(histogram: Any, values: torch.Tensor) -> None:
    """A histogram holds exactly ``values``: count, sum, sum of squares, min and max."""
    values = values.detach().double().reshape(-1)
    assert histogram.num == values.numel()
    assert histogram.sum == pytest.approx(values.sum().item(), rel=1e-6, abs=1e-12)
    assert histogram.sum_squares == pytest.approx(values.square().sum().item(), rel=1e-6, abs=1e-12)
    assert (histogram.min, histogram.max) == pytest.approx((values.min().item(), values.max().item()), rel=1e-6)


def _check_rollout(histograms: dict, batches: dict[int, Any], steps_per_update: int) -> None:
    for name in ROLLOUT:
        for step, histogram in histograms[f"rollout/{name}"]:
            _same(histogram, batches[step // steps_per_update][name])


def test_ppo_cartpole_histograms_hold_each_due_rollout_at_its_env_step(tmp_path, monkeypatch):
    batches = _record_updates(monkeypatch, PPO)
    loggers = [  # TensorBoard beside CSV: the histograms go to TensorBoard, the CSV keeps its scalars
        {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": "tb", "name": "r"}},
        {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "csv", "name": "r"}},
    ]
    cli = _fit(tmp_path, monkeypatch, "ppo", {
        "model.init_args.histograms_every_n_updates": 2, "model.init_args.update_epochs": 2,
        "data.init_args.num_envs": 4, "data.init_args.num_steps": 16, "data.init_args.total_env_steps": 256,
    }, logger=loggers)  # fmt: skip
    assert next((tmp_path / "csv").rglob("metrics.csv")).read_text().count("\n") == 1 + 4  # header, 4 updates
    histograms = _histograms(str(next((tmp_path / "tb").rglob("events.out.*")).parent))
    assert set(histograms) == {"rollout/advantage", "rollout/return", "rollout/value", "policy/logits"}
    for tag, events in histograms.items():
        assert [step for step, _ in events] == [128, 256], tag  # updates 2 and 4, 64 env steps each
    _check_rollout(histograms, batches, 64)
    module = cli.model  # the last histograms came after the last update: the logits of these weights
    with torch.no_grad():
        logits = module.actor(module.encoder(batches[4][keys.OBS]))
    _same(histograms["policy/logits"][-1][1], logits)


def test_ppo_halfcheetah_means_log_std_and_normaliser_statistics(tmp_path, monkeypatch):
    batches = _record_updates(monkeypatch, PPO)
    cli = _fit(tmp_path, monkeypatch, "ppo_halfcheetah", {
        "model.init_args.histograms_every_n_updates": 1, "model.init_args.update_epochs": 1,
        "model.init_args.hidden_sizes": "[16]", "data.init_args.num_steps": 32, "data.init_args.total_env_steps": 64,
    })  # fmt: skip
    histograms = _histograms(cli.trainer.log_dir)
    normalizers = {f"normalizer/{n}/{s}" for n in ("obs_normalizer", "reward_scaler") for s in ("mean", "var")}
    assert set(histograms) == {*(f"rollout/{n}" for n in ROLLOUT), "policy/mean", "policy/log_std", *normalizers}
    assert {tag: [step for step, _ in events] for tag, events in histograms.items()} == dict.fromkeys(
        histograms, [32, 64]
    )
    _check_rollout(histograms, batches, 32)
    module = cli.model  # the last histograms came after the last update and its statistics' update
    with torch.no_grad():
        mean = module.actor(module.encoder(module._obs(batches[2])))
    _same(histograms["policy/mean"][-1][1], mean)
    _same(histograms["policy/log_std"][-1][1], module.log_std)
    _same(histograms["normalizer/obs_normalizer/mean"][-1][1], module.obs_normalizer.rms.mean)
    _same(histograms["normalizer/obs_normalizer/var"][-1][1], module.obs_normalizer.rms.var)
    _same(histograms["normalizer/reward_scaler/var"][-1][1], module.reward_scaler.rms.var)


def test_recurrent_ppo_logits_equal_a_step_by_step_replay_of_the_rollout(tmp_path, monkeypatch):
    batches = _record_updates(monkeypatch, RecurrentPPO)
    cli = _fit(tmp_path, monkeypatch, "ppo_lstm_cartpole_novel", {
        "model.init_args.histograms_every_n_updates": 1, "model.init_args.update_epochs": 1,
        "model.init_args.core_size": 8, "model.init_args.hidden_sizes": "[8]",
        "data.init_args.num_envs": 4, "data.init_args.num_steps": 8, "data.init_args.total_env_steps": 64,
    })  # fmt: skip
    histograms = _histograms(cli.trainer.log_dir)
    assert {"policy/logits", "normalizer/obs_normalizer/mean", "normalizer/obs_normalizer/var"} <= set(histograms)
    assert [step for step, _ in histograms["policy/logits"]] == [32, 64]
    _check_rollout(histograms, batches, 32)
    module, rollout = cli.model, batches[2].reshape(8, 4)
    state, logits = rollout[keys.RECURRENT_STATE][0], []
    with torch.no_grad():
        for t in range(8):  # one tick at a time, as acting does, across the rollout's episode starts
            tick = rollout[t].select(keys.OBS, keys.IS_FIRST).clone()
            tick[keys.RECURRENT_STATE] = state
            out, _, _, state = module._core_step(tick)
            logits.append(module.actor(out))
    _same(histograms["policy/logits"][-1][1], torch.cat(logits))
    _same(histograms["normalizer/obs_normalizer/mean"][-1][1], module.obs_normalizer.rms.mean)


def test_spo_histograms_hold_the_search_weights_advantages_and_prior_logits(tmp_path, monkeypatch):
    rollouts: list[Any] = []
    original = SPO.process_rollout

    def process_rollout(self: Any, batch: Any) -> Any:
        rollouts.append(original(self, batch).clone())
        return rollouts[-1]

    monkeypatch.setattr(SPO, "process_rollout", process_rollout)
    cli = _fit(tmp_path, monkeypatch, "spo", {
        "model.init_args.histograms_every_n_updates": 1, "model.init_args.num_particles": 4,
        "model.init_args.hidden_sizes": "[16]", "data.init_args.num_envs": 4, "data.init_args.rollout_length": 16,
        "data.init_args.total_env_steps": 128, "data.init_args.gradient_steps": 1, "data.init_args.batch_size": 4,
        "data.init_args.sequence_length": 8,
    })  # fmt: skip
    histograms = _histograms(cli.trainer.log_dir)
    assert set(histograms) == {"search/weights", "search/advantages", "search/root_value", "policy/logits"}
    assert {tag: [step for step, _ in events] for tag, events in histograms.items()} == dict.fromkeys(
        histograms, [64, 128]
    )
    for index, (_, weights) in enumerate(histograms["search/weights"]):
        assert weights.num == 64 * 4
        assert weights.sum == pytest.approx(64, rel=1e-5)  # each row's particle weights are the target q̂: sum 1
        _same(weights, rollouts[index][keys.SAMPLED_WEIGHTS])
        _same(histograms["search/advantages"][index][1], rollouts[index][keys.SAMPLED_ADVANTAGES])
        _same(histograms["search/root_value"][index][1], rollouts[index][keys.SEARCH_VALUE])
    module = cli.model
    with torch.no_grad():
        logits = module.actor(module.prior.features(rollouts[-1][keys.OBS].flatten(0, 1)))
    _same(histograms["policy/logits"][-1][1], logits)


def test_dreamer_histograms_hold_the_imagined_returns_values_and_advantages(tmp_path, monkeypatch):
    steps: list[tuple[torch.Tensor, ...]] = []  # each gradient step's (returns, values, scale), as its losses see them
    region = update_graphs.REGIONS["behaviour_terms"]

    def behaviour_terms(ac: Any, features: Any, actions: Any, targets: Any, scale: Any, *args: Any) -> Any:
        steps.append((targets.returns.clone(), targets.value[:-1].clone(), scale.clone()))
        return region(ac, features, actions, targets, scale, *args)

    monkeypatch.setitem(update_graphs.REGIONS, "behaviour_terms", behaviour_terms)
    cli = _fit(tmp_path, monkeypatch, "dreamer", {
        "model.init_args.histograms_every_n_updates": 1, "model.init_args.horizon": 2,
        "model.init_args.retnorm_limit": 1e-9,  # the return scale is the percentile range, not the limit 1
        "data.init_args.rollout_length": 4, "data.init_args.total_env_steps": 48, "data.init_args.learning_starts": 17,
        "data.init_args.replay_ratio": 1 / 16, "data.init_args.batch_size": 2, "data.init_args.sequence_length": 4,
        "data.init_args.commit_stride": 2, "data.init_args.buffer_size": 256,
    })  # fmt: skip
    histograms = _histograms(cli.trainer.log_dir)
    assert set(histograms) == {"imagination/return", "imagination/value", "imagination/advantage"}
    assert cli.model.updates == len(steps) == 2  # one gradient step per update (replay ratio 1/16, 16 env steps)
    for tag, events in histograms.items():
        assert [step for step, _ in events] == [32, 48], tag  # after the prefill window, one per update
    for index, (returns, value, scale) in enumerate(steps):
        assert not torch.allclose(scale, torch.ones_like(scale))
        _same(histograms["imagination/return"][index][1], returns)  # [horizon, batch × sequence] starts
        _same(histograms["imagination/value"][index][1], value)
        _same(histograms["imagination/advantage"][index][1], (returns - value) / scale)


def _error_line(args: list[str], capsys: Any) -> str:
    """The one ``rl-lightning: error:`` line of a refused ``main(args)`` (no traceback)."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("rl-lightning: error:")]
    assert len(lines) == 1, err[-2000:]
    return lines[0]


BAD = [("ppo", "0"), ("ppo", "-3"), ("spo", "0"), ("dreamer", "-1")]


@pytest.mark.parametrize(("config", "value"), BAD, ids=[f"{c}={v}" for c, v in BAD])
def test_bad_cadence_is_one_line_naming_the_field_and_writes_nothing(tmp_path, monkeypatch, capsys, config, value):
    monkeypatch.chdir(tmp_path)
    line = _error_line(["fit", "--config", config, "--model.init_args.histograms_every_n_updates", value], capsys)
    assert f"model.histograms_every_n_updates={value} is invalid" in line
    assert "null (off" in line
    assert snapshot(tmp_path) == {}


def test_histograms_without_a_tensorboard_logger_are_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", "ppo", "--model.init_args.histograms_every_n_updates", "2",
            "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", "csv"]  # fmt: skip
    line = _error_line(args, capsys)
    assert "model.histograms_every_n_updates=2" in line
    assert "no TensorBoardLogger (found: CSVLogger)" in line
    assert snapshot(tmp_path) == {}


def test_the_callback_refuses_a_trainer_without_tensorboard_and_a_bad_cadence(tmp_path):
    """Outside the CLI (a Trainer built in Python) the callback's own setup refuses, before any step."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import CSVLogger

    from rl_lightning.data import OnPolicyDataModule
    from rl_lightning.envs import CartPole

    with pytest.raises(ConfigError, match="every_n_updates=0 must be >= 1"):
        Histograms(every_n_updates=0)
    data = OnPolicyDataModule(env=CartPole(), num_envs=2, num_steps=4, total_env_steps=8)
    with pytest.raises(ConfigError, match=r"^model.histograms_every_n_updates=0 is invalid"):
        PPO(env_spec=data.env_spec, histograms_every_n_updates=0)
    model = PPO(env_spec=data.env_spec, hidden_sizes=(4,), num_minibatches=1, histograms_every_n_updates=1)
    quiet = {"enable_progress_bar": False, "enable_model_summary": False}
    callbacks = [Histograms(every_n_updates=1)]  # the module builds no callback: a Python Trainer lists it
    trainer = pl.Trainer(logger=CSVLogger(tmp_path), max_epochs=-1, callbacks=callbacks, **quiet)
    with pytest.raises(ConfigError, match=r"^Histograms: .*no TensorBoardLogger \(found: CSVLogger\)"):
        trainer.fit(model, datamodule=data)
    assert model.updates == 0


def test_the_module_refuses_the_setting_without_the_callback(tmp_path):
    """``histograms_every_n_updates`` on a Trainer built in Python without ``Histograms``: refused at setup, in one
    line naming the setting and the fix, instead of a run that silently writes no histograms."""
    import lightning.pytorch as pl
    from lightning.pytorch.loggers import TensorBoardLogger

    from rl_lightning.data import OnPolicyDataModule
    from rl_lightning.envs import CartPole

    data = OnPolicyDataModule(env=CartPole(), num_envs=2, num_steps=4, total_env_steps=8)
    model = PPO(env_spec=data.env_spec, hidden_sizes=(4,), num_minibatches=1, histograms_every_n_updates=2)
    quiet = {"enable_progress_bar": False, "enable_model_summary": False}
    trainer = pl.Trainer(logger=TensorBoardLogger(tmp_path), max_epochs=-1, **quiet)
    fix = r"rl_lightning\.callbacks\.Histograms\(every_n_updates=2\)"
    with pytest.raises(ConfigError, match=rf"^model.histograms_every_n_updates=2: the Histograms callback .*{fix}"):
        trainer.fit(model, datamodule=data)
    assert model.updates == 0


def test_off_by_default_attaches_nothing_and_keeps_nothing(tmp_path, monkeypatch):
    cli = _fit(tmp_path, monkeypatch, "ppo", {
        "data.init_args.num_envs": 4, "data.init_args.num_steps": 16, "data.init_args.total_env_steps": 64,
        "model.init_args.update_epochs": 1,
    })  # fmt: skip
    assert cli.model.hparams.histograms_every_n_updates is None
    assert not any(isinstance(callback, Histograms) for callback in cli.trainer.callbacks)
    assert not cli.model.keep_histogram_source
    assert _histograms(cli.trainer.log_dir) == {}


def test_a_resumed_run_keeps_the_cadence(tmp_path, monkeypatch):
    """Every 3 updates: a run stopped after update 4 and resumed writes at update 6, not at its first update (5)."""
    checkpoint = {"class_path": "rl_lightning.callbacks.RLCheckpoint", "init_args": {"every_n_updates": 1}}
    overrides = {
        "model.init_args.histograms_every_n_updates": 3, "model.init_args.update_epochs": 1,
        "data.init_args.num_envs": 4, "data.init_args.num_steps": 16, "data.init_args.total_env_steps": 256,
    }  # fmt: skip
    first = _fit(tmp_path, monkeypatch, "ppo", overrides, callbacks=[checkpoint])
    assert [step for step, _ in _histograms(first.trainer.log_dir)["rollout/advantage"]] == [192]
    overrides.update({"data.init_args.total_env_steps": 384, "ckpt_path": "last"})
    second = _fit(tmp_path, monkeypatch, "ppo", overrides, callbacks=[checkpoint])
    assert second.model.updates == 6
    assert second.trainer.log_dir != first.trainer.log_dir
    assert [step for step, _ in _histograms(second.trainer.log_dir)["rollout/advantage"]] == [384]
