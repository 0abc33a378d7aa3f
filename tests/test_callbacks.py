"""Evaluation, FailFast (with bundle replay), RLCheckpoint and EarlyStopping inside real fits."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning import keys
from rl_lightning.callbacks import EarlyStopping, EnvStepProgressBar, Evaluation, FailFast, RLCheckpoint
from rl_lightning.callbacks.cadence import Cadence
from rl_lightning.callbacks.fail_fast import replay, reproduce
from rl_lightning.envs import CartPole
from rl_lightning.errors import ConfigError
from tests.cli_subprocess import run_cli
from tests.helpers import tiny_dreamer, tiny_ppo, trainer


class NaNRewardCartPole(CartPole):
    """CartPole whose rewards turn NaN from the 40th step of a run on: poisons the second update."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def step_state(self, state, action, generator, inplace=False):
        state, out = super().step_state(state, action, generator, inplace)
        self.calls += 1
        if self.calls > 40:
            out[keys.REWARD] = out[keys.REWARD] * float("nan")
        return state, out


def test_evaluation_cadence_and_random_baseline(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=64 * 4)
    evaluation = Evaluation(every_n_updates=2, num_episodes=3)
    trainer(tmp_path, callbacks=[evaluation]).fit(module, dm)
    assert [h["updates"] for h in evaluation.history] == [2, 4]
    for record in evaluation.history:
        assert 8 <= record["eval/episode_return"] <= 500  # CartPole returns are episode lengths
        assert record["eval/episode_return"] == record["eval/episode_length"]
        assert record["eval/random_episode_return"] == evaluation.random_return
    assert 8 <= evaluation.random_return < 60  # uniform-random CartPole lasts ~22 steps
    by_env_steps = Evaluation(every_n_env_steps=100, num_episodes=2)
    module, dm = tiny_ppo(total_env_steps=64 * 4)
    trainer(tmp_path, callbacks=[by_env_steps]).fit(module, dm)
    assert [h["env_steps"] for h in by_env_steps.history] == [128, 256]


@pytest.mark.parametrize("kwargs", [{}, {"every_n_updates": 1, "every_n_env_steps": 5}, {"every_n_updates": 0}])
def test_evaluation_rejects_bad_cadence(kwargs):
    with pytest.raises(ConfigError, match="every_n"):
        Evaluation(**kwargs)


def test_fail_fast_raises_with_a_bundle_that_reproduces(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(env=NaNRewardCartPole(), total_env_steps=64 * 5)
    dm.check_finite = False  # let the NaN reward reach the loss: FailFast is under test here, not the env check
    with pytest.raises(FloatingPointError, match="non-finite") as info:
        trainer(tmp_path, callbacks=[FailFast(bundle_dir=str(tmp_path))]).fit(module, dm)
    assert module.updates == 3  # rollout 3 is the first with NaN rewards
    bundle = tmp_path / "failfast_bundle_rank0.pt"
    assert str(bundle) in str(info.value)
    assert "train/loss" in reproduce(bundle)


class TripAtUpdate(FailFast):
    """FailFast that reports a failure at one update although everything is finite (the weights stay comparable)."""

    def __init__(self, update: int, **kwargs):
        super().__init__(**kwargs)
        self.update = update

    def non_finite(self, pl_module):
        return ["train/tripwire"] if pl_module.updates == self.update else []


def test_fail_fast_replay_reproduces_the_update_bit_exactly(tmp_path):
    """Replaying the bundle ends with the weights the run ended with, including PPO's annealed lr for that update."""
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=64 * 5, anneal_lr=True, lr=0.05)
    with pytest.raises(FloatingPointError, match="tripwire"):
        trainer(tmp_path, callbacks=[TripAtUpdate(3, bundle_dir=str(tmp_path))]).fit(module, dm)
    bundle = torch.load(tmp_path / "failfast_bundle_rank0.pt", weights_only=False)
    replayed = replay(tmp_path / "failfast_bundle_rank0.pt").state_dict()
    before = bundle["before"]["weights"]
    assert any(not torch.equal(before[k], v) for k, v in bundle["weights_after"].items())  # the update moved them
    for name, after in bundle["weights_after"].items():
        assert torch.equal(replayed[name], after), name


def test_fail_fast_bundle_of_a_cli_run_reproduces(tmp_path):
    """A diverging CLI run (lr 1e20) writes a bundle that ``reproduce`` replays in this process."""
    args = [
        "fit", "--config", "ppo.yaml", "--model.init_args.lr", "1e20", "--data.init_args.num_steps", "16",
        "--data.init_args.total_env_steps", "512", "--model.init_args.update_epochs", "1",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    run = run_cli(args, tmp_path)
    assert run.returncode != 0
    line = run.stderr.strip().splitlines()[-1]
    assert line.startswith("rl-lightning: error: FailFast: non-finite"), run.stderr[-2000:]
    bundle_part, _, checkpoint_part = line.rpartition("reproduction bundle: ")[2].partition("; ")
    assert checkpoint_part.startswith("checkpoint of update")  # FaultCheckpoint saved the last completed update
    path = tmp_path / bundle_part
    bundle = torch.load(path, weights_only=False)
    assert "_class_path" not in bundle["hparams"]
    # PPO computes train/explained_variance from the rollout while logging, outside the update that is replayed.
    expected = [name for name in bundle["non_finite"] if name != "train/explained_variance"]
    assert "train/loss" in expected
    assert reproduce(path) == expected


def test_checkpoint_cadence_and_early_stopping(tmp_path):
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=64 * 20)
    checkpoint = RLCheckpoint(
        every_n_updates=2,
        dirpath=str(tmp_path / "ckpt"),
        save_last=True,
        monitor="eval/episode_return",
        mode="max",
        save_top_k=1,
    )
    stop = EarlyStopping(monitor="eval/episode_return", mode="max", stopping_threshold=0.0)
    evaluation = Evaluation(every_n_updates=3, num_episodes=2)
    trainer(tmp_path, callbacks=[evaluation, stop, checkpoint], enable_checkpointing=True).fit(module, dm)
    assert module.updates == 3  # stopped by the first evaluation (any return ≥ 0)
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert saved["rl_counters"]["updates"] == 3
    assert saved["policy_revision"]["family"] == "ppo"
    assert saved["policy_revision"]["version"] == 3
    assert len(list((tmp_path / "ckpt").glob("*.ckpt"))) == 2  # last + best


class CountingCheckpoint(RLCheckpoint):
    """Records the update counter at every save."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.saved_at: list[int] = []

    def save_now(self, trainer, pl_module):
        self.saved_at.append(pl_module.updates)
        super().save_now(trainer, pl_module)


def test_cadence_fires_once_per_update_through_prefill_and_cycles_without_an_update(tmp_path):
    """DreamerV3 with 16 prefill env steps and a fractional ratio (8 env steps × 1/16 = half an update per
    cycle): evaluation and checkpoint must follow the update counter, not the cycles."""
    pl.seed_everything(0)
    module, dm = tiny_dreamer(total_env_steps=64, replay_ratio=1 / 16, learning_starts=16)
    cycles: list[int] = []
    counter = pl.Callback()
    counter.on_train_batch_end = lambda trainer, pl_module, *_: cycles.append(pl_module.updates)
    evaluation = Evaluation(every_n_updates=1, num_episodes=1, max_steps=20)
    checkpoint = CountingCheckpoint(every_n_updates=1, dirpath=str(tmp_path / "ckpt"), save_last=True)
    callbacks = [counter, evaluation, checkpoint]
    trainer(tmp_path, callbacks=callbacks, enable_checkpointing=True).fit(module, dm)
    assert cycles.count(0) >= 2  # prefill cycles ran before the first update
    assert len(cycles) > len(set(cycles)) + 2  # and later cycles made no update
    updates = list(range(1, module.updates + 1))
    assert module.updates >= 2
    assert [h["updates"] for h in evaluation.history] == updates
    assert checkpoint.saved_at == updates


def test_cadence_fires_once_per_crossing_and_survives_a_state_round_trip():
    class Counters:
        env_steps = 0

    cadence = Cadence("test", None, 100)
    fired = []
    for value in (0, 50, 150, 150, 160, 350):
        Counters.env_steps = value
        fired.append(cadence.due(Counters))
    assert fired == [False, False, True, False, False, True]  # 350 crossed 200 and 300: fires once
    resumed = Cadence("test", None, 100)
    resumed.load_state_dict(cadence.state_dict())
    Counters.env_steps = 399
    assert not resumed.due(Counters)
    Counters.env_steps = 400
    assert resumed.due(Counters)


class BarProbe(pl.Callback):
    """Reads the progress bar as a user sees it (its rendered line), at the start of training and after updates."""

    def __init__(self, bar: EnvStepProgressBar) -> None:
        self.bar = bar
        self.lines: list[tuple[int, str, int]] = []

    def _read(self, pl_module) -> None:
        tqdm_bar = self.bar.train_progress_bar
        self.lines.append((pl_module.env_steps, str(tqdm_bar), tqdm_bar.initial))

    def on_train_start(self, trainer, pl_module):
        self._read(pl_module)

    def on_train_batch_end(self, trainer, pl_module, *_):
        self._read(pl_module)


# The resumed run saves into the directory of the run it resumes, on purpose.
@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty:UserWarning")
def test_progress_bar_counts_env_steps_against_the_budget_after_a_resume(tmp_path):
    ckpt = tmp_path / "ckpt"
    for budget in (128, 320):  # 2 updates, then resume to 5
        pl.seed_everything(0)
        module, dm = tiny_ppo(total_env_steps=budget)
        bar = EnvStepProgressBar()
        probe = BarProbe(bar)
        callbacks = [bar, probe, RLCheckpoint(every_n_updates=1, dirpath=str(ckpt))]
        run = trainer(tmp_path, callbacks=callbacks, enable_progress_bar=True, enable_checkpointing=True)
        run.fit(module, dm, ckpt_path=str(ckpt / "last.ckpt") if budget == 320 else None)
    steps = [env_steps for env_steps, _, _ in probe.lines]
    assert steps == [128, 192, 256, 320]  # on_train_start of the resumed run, then its three updates
    for env_steps, line, initial in probe.lines:
        assert f"| {env_steps}/320 [" in line, line
        assert "env steps/s" in line, line
        assert initial == 128  # tqdm's rate and ETA count only the resumed session's steps
    assert "return=" in probe.lines[-1][1]
    assert "sps=" in probe.lines[-1][1]


def test_checkpoint_files_are_named_by_env_steps(tmp_path):
    """Periodic checkpoints carry the env step they were taken at, the clock users think in."""
    pl.seed_everything(0)
    module, dm = tiny_ppo(total_env_steps=128)
    checkpoint = RLCheckpoint(every_n_updates=1, dirpath=str(tmp_path / "ckpt"), save_top_k=-1)
    trainer(tmp_path, callbacks=[checkpoint], enable_checkpointing=True).fit(module, dm)
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("*.ckpt")) == [
        "env_steps=128.ckpt",
        "env_steps=64.ckpt",
        "last.ckpt",
    ]
