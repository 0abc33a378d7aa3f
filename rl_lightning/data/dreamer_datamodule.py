"""``DreamerDataModule``: sequence replay fed by an actor window per update, paced by a ``Ratio`` scheduler.

Each ``next()`` is one cycle of the engine (both engines share the functional core: ``SequenceCollector.tick``,
``ReplayRing.add/commit``, ``Ratio``, ``ReplayRing.sample_sequences``)::

    cpu engine (deterministic, one thread):    [actor window k → commit] → [ratio → sample] → learner update k
    cuda async engine (actor/learner streams):  sample (rows committed ≤ window k−1) on the learner stream
                                                ∥ actor window k on the actor stream, after policy_ready_event

In the async engine the actor window and the learner's update run concurrently on the GPU; the learner only
samples rows whose commit event it waited on, and never the oldest ``safety_margin`` rows that the running
window may be overwriting. The actor acts with weights one update old (``policy/lag`` shows it).

Cross-stream hand-offs of the async engine (``StreamHandOff``; every one explicit, none by luck of timing)::

    learner stream:  wait(window k−1 done) → read+reset episode stats → sample ring → [update k …]
    actor stream:                               wait(learner so far) + wait(policy_ready_event) → window k → done

* the learner waits for window ``k−1`` before it reads what that window wrote (rows, episode sums, env state), so
  ``rollout/*`` of window ``k−1`` are logged in cycle ``k`` (one cycle late, like ``perf/actor_ms``);
* window ``k`` waits for the learner's reads of cycle ``k`` (the ring rows it sampled, the sums it reset) before it
  overwrites them, but not for update ``k``, which still overlaps it;
* memory one stream allocated and the other uses is ``record_stream``-ed (ring storage and episode sums), and what
  the actor owns (collector, env, player, ring storage) is allocated on the actor stream;
* ``state_dict`` (checkpoints) waits for the last window before it reads the actor's state, ``teardown`` before it
  frees it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.actors.recipes import DreamerRecipe
from rl_lightning.data.dataloaders import Rollout
from rl_lightning.data.dreamer_checks import check_budget, check_engine
from rl_lightning.data.dreamer_stats import read_window_episode_stats, replay_stats, timing_stats
from rl_lightning.data.on_policy import OnPolicyDataModule
from rl_lightning.data.ranks import gather_per_rank
from rl_lightning.data.ratio import Ratio
from rl_lightning.data.replay import ReplayRing, check_sequence_replay
from rl_lightning.data.sequence_collector import SequenceCollector, stepping
from rl_lightning.data.stream_handoff import StreamHandOff, writing_if_async
from rl_lightning.data.timing import PhaseTimer
from rl_lightning.envs.base import BatchedEnv, TorchEnv
from rl_lightning.envs.random_action import random_action
from rl_lightning.errors import ConfigError, require_positive

ENGINES = ("auto", "cpu", "cuda_async")


@dataclass
class DreamerUpdate:
    """One cycle's data.

    Attributes:
        batches: ``[gradient_steps, sequence_length, batch_size]`` sequences, or ``None`` when the ratio asks for
            no gradient step this cycle (prefill, warm-up, or a fractional ratio).
        stats: scalar tensors for logging (``rollout/*``, ``perf/*``, ``replay/*``).
    """

    batches: TensorDict | None
    stats: dict[str, torch.Tensor] = field(default_factory=dict)


class DreamerDataModule(OnPolicyDataModule):
    """Owns the envs, the sequence collector, the ``ReplayRing`` and the ``Ratio`` scheduler of DreamerV3.

    Env steps are policy steps, counted as DreamerV3 counts them: one per env per tick, including the one reset
    tick each episode adds (see ``SequenceCollector``).

    Args:
        env: the env core (e.g. ``rl_lightning.envs.CartPole``, ``Catch`` for pixels).
        num_envs: parallel envs per rank.
        rollout_length: ticks per env in each actor window (one window per ``training_step``).
        total_env_steps: env-step budget over all ranks (rounded up to whole windows).
        buffer_size: replay rows kept per rank (split evenly over envs; the oldest are overwritten).
        batch_size: sequences per gradient step (B).
        sequence_length: rows per sequence (T); every sampled window starts from the RSSM's initial state.
        replay_ratio: gradient steps per policy step after ``learning_starts`` (danijar's ``train_ratio`` is
            ``replay_ratio · batch_size · sequence_length``).
        learning_starts: env steps (over all ranks) of uniform-random prefill before the first gradient step.
            The ratio starts counting with the window that completes the prefill (sheeprl's convention: the first
            training cycle is granted one window's worth), not from the start of the run.
        pretrain_steps: extra gradient steps taken once, at the first training cycle.
        commit_stride: ticks between commits (what the learner may sample is advanced every this many ticks).
        safety_margin: oldest committed rows the learner never samples (what a running window may overwrite);
            ``None`` = ``max(sequence_length, rollout_length)``.
        min_ready_steps: committed rows per env needed before training; ``None`` = ``sequence_length``.
        engine: ``cpu`` (deterministic, interleaved), ``cuda_async`` (actor/learner streams) or ``auto``
            (``cuda_async`` on a CUDA device, else ``cpu``).
        save_replay: also store the ring's contents in checkpoints (bit-exact resume; large files).
        seed: base seed; ``None`` takes the CLI's ``seed_everything`` value (per-rank offsets).
        device: where envs and the ring live; ``"auto"`` follows the module's device.
        check_env: validate every action against the action space (slow, for debugging).
        eval_episodes: episodes played by ``rl-lightning validate``/``test``; ``None`` takes the ``Evaluation``
            callback's ``num_episodes`` (its other settings always apply there: env form, deterministic, max_steps).
        eval_seed: seed of those episodes' env; ``None`` takes the ``Evaluation`` callback's ``seed``.
        num_actors: collect in this many actor processes beside the learner (``OnPolicyDataModule``'s setting): each
            steps its envs with its own player (uniform random during the prefill) and hands whole windows back,
            which the learner adds to its ring and trains on at ``replay_ratio``. Replaces the ``engine`` (CPU
            actors; the learner may still sit on a GPU). ``0``: the engine above.
        max_policy_lag: with actors: windows each actor may collect ahead of the learner.
        actor_max_failures: with actors: failures of one actor in a row that stop the run with a checkpoint.
        actor_heartbeat_s: with actors: an actor with no env tick for this long is replaced.
        borrow_idle_actor_cores: with actor processes: the learner runs one more torch thread per actor waiting for
            it (``OnPolicyDataModule``'s setting).
        actor_backend: with actors: ``processes`` (this machine) or ``ray`` (Ray actors, on this machine or a Ray
            cluster; ``OnPolicyDataModule``'s setting, the extra ``pip install -e ".[ray]"``).
        ray_address: with ``actor_backend: ray``: ``null`` (a local Ray instance for the run), ``auto`` or
            ``host:port`` (a running cluster's head).
    """

    def __init__(
        self,
        env: TorchEnv,
        num_envs: int = 4,
        rollout_length: int = 16,
        total_env_steps: int = 100_000,
        buffer_size: int = 1_000_000,
        batch_size: int = 16,
        sequence_length: int = 64,
        replay_ratio: float = 0.5,
        learning_starts: int = 1024,
        pretrain_steps: int = 0,
        commit_stride: int = 8,
        safety_margin: int | None = None,
        min_ready_steps: int | None = None,
        engine: str = "auto",
        save_replay: bool = False,
        seed: int | None = None,
        device: str = "auto",
        check_env: bool = False,
        eval_episodes: int | None = None,
        eval_seed: int | None = None,
        num_actors: int = 0,
        max_policy_lag: int = 1,
        actor_max_failures: int = 3,
        actor_heartbeat_s: float = 60.0,
        borrow_idle_actor_cores: bool = False,
        actor_backend: str = "processes",
        ray_address: str | None = None,
    ) -> None:
        require_positive("data.rollout_length", rollout_length, "set the ticks per actor window, e.g. 16")
        require_positive("data.buffer_size", buffer_size, "set the replay rows kept per rank, e.g. 1000000")
        require_positive("data.batch_size", batch_size, "set the sequences per gradient step, e.g. 16")
        if engine not in ENGINES:
            raise ConfigError(f"data.engine={engine!r} is invalid: choose one of {list(ENGINES)}")
        if not isinstance(learning_starts, int) or learning_starts < 0:
            raise ConfigError(f"data.learning_starts={learning_starts!r}: must be an integer >= 0")
        self.ratio = Ratio(replay_ratio, pretrain_steps)  # validates both
        super().__init__(
            env, num_envs, rollout_length, total_env_steps, seed, device, check_env, eval_episodes, eval_seed,
            num_actors=num_actors, max_policy_lag=max_policy_lag, actor_max_failures=actor_max_failures,
            actor_heartbeat_s=actor_heartbeat_s, actor_backend=actor_backend, ray_address=ray_address,
            borrow_idle_actor_cores=borrow_idle_actor_cores,
        )  # fmt: skip
        self.rollout_length = rollout_length
        self.buffer_size = buffer_size
        self.batch_size = batch_size
        self.sequence_length = sequence_length
        self.replay_ratio = replay_ratio
        self.learning_starts = learning_starts
        self.pretrain_steps = pretrain_steps
        self.commit_stride = commit_stride
        self.safety_margin = max(sequence_length, rollout_length) if safety_margin is None else safety_margin
        self.min_ready_steps = sequence_length if min_ready_steps is None else min_ready_steps
        self.engine = engine
        self.save_replay = save_replay
        self.replay: ReplayRing | None = None
        self.sample_generator: torch.Generator | None = None
        #: async engine: orders the actor stream against the learner's; ``None`` in the cpu engine.
        self.handoff: StreamHandOff | None = None
        self.local_gradient_steps = 0
        self.train_start: int | None = None  # local policy steps before the first training cycle
        self._player: Any = None
        self._realign = False
        self._actor_timer: PhaseTimer | None = None
        self._last_cycle: float | None = None
        self._check_replay()

    def _check_replay(self) -> None:
        check_sequence_replay(
            sequence_length=self.sequence_length, commit_stride=self.commit_stride,
            min_ready_steps=self.min_ready_steps, safety_margin=self.safety_margin, capacity=self.capacity,
        )  # fmt: skip

    @property
    def capacity(self) -> int:
        """Replay rows per env."""
        return self.buffer_size // self.num_envs

    @property
    def async_engine(self) -> bool:
        return self.handoff is not None

    @property
    def actor_stream(self) -> Any:
        """The actor's CUDA stream in the async engine (``None`` in the cpu engine)."""
        return self.handoff.writer if self.handoff is not None else None

    def _make_collector(self, env: BatchedEnv, seed: int) -> SequenceCollector:
        with writing_if_async(self.handoff):  # the collector's tensors are the actor's: allocate them on its stream
            return SequenceCollector(env, seed=seed)

    def _make_handoff(self, device: torch.device) -> StreamHandOff | None:
        """The actor stream's hand-off in the async engine, else ``None`` (a seam for CPU tests of the order)."""
        if device.type == "cuda" and self.engine in ("auto", "cuda_async"):
            return StreamHandOff(torch.cuda.Stream(device))
        return None

    def setup(self, stage: str) -> None:
        if self.collector is not None or self.replay is not None:
            return
        self.handoff = None if self.num_actors else self._make_handoff(self._resolve_device())
        super().setup(stage)
        device = self._resolve_device()
        seed = self._env_seed + 10_007 + 20_011  # the serial collector's sampling seed + 20_011
        self.sample_generator = torch.Generator(device=device).manual_seed(seed)
        self.replay = ReplayRing(self.capacity, self.num_envs, device, safety_margin=self.safety_margin)
        self._actor_timer = PhaseTimer(device)
        if self._restored is not None:
            with writing_if_async(self.handoff):
                self._apply_replay_state(self._restored)

    def check_fit_config(self, module: Any) -> None:
        """Configs that could never train are errors here, before any env exists."""
        stepping(self.env)  # an env the sequence collector cannot step is one line here (every built-in backend can)
        super().check_fit_config(module)
        self._check_replay()
        check_engine(self.engine, self.num_actors, self._resolve_device(), self.safety_margin, self.rollout_length)
        check_budget(self.total_env_steps, self.num_envs, self.world_size, self.min_ready_steps, self.learning_starts)

    # ----- one engine cycle ---------------------------------------------------------------------------------
    def collect(self) -> DreamerUpdate:  # type: ignore[override]
        """Run one actor window and sample this cycle's batches (see the module docstring for the order)."""
        if self.replay is None or (self.collector is None and not self.num_actors):
            raise RuntimeError("DreamerDataModule.collect called before setup()")
        module = self.trainer.lightning_module
        if self.num_actors:
            return self._collect_from_actors()
        assert self.collector is not None
        if self.handoff is not None:
            self.handoff.acquire()  # window k−1 is done: its rows, episode sums and env state are complete
            self.collector.env.check_outputs()  # NaN/inf of earlier windows, before their rows are sampled
            episode = read_window_episode_stats(self.collector, self.handoff)
            batches = self._sample(self._due())  # rows committed by earlier windows only
            self._actor_window(module)  # after the reads above (StreamHandOff.writing), overlapping update k
        else:
            self._actor_window(module)
            self.collector.env.check_outputs()  # NaN/inf from the env: one host sync per window
            batches = self._sample(self._due())
            episode = self.collector.episode_stats()
        return self._update(batches, self._stats(module, episode))

    def _collect_from_actors(self) -> DreamerUpdate:  # type: ignore[override]
        """Add the actors' next window to the ring (committed whole) and sample this cycle's batches."""
        assert self.replay is not None
        module = self.trainer.lightning_module
        rows, stats = self.actor_rollout(module)
        self.replay.add(rows.to(self.replay.device))
        self.replay.commit(None)
        batches = self._sample(self._due())
        return self._update(batches, self._stats(module, {}, stats))

    def _update(self, batches: TensorDict | None, stats: dict[str, torch.Tensor]) -> DreamerUpdate:
        if batches is not None:
            self.last_rollout = Rollout(batches, stats)  # what FailFast saves to replay a bad update
        return DreamerUpdate(batches, stats)

    def actor_recipe(self) -> DreamerRecipe:
        """What an actor starting now builds: the sequence collector, the prefill still to do, then the player."""
        per_rollout = self.rollout_size * self.world_size  # what the run collects while one actor collects one
        return DreamerRecipe(self.learning_starts, self.env_steps, per_rollout)

    def _policy(self, module: Any) -> Any:
        if self.env_steps < self.learning_starts:
            spec = self.collector.env.spec  # type: ignore[union-attr]
            return lambda view, gen: TensorDict(
                {keys.ACTION: random_action(spec, view, gen)}, batch_size=view.batch_size, device=view.device
            )
        if self._player is None:
            env = self.collector.env  # type: ignore[union-attr]
            self._player = module.player(env.num_envs, env.device)
            players = self._restored.get("players") if self._restored is not None else None
            rank = self.trainer.global_rank if self.trainer is not None else 0
            if players and len(players) == self.world_size and players[rank] is not None:
                self._player.load_state_dict(players[rank])
        return self._player

    def _actor_window(self, module: Any) -> None:
        assert self.collector is not None
        assert self.replay is not None
        assert self._actor_timer is not None
        handoff, stream = self.handoff, self.actor_stream
        with writing_if_async(self.handoff):
            if handoff is not None:
                handoff.wait(module.policy_ready_event)  # the actor copy's weights are fully copied
            self._actor_timer.start(stream)
            policy = self._policy(module)
            done = 0
            while done < self.rollout_length:
                ticks = min(self.commit_stride, self.rollout_length - done)
                self.replay.add(self.collector.rollout(policy, ticks, module.actor_policy_version()))
                self.replay.commit(handoff.record() if handoff is not None else None)
                done += ticks
            self._actor_timer.stop(stream)
        self.local_env_steps += self.rollout_size

    def _due(self) -> int:
        """Gradient steps the ratio grants now (0 until prefill is over and enough rows are committed)."""
        assert self.replay is not None
        if self.env_steps < self.learning_starts or self.replay.ready_rows(committed_only=True) < self.min_ready_steps:
            return 0
        if self.train_start is None:
            self.train_start = self.local_env_steps - self.rollout_size
        steps = self.local_env_steps - self.train_start
        if self._realign:
            self.ratio.realign(steps)
            self._realign = False
        return self.ratio(steps)

    def _sample(self, due: int) -> TensorDict | None:
        if due == 0:
            return None
        assert self.replay is not None
        assert self.sample_generator is not None
        if self.handoff is not None:
            self.handoff.keep_for_reader(self.replay.tensors())  # the actor's storage, gathered on this stream
        flat = self.replay.sample_sequences(
            due * self.batch_size, self.sequence_length, self.sample_generator, committed_only=True
        )
        self.local_gradient_steps += due
        return flat.reshape(self.sequence_length, due, self.batch_size).transpose(0, 1)

    def _stats(
        self, module: Any, episode: dict[str, torch.Tensor], actor_stats: dict[str, torch.Tensor] | None = None
    ) -> dict[str, torch.Tensor]:
        assert self.replay is not None
        assert self._actor_timer is not None
        stats = self.rollout_stats(episode) if actor_stats is None else actor_stats
        trained = self.local_env_steps - self.train_start if self.train_start is not None else 0
        stats.update(replay_stats(self.replay, self.world_size, self.local_gradient_steps, trained, self.replay_ratio))
        actor_ms, now = self._actor_timer.poll(), time.perf_counter()
        cycle_ms = None if self._last_cycle is None else 1e3 * (now - self._last_cycle)
        stats.update(timing_stats(actor_ms, getattr(module, "last_learner_ms", None), cycle_ms))
        self._last_cycle = now
        return stats

    # ----- checkpointing ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self.handoff is not None:
            self.handoff.acquire()  # the actor's last window may still be writing what is read below
        state = super().state_dict()
        if self.replay is not None and self.sample_generator is not None:
            mine = {
                "ring": self.replay.state_dict(include_storage=self.save_replay),
                "sample_generator": self.sample_generator.get_state(),
                "local_gradient_steps": self.local_gradient_steps,
            }
            state["replay"] = gather_per_rank(mine, self.world_size)
            player = self._player.state_dict() if self._player is not None else None
            state["players"] = gather_per_rank(player, self.world_size)
        state["ratio"] = self.ratio.state_dict()
        state["train_start"] = self.train_start
        return state

    def _apply_state(self, state: dict[str, Any]) -> None:
        with writing_if_async(self.handoff):  # restored tensors are the actor's: after its last window, on its stream
            super()._apply_state(state)
            if self.replay is not None:
                self._apply_replay_state(state)

    def _apply_replay_state(self, state: dict[str, Any]) -> None:
        assert self.replay is not None
        assert self.sample_generator is not None
        if "ratio" in state:
            self.ratio.load_state_dict(state["ratio"])
        self.train_start = state.get("train_start")
        replays = state.get("replay", [])
        rank = self.trainer.global_rank if self.trainer is not None else 0
        restored = len(replays) == self.world_size and replays[rank]["ring"].get("storage") is not None
        if len(replays) == self.world_size:
            mine = replays[rank]
            self.replay.load_state_dict(mine["ring"])
            self.sample_generator.set_state(mine["sample_generator"])
            self.local_gradient_steps = int(mine["local_gradient_steps"])
        # A ring that was not restored refills first; the ratio must not then pay back the refill in one burst.
        self._realign = not restored and self.train_start is not None

    def teardown(self, stage: str) -> None:
        if self.handoff is not None and self.collector is not None:
            self.handoff.synchronize()  # the actor's last window may still use the tensors freed below
        super().teardown(stage)
