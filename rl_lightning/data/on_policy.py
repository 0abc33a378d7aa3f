"""``OnPolicyDataModule``: each ``next()`` collects one rollout with the module's current policy (PPO)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
from tensordict import TensorDict

from rl_lightning.data.actors.gather import GENERATION_STRIDE, say_actor_faults
from rl_lightning.data.actors.pool import ActorPool
from rl_lightning.data.actors.setup import check_actor_config, start_pool
from rl_lightning.data.collector import Collector
from rl_lightning.data.dataloaders import EvalOnce, EvalRequest, Rollout, RolloutStream
from rl_lightning.data.fused_collector import FusedCollector
from rl_lightning.data.fused_step import require_fusable
from rl_lightning.data.ranks import gather_per_rank, next_rollout_of_every_rank, to_cpu
from rl_lightning.data.seed_generations import generations_used
from rl_lightning.data.selfplay import make_selfplay
from rl_lightning.envs.base import BatchedEnv, EnvSpec, TorchEnv
from rl_lightning.errors import ConfigError, EnvError, require_positive

if TYPE_CHECKING:
    from rl_lightning.data.actors.ray_pool import RayActorPool


class OnPolicyDataModule(pl.LightningDataModule):
    """Owns the envs and the collector of an on-policy algorithm; its iterable yields one ``Rollout`` per update.

    The iterable collects lazily inside ``next()``: a module whose ``training_step`` takes ``dataloader_iter``
    pulls the rollout itself, so the policy that collects is the one about to be updated (policy lag 0; with a
    plain ``training_step(batch)`` Lightning's one-batch prefetch would make it one update stale).

    Args:
        env: the env core (e.g. ``rl_lightning.envs.CartPole``, or ``GymnasiumEnv`` for a Gymnasium id).
        num_envs: parallel envs per rank.
        num_steps: env steps per env per rollout; one rollout is ``num_steps × num_envs`` transitions per rank.
        total_env_steps: env-step budget over all ranks; training stops once it is reached (rounded up to
            whole rollouts).
        seed: base seed; ``None`` takes the CLI's ``seed_everything`` value. Rank ``r`` seeds its envs with
            ``seed + r·num_envs`` so ranks collect different trajectories.
        device: where envs and rollouts live; ``"auto"`` follows the module's device.
        check_env: validate every action against the action space and masks (slow, for debugging).
        eval_episodes: episodes played by ``rl-lightning validate``/``test``; ``None`` takes the ``Evaluation``
            callback's ``num_episodes`` (its other settings always apply there: env form, deterministic, max_steps).
        eval_seed: seed of those episodes' env; ``None`` takes the ``Evaluation`` callback's ``seed``.
        check_finite: fail with the env's name and index when it returns a NaN/inf observation or reward (one host
            sync per rollout, no per-step cost).
        compile: collect with the fused rollout step (policy, sampling, env step, auto-reset, storage write in one
            function) under ``torch.compile`` (``FusedCollector``). Needs a torch-native env that steps from noise
            (CartPole, Pendulum, Catch) and PPO with Discrete or Box actions; anything else is refused at setup. The
            first rollout compiles (seconds; inductor's disk cache shortens it in later processes). On CPU it pays
            most with few envs, where per-op overhead dominates (benchmarks/NOTES.md has the figures).
        seats: multi-seat games: who plays each seat, ``{seat: kind}`` (a seat number, or the env's agent name:
            PettingZoo ``{player_1: random}``) with kind ``self`` (the learning policy; the
            default for unlisted seats), ``league``, ``random``, a bot class path or a ``.ckpt`` file
            (``rl_lightning/data/league.py``). Only the learning seats' decisions train.
        league: multi-seat games: ``{size: K, snapshot_every_n_updates: N, share: p}``, a pool of the last ``K``
            snapshots of the learning policy (one every ``N`` updates); ``league`` seats, and in a share ``p`` of
            games every ``self`` seat but one, play a snapshot drawn per game.
        num_actors: collect beside the learner in this many actor processes per rank (docs/guides/speed.md), each
            stepping ``num_envs / num_actors`` envs with its own copy of the acting policy, refreshed from the
            learner's weights (shared memory) before each rollout; an update still sees one ``[num_steps,
            num_envs]`` rollout, one slice per actor. ``0`` collects in the learner, in turn with the updates: the
            bit-for-bit reproducible path. On 2 cores one actor is the starting point.
        max_policy_lag: with actors: rollouts each actor may collect ahead of the learner, hence the most versions
            between the weights that collected a rollout and those it updates (PPO at lag 1 is APPO-like: the ratio
            uses the behaviour log-probs stored with the data). A rollout staler than this is dropped (never used;
            its env steps still count) rather than waited for: a stale update would change the algorithm silently.
            Rollouts an actor finished before it failed are kept and used in turn; only the one it was collecting is
            lost (``actors/lost_rollouts``; its env steps are not counted, so the budget is still met exactly).
        actor_max_failures: with actors: failures of one actor in a row (its env raised, it died, it hung) that stop
            the run with a checkpoint and one line naming the env and the error; fewer are restarted with the newest
            weights and a fresh seed.
        actor_heartbeat_s: with actors: an actor with no env tick for this long is taken as hung and replaced (Ray
            actors: no rollout for this long).
        actor_env_splits: with actors: ``2`` steps each actor's envs in two groups, one group's env step running
            while the policy acts for the other (Sample Factory's double-buffered sampling). Pays with backends
            that step outside Python (EnvPool, ale-py's vector env) and a policy that costs as much as a step;
            same data as two actors of half the envs each. Single-seat collection only (not self-play).
        borrow_idle_actor_cores: with actor processes: at each optimiser step the learner runs one more torch thread
            per actor that waits for it (it has collected what ``max_policy_lag`` allows), and gives the thread back
            when the actor collects again. Where actors and learner share the cores (2 cores: ``num_threads: 1``
            and one actor), the update then runs on both while the actor idles. ``perf/learner_threads`` logs the
            mean; thread counts change how some float sums split, so an update's last bits then depend on timing.
        actor_backend: with actors: ``processes`` (on this machine: shared-memory weights and rollout slots) or
            ``ray`` (Ray actors of one CPU each, on this machine or across a Ray cluster: weights ``ray.put`` once
            per version, rollouts through the object store; a dead actor or node is replaced by a fresh actor
            wherever a CPU is free). Ray is an extra: ``pip install -e ".[ray]"`` (docs: "Actors on Ray").
        ray_address: with ``actor_backend: ray``: ``null`` starts a local Ray instance for the run (shut down at its
            end); ``auto`` joins the cluster ``ray start`` started on this machine; ``host:port`` a cluster's head.
    """

    def __init__(
        self,
        env: TorchEnv,
        num_envs: int = 8,
        num_steps: int = 128,
        total_env_steps: int = 100_000,
        seed: int | None = None,
        device: str = "auto",
        check_env: bool = False,
        eval_episodes: int | None = None,
        eval_seed: int | None = None,
        check_finite: bool = True,
        compile: bool = False,
        seats: dict[int | str, str] | None = None,
        league: dict[str, Any] | None = None,
        num_actors: int = 0,
        max_policy_lag: int = 1,
        actor_max_failures: int = 3,
        actor_heartbeat_s: float = 60.0,
        actor_env_splits: int = 1,
        borrow_idle_actor_cores: bool = False,
        actor_backend: str = "processes",
        ray_address: str | None = None,
    ) -> None:
        super().__init__()
        require_positive("data.num_envs", num_envs, "set it to the number of parallel envs per rank, e.g. 8")
        require_positive("data.num_steps", num_steps, "set the rollout length per env, e.g. 128")
        require_positive("data.total_env_steps", total_env_steps, "set the env-step budget, e.g. 100000")
        self.env = env
        self.num_envs = num_envs
        self.num_steps = num_steps
        self.total_env_steps = total_env_steps
        self.seed = seed
        self.device = device
        self.check_env = check_env
        self.check_finite = check_finite
        self.compile = compile
        self.eval_episodes = eval_episodes
        self.eval_seed = eval_seed
        self.selfplay = make_selfplay(env, seats, league)  # multi-seat games only (docs/guides/games.md)
        self.selfplay_settings = (seats, league)  # what actor processes rebuild their seats and league from
        self.num_actors = num_actors
        self.max_policy_lag = max_policy_lag
        self.actor_max_failures = actor_max_failures
        self.actor_heartbeat_s = actor_heartbeat_s
        self.actor_backend = actor_backend
        self.ray_address = ray_address
        self.actor_env_splits = actor_env_splits
        self.borrow_idle_actor_cores = borrow_idle_actor_cores
        self.actors: ActorPool | RayActorPool | None = None
        self._actor_generation = 0  # seed generations used before (a resumed run starts actors past them)
        self._serial_generation = 0  # the seed generation the serial collector's envs play (seed_generations.py)
        self._env_seed: int | None = None  # the rank's first env seed, known at setup
        self.world_size = 1
        self.local_env_steps = 0
        # What ``local_env_steps × world_size`` misses of the ranks' true total when ranks collected unequal amounts
        # (actors: a rank dropped a stale rollout, whose env steps count); summed collectively, so every rank holds
        # the same ``env_steps`` and stops at the same update.
        self._env_steps_skew = 0
        self._ranks_stopping = False  # every rank raises one rank's actor failure (``next_rollout_of_every_rank``)
        self.collector: Collector | None = None
        self.last_rollout: Rollout | None = None
        self._restored: dict[str, Any] | None = None
        self._last_update_end: float | None = None

    @property
    def env_spec(self) -> EnvSpec:
        """Linked into the model by the CLI (``data.env_spec`` → ``model.env_spec``)."""
        return self.env.spec

    @property
    def env_steps(self) -> int:
        """Env steps collected so far, summed over ranks (the same on every rank)."""
        return self.local_env_steps * self.world_size + self._env_steps_skew

    @property
    def budget_env_steps(self) -> int:
        """The env steps the run will have collected when it stops: ``total_env_steps`` rounded up to whole
        rollouts of every rank."""
        per_update = self.rollout_size * self.world_size
        return -(-self.total_env_steps // per_update) * per_update

    @property
    def rollout_size(self) -> int:
        """Transitions per rank per update."""
        return self.num_envs * self.num_steps

    def setup(self, stage: str) -> None:
        if self.collector is not None:
            return
        trainer = self.trainer
        rank = trainer.global_rank if trainer is not None else 0
        self.world_size = trainer.world_size if trainer is not None else 1
        module = trainer.lightning_module if trainer is not None else None
        if stage == "fit" and module is not None:
            self.check_fit_config(module)  # before any env is built
        device = self._resolve_device()
        seed = self.seed if self.seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))
        self._env_seed = seed + rank * self.num_envs
        if self.num_actors and stage == "fit":
            return  # the actors own the envs; they start at the first rollout, after a resume restored the counters
        env = BatchedEnv(
            self.env, self.num_envs, device, seed + rank * self.num_envs, self.check_env, self.check_finite
        )
        self.collector = self._make_collector(env, seed + rank * self.num_envs + 10_007)
        if self._restored is not None:
            self._apply_state(self._restored)

    def _make_collector(self, env: BatchedEnv, seed: int) -> Any:
        """The collector stepping ``env`` (sequence-replay modules emit a different row layout)."""
        if self.selfplay is not None:
            return self.selfplay.collector(env, seed, self.trainer.lightning_module if self.trainer else None)
        if self.compile:
            return FusedCollector(env, seed=seed, compile=True)
        return Collector(env, seed=seed)

    def check_fit_config(self, module: Any) -> None:
        """Config arithmetic that would make a run fail or never optimise; raises one-line ``ValueError``s."""
        module.check_config(self)
        check_actor_config(self, module)
        if self.compile and self.selfplay is not None:
            raise ConfigError(
                "data.compile=true does not support multi-seat games (self-play); set data.compile: false"
            )
        if self.compile:
            require_fusable(module, self.env, self.check_env)
        per_update = self.rollout_size * self.world_size
        if self.total_env_steps < per_update:
            raise ConfigError(
                f"data.total_env_steps={self.total_env_steps} is below one update's {per_update} env steps "
                f"(num_envs × num_steps × world_size); raise it to at least {per_update}"
            )

    def _resolve_device(self) -> torch.device:
        if self.device != "auto":
            return torch.device(self.device)
        module = self.trainer.lightning_module if self.trainer is not None else None
        return module.device if module is not None else torch.device("cpu")

    def train_dataloader(self) -> RolloutStream:
        return RolloutStream(self)

    def val_dataloader(self) -> list[EvalRequest] | EvalOnce:
        # During fit, evaluation belongs to the Evaluation callback (keyed on env steps), not to epochs.
        if self.trainer is not None and self.trainer.state.fn == "fit":
            return []
        return EvalOnce(EvalRequest(self.eval_episodes, self.eval_seed))

    def test_dataloader(self) -> EvalOnce:
        return EvalOnce(EvalRequest(self.eval_episodes, self.eval_seed))

    def collect(self) -> Rollout:
        """Collect one rollout with the attached module's acting policy and add its learning targets."""
        if self.num_actors:
            return self._collect_from_actors()
        if self.collector is None:
            raise RuntimeError("OnPolicyDataModule.collect called before setup()")
        module = self.trainer.lightning_module
        # The fused collector takes the module itself (it acts through ``act_from_noise``), the eager one its policy.
        env = self.collector.env
        policy = module if self.compile else module.acting_policy(env, deterministic=False, training=True)
        if self.selfplay is not None:
            self.selfplay.before_rollout(module)  # a league snapshot when one is due
        batch = self.collector.rollout(policy, self.num_steps, module.policy_version)
        self.local_env_steps += self.rollout_size
        batch = module.process_rollout(batch)
        self.last_rollout = Rollout(batch, self.rollout_stats())
        return self.last_rollout

    def _collect_from_actors(self) -> Rollout:
        """The next rollout from the actor processes, with its learning targets."""
        module = self.trainer.lightning_module
        raw, stats = self.actor_rollout(module)
        self.last_rollout = Rollout(module.process_rollout(raw), stats)
        return self.last_rollout

    def actor_rollout(self, module: Any) -> tuple[TensorDict, dict[str, torch.Tensor]]:
        """Publish ``module``'s weights and take the next ``[num_steps, num_envs]`` rollout from the actors (started
        at the first call, after a resume restored the counters); returns it on the module's device with the
        ``rollout/*``, ``perf/*`` and ``actors/*`` stats, and counts its env steps."""
        if self.actors is None:
            assert self._env_seed is not None, "actor_rollout before setup()"
            self.actors = start_pool(self, module, self._env_seed, self._actor_generation)
        if self.selfplay is not None:
            self.selfplay.before_rollout(module)  # the learner's league, checkpointed; the actors keep mirrors
        self.actors.publish(module.state_dict(), module.policy_version)
        rank = self.trainer.global_rank if self.world_size > 1 and self.trainer is not None else None  # DDP only
        try:
            gathered, counted = next_rollout_of_every_rank(self.actors, module.policy_version, self.world_size, rank)
        except EnvError:
            self._ranks_stopping = self.world_size > 1  # every rank raises it in this update (``on_exception``)
            raise
        self.local_env_steps += gathered.env_steps
        self._env_steps_skew += counted - gathered.env_steps * self.world_size
        stats = {name: torch.tensor(value) for name, value in gathered.stats.items()}
        now = time.perf_counter()
        if self._last_update_end is not None:
            elapsed = max(now - self._last_update_end, 1e-9)
            stats["perf/env_sps"] = torch.tensor(counted / elapsed)
        self._last_update_end = now
        return gathered.batch.to(module.device), stats

    def rollout_stats(self, episode: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """``rollout/*`` episode stats (synced over ranks) and ``perf/*`` rates of the rollout just collected.

        Args:
            episode: episode stats already read from the collector (the async DreamerV3 engine reads them before
                its next actor window); ``None`` reads them now.
        """
        assert self.collector is not None
        now = time.perf_counter()
        collected = self.rollout_size * self.world_size
        if episode is None:
            episode = self.collector.episode_stats()
        stats = {f"rollout/{k}": v for k, v in episode.items()}
        stats["perf/collect_sps"] = torch.tensor(collected / max(self.collector.last_collect_seconds, 1e-9))
        if self._last_update_end is not None:
            stats["perf/env_sps"] = torch.tensor(collected / max(now - self._last_update_end, 1e-9))
        self._last_update_end = now
        return stats

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"local_env_steps": self.local_env_steps, "env_steps": self.env_steps}
        if self.num_actors:  # actors hold nothing a resume needs but their seeds: start past the ones used
            used = self.actors.generation + 1 if self.actors is not None else self._actor_generation
            state["actor_generation"] = max(gather_per_rank(used, self.world_size))
        else:  # a serial run counts its generation too: actors resumed from it start past its seeds
            state["actor_generation"] = self._serial_generation + 1
        if self.collector is not None:
            # Only rank 0 writes checkpoints: gather every rank's collector so each resumes its own streams.
            state["collectors"] = gather_per_rank(to_cpu(self.collector.state_dict()), self.world_size)
        if self.selfplay is not None:
            state["league"] = self.selfplay.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = dict(state_dict)
        self._actor_generation = generations_used(state_dict)  # where actors started now begin
        if self.collector is not None or (self.num_actors and self._env_seed is not None):  # after setup
            self._apply_state(self._restored)

    def _apply_state(self, state: dict[str, Any]) -> None:
        self.local_env_steps = int(state.get("local_env_steps", 0))
        self._env_steps_skew = int(state.get("env_steps", self.local_env_steps * self.world_size)) - (
            self.local_env_steps * self.world_size
        )
        if self.selfplay is not None and self.trainer is not None:
            self.selfplay.load_state_dict(state.get("league"), self.trainer.lightning_module)
        if self.collector is None:  # actors: they start afresh, past the seeds used before (``actor_generation``)
            return
        collectors = state.get("collectors", [])
        rank = self.trainer.global_rank if self.trainer is not None else 0
        used = generations_used(state)
        if len(collectors) == self.world_size:
            self.collector.load_state_dict(collectors[rank])
            self._serial_generation = max(used - 1, 0)  # the checkpoint's own streams continue
            return
        if collectors:
            pl.utilities.rank_zero_warn(
                f"checkpoint holds collectors of {len(collectors)} ranks but the run has {self.world_size}; "
                "envs restart on fresh seeds"
            )
        if used:  # an actor run's checkpoint, or another world size's: start past every seed it used
            self._restart_streams(used)

    def _restart_streams(self, generation: int) -> None:
        """The serial collector afresh, its envs and sampler on seed ``generation``: fresh episodes from the next
        rollout on (``seed_generations.py``)."""
        assert self.collector is not None
        assert self._env_seed is not None
        env = self.collector.env
        seed = self._env_seed + generation * GENERATION_STRIDE
        env.generator.manual_seed(seed)
        self.collector = self._make_collector(env, seed + 10_007)  # as setup() builds it, 10_007 past the envs
        self._serial_generation = generation

    def on_exception(self, exception: BaseException) -> None:
        """Stop the actors (after the callbacks, ``FaultCheckpoint`` among them, have saved what they save). When
        every DDP rank stops on one rank's actor failure, rank 0 then lets the others go on to exit: Lightning's
        launcher SIGKILLs rank 0 if it sees another rank exit non-zero first."""
        self._stop_actors()
        if self._ranks_stopping and self.trainer is not None and self.trainer.global_rank == 0:
            torch.distributed.barrier()

    def _stop_actors(self) -> None:
        if self.actors is not None:
            self._actor_generation = self.actors.generation + 1
            self.actors.close()
            say_actor_faults(self.actors)
            self.actors = None

    def teardown(self, stage: str) -> None:
        self._stop_actors()
        if self.collector is not None:
            self.collector.close()
            self.collector = None
