"""What every actor backend shares: the settings, an actor's seeds, the gathered rollout and its figures, the give-up
error. ``ActorPool`` (processes on this machine) and ``RayActorPool`` (Ray actors) differ only in transport."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning.data.actors.policy_factory import PolicyFactory
from rl_lightning.data.actors.worker import ActorSpec
from rl_lightning.errors import EnvError
from rl_lightning.processes.learner_threads import mean_threads_since_last_read

#: Seeds of a restarted actor move by this much per generation, far from every other actor's envs.
GENERATION_STRIDE = 7_919_113

#: An actor's episode stats of one rollout: ``{name: (mean, episodes behind it)}`` (``core.ActorCore.collect``).
EpisodeStats = dict[str, tuple[float, float]]

#: What the learner keeps of one rollout besides its batch: ``(policy version, episode stats, collect s, wait s)``.
RolloutInfo = tuple[int, EpisodeStats, float, float]


@dataclass
class PoolSettings:
    """What the datamodule decides for the actors (see ``OnPolicyDataModule``'s ``num_actors`` and neighbours).

    Attributes:
        num_actors: actors; the rank's ``num_envs`` envs are split evenly between them.
        num_envs: envs of the whole rank; ``num_steps``: ticks per rollout.
        max_policy_lag: rollouts each actor may hold or collect ahead (process slots, Ray requests in flight), hence
            the most versions a rollout may lag the learner using it.
        max_failures: failures of one actor in a row that stop the run.
        heartbeat_timeout_s: an actor silent this long is taken as hung and replaced (processes: no env tick; Ray:
            no rollout).
        env_seed: the rank's first env seed (actor ``i`` gets ``env_seed + i·num_envs/num_actors``); the sampling
            seed is ``env_seed + 10_007`` likewise, as the serial collector's.
        seed_generation: generations already used by earlier runs of this fit (a resume starts past them).
        env_splits: 1, or 2 to step each actor's envs in two groups overlapping the policy (``split.py``).
        autocast_dtype: the low-precision dtype the actors act in (``torch.autocast`` on the CPU), as the serial
            collector does inside a CPU learner's ``training_step`` under ``trainer.precision: bf16-mixed``; None:
            float32.
        borrow_idle_cores: the learner runs one more intra-op thread per actor waiting for it (processes on this
            machine only; ``learner_threads.py``).
    """

    num_actors: int
    num_envs: int
    num_steps: int
    max_policy_lag: int
    max_failures: int
    heartbeat_timeout_s: float
    env_seed: int
    check_env: bool = False
    check_finite: bool = True
    seed_generation: int = 0
    env_splits: int = 1
    autocast_dtype: torch.dtype | None = None
    borrow_idle_cores: bool = False


@dataclass
class ActorRollout:
    """One update's rollout from every actor, and what the pool saw while gathering it.

    Attributes:
        batch: ``[num_steps, num_envs]`` transitions, actor ``i``'s envs in columns ``i·n ... (i+1)·n - 1``.
        env_steps: env steps this update accounts for on this rank: the rollout's, plus those of rollouts collected
            whole but dropped as too stale (a rollout lost with a failed actor adds none: how far it got is unknown).
        stats: ``rollout/*`` means over the actors' finished episodes, and ``perf/*`` / ``actors/*`` figures.
        episode_sums: ``{name: (sum, episodes)}`` behind each ``rollout/*`` mean, for a mean over ranks.
    """

    batch: TensorDict
    env_steps: int
    stats: dict[str, float] = field(default_factory=dict)
    episode_sums: dict[str, tuple[float, float]] = field(default_factory=dict)


def actor_spec(
    settings: PoolSettings, env: Any, policy: PolicyFactory, recipe: Any, index: int, generation: int, parent_pid: int
) -> ActorSpec:
    """Actor ``index`` of seed generation ``generation``: its envs' and sampler's seeds, the same in every backend."""
    s = settings
    n = s.num_envs // s.num_actors
    env_seed = s.env_seed + index * n + generation * GENERATION_STRIDE
    return ActorSpec(
        index, generation, env, n, s.num_steps, env_seed, env_seed + 10_007, s.check_env, s.check_finite, policy,
        parent_pid, s.max_policy_lag, recipe, s.env_splits, s.autocast_dtype,
    )  # fmt: skip


def announce_replacement(index: int, problem: str, restarts: int, kept: int) -> None:
    """Say on the console, in one line, that actor ``index`` failed with ``problem`` and was replaced (the run goes
    on: ``actors/restarts`` counts these, and the end of the run repeats the count)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    where = f" on rank {torch.distributed.get_rank()}" if distributed and torch.distributed.get_world_size() > 1 else ""
    finished = f"; its {kept} finished rollout{'s' if kept != 1 else ''} kept" if kept else ""
    print(
        f"rl-lightning: actor {index}{where} replaced with fresh seeds (restart {restarts} of the run): "
        f"{problem}{finished}",
        file=sys.stderr,
        flush=True,
    )


def say_actor_faults(actors: Any) -> None:
    """The run's actor faults in one line at its end (each was said when it happened; ``actors/*`` has them too)."""
    lost, dropped = getattr(actors, "lost_rollouts", 0), actors.dropped_rollouts
    if not (actors.restarts or lost or dropped):
        return
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    rank = f" on rank {torch.distributed.get_rank()}" if distributed and torch.distributed.get_world_size() > 1 else ""
    print(
        f"rl-lightning: actors{rank}: {actors.restarts} replaced during the run, {lost} rollout(s) lost with them "
        f"(not counted as env steps), {dropped} dropped as staler than data.max_policy_lag (counted)",
        file=sys.stderr,
        flush=True,
    )


def failed_too_often(settings: PoolSettings, env: Any, index: int, failures: int, problem: str) -> EnvError:
    """The one-line error that stops a run once actor ``index`` failed ``max_failures`` times in a row."""
    return EnvError(
        env_name(env), None, settings.num_envs,
        f"in actor {index}: the actor failed {failures} times in a row (each time restarted with fresh "
        f"seeds), stopping the run; last error: {problem}",
    )  # fmt: skip


class Gathering:
    """Joins each actor's rollout into the update's ``ActorRollout`` and keeps the ``perf/*`` clocks between updates.

    Args:
        settings: the pool's settings (rollout size per actor).
    """

    def __init__(self, settings: PoolSettings) -> None:
        self.per_rollout = settings.num_envs // settings.num_actors * settings.num_steps  # env ticks of one rollout
        self.learner_wait = 0.0
        self.since = time.perf_counter()

    def rollout(
        self,
        parts: list[TensorDict],
        infos: list[RolloutInfo],
        stale: int,
        restarts: int,
        dropped: int,
        start: float,
        lost: int = 0,
    ) -> ActorRollout:
        """The update's rollout from ``parts`` (actor order) and their ``infos``; ``stale`` rollouts were collected
        whole but dropped since the last update (their env steps count); ``start`` is when the learner began waiting
        for them; ``restarts``, ``dropped`` and ``lost`` (rollouts lost with failed actors) are the run's totals."""
        now = time.perf_counter()
        self.learner_wait += now - start
        batch = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        sums = episode_sums([stats for _, stats, _, _ in infos])
        stats = {**episode_means(sums), **self._perf(infos, now, restarts, dropped, lost)}
        return ActorRollout(batch, (len(parts) + stale) * self.per_rollout, stats, sums)

    def _perf(self, infos: list[RolloutInfo], now: float, restarts: int, dropped: int, lost: int) -> dict[str, float]:
        collect = [collect_s for _, _, collect_s, _ in infos]
        busy = [collect_s / max(collect_s + wait_s, 1e-9) for _, _, collect_s, wait_s in infos]
        elapsed = max(now - self.since, 1e-9)
        result = {
            "perf/collect_sps": self.per_rollout * len(infos) / max(max(collect), 1e-9),  # actors collect side by side
            "perf/actor_busy": sum(busy) / len(busy),
            "perf/learner_busy": 1.0 - self.learner_wait / elapsed,
            "actors/restarts": float(restarts),
            "actors/dropped_rollouts": float(dropped),
            "actors/lost_rollouts": float(lost),
        }
        threads = mean_threads_since_last_read()
        if threads is not None:  # data.borrow_idle_actor_cores: the learner's mean intra-op threads per step
            result["perf/learner_threads"] = threads
        self.learner_wait, self.since = 0.0, now
        return result


def episode_sums(stats: list[EpisodeStats]) -> dict[str, tuple[float, float]]:
    """``{name: (sum, count)}`` over actors' episode means, each weighted by its own count: episodes for the return
    and length, whole games for ``game_score`` (one Atari game is several one-life episodes), hands for
    ``points_per_hand``; a mean with nothing behind it (NaN, count 0) weighs nothing."""
    sums: dict[str, tuple[float, float]] = {}
    for entry in stats:
        for name, (value, weight) in entry.items():
            if value == value and weight > 0:
                total, count = sums.get(name, (0.0, 0.0))
                sums[name] = (total + value * weight, count + weight)
    return sums


def episode_means(sums: dict[str, tuple[float, float]]) -> dict[str, float]:
    """``rollout/<name>`` means of ``episode_sums`` (NaN for the return and length when no episode finished)."""
    means = {"rollout/episode_return": float("nan"), "rollout/episode_length": float("nan")}
    means.update({f"rollout/{name}": total / count for name, (total, count) in sums.items()})
    return means


def env_name(env: Any) -> str:
    """The env's name as errors print it."""
    spec = getattr(env, "spec", None)
    return getattr(spec, "name", type(env).__name__)
