"""``ReplayDataModule``: each update collects a rollout into a ``ReplayRing`` and yields that update's batches (SPO)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.dataloaders import Rollout
from rl_lightning.data.on_policy import OnPolicyDataModule
from rl_lightning.data.ranks import gather_per_rank
from rl_lightning.data.replay import ReplayRing
from rl_lightning.envs.base import TorchEnv
from rl_lightning.errors import ConfigError, require_positive


@dataclass
class ReplayUpdate:
    """One update's worth of replay data.

    Attributes:
        batches: ``[gradient_steps, sequence_length, batch_size]`` sequences sampled after this update's rollout
            was added (``None`` while the ring holds fewer than ``learning_starts`` env steps).
        rollout: the fresh ``[rollout_length, num_envs]`` transitions (already in the ring).
        stats: scalar tensors for logging (``rollout/*``, ``perf/*``, ``replay/*``), global across ranks.
    """

    batches: TensorDict | None
    rollout: TensorDict
    stats: dict[str, torch.Tensor] = field(default_factory=dict)


class ReplayDataModule(OnPolicyDataModule):
    """Owns the envs, the collector and a ``ReplayRing``; its iterable yields one ``ReplayUpdate`` per update.

    Each ``next()`` collects ``rollout_length`` steps in every env with the module's acting policy (SPO: SMC
    search), appends them to the ring, then samples ``gradient_steps`` batches of ``batch_size`` sequences of
    ``sequence_length`` consecutive steps (Stoix's ``epochs`` × ``total_batch_size`` × ``sample_sequence_length``:
    every gradient step gets a fresh batch, there are no minibatches). Like the on-policy module, the rollout is
    collected inside ``next()``, so a ``training_step(dataloader_iter)`` acts with the newest weights.

    Args:
        env: the env core (e.g. ``rl_lightning.envs.CartPole``, or ``GymnasiumEnv`` for a Gymnasium id).
        num_envs: parallel envs per rank.
        rollout_length: env steps per env collected before each update.
        total_env_steps: env-step budget over all ranks (rounded up to whole rollouts).
        buffer_size: transitions kept per rank (split evenly over envs; the oldest are overwritten).
        batch_size: sequences per gradient step.
        sequence_length: consecutive steps per sequence (the critic's GAE(λ) runs along it).
        gradient_steps: gradient steps (sampled batches) per update.
        learning_starts: env steps (over all ranks) to collect before the first gradient step.
        save_replay: also store the ring's contents in checkpoints (bit-exact resume; large files). Without it a
            resumed run refills the ring before it trains again.
        seed: base seed; ``None`` takes the CLI's ``seed_everything`` value (per-rank offsets as on-policy).
        device: where envs, rollouts and the ring live; ``"auto"`` follows the module's device.
        check_env: validate every action against the action space and masks (slow, for debugging).
        eval_episodes: episodes played by ``rl-lightning validate``/``test``; ``None`` takes the ``Evaluation``
            callback's ``num_episodes`` (its other settings always apply there: env form, deterministic, max_steps).
        eval_seed: seed of those episodes' env; ``None`` takes the ``Evaluation`` callback's ``seed``.
        num_actors: collect in this many actor processes beside the learner (``OnPolicyDataModule``'s setting:
            each actor runs the acting policy, SPO's search included, on its own envs); ``0``: in the learner.
        max_policy_lag: with actors: rollouts each actor may collect ahead (SPO's replay is off-policy already).
        actor_max_failures: with actors: failures of one actor in a row that stop the run with a checkpoint.
        actor_heartbeat_s: with actors: an actor with no env tick for this long is replaced.
        actor_env_splits: with actors: ``2`` steps each actor's envs in two groups, each group's env step beside the
            other group's search (``OnPolicyDataModule``'s setting).
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
        num_envs: int = 16,
        rollout_length: int = 32,
        total_env_steps: int = 100_000,
        buffer_size: int = 65_536,
        batch_size: int = 32,
        sequence_length: int = 32,
        gradient_steps: int = 32,
        learning_starts: int = 0,
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
        actor_env_splits: int = 1,
        borrow_idle_actor_cores: bool = False,
        actor_backend: str = "processes",
        ray_address: str | None = None,
    ) -> None:
        require_positive("data.rollout_length", rollout_length, "set the env steps per env per update, e.g. 32")
        require_positive("data.buffer_size", buffer_size, "set the transitions kept per rank, e.g. 65536")
        require_positive("data.batch_size", batch_size, "set the sequences per gradient step, e.g. 32")
        require_positive("data.sequence_length", sequence_length, "set the steps per sequence, e.g. 32")
        require_positive("data.gradient_steps", gradient_steps, "set the gradient steps per update, e.g. 32")
        if not isinstance(learning_starts, int) or learning_starts < 0:
            raise ConfigError(f"data.learning_starts={learning_starts!r}: must be an integer >= 0")
        super().__init__(
            env, num_envs, rollout_length, total_env_steps, seed, device, check_env, eval_episodes, eval_seed,
            num_actors=num_actors, max_policy_lag=max_policy_lag, actor_max_failures=actor_max_failures,
            actor_heartbeat_s=actor_heartbeat_s, actor_env_splits=actor_env_splits, actor_backend=actor_backend,
            ray_address=ray_address, borrow_idle_actor_cores=borrow_idle_actor_cores,
        )  # fmt: skip
        self.rollout_length = rollout_length
        self.buffer_size = buffer_size
        self.batch_size = batch_size
        self.sequence_length = sequence_length
        self.gradient_steps = gradient_steps
        self.learning_starts = learning_starts
        self.save_replay = save_replay
        self.replay: ReplayRing | None = None
        self.sample_generator: torch.Generator | None = None
        self.local_gradient_steps = 0

    @property
    def capacity(self) -> int:
        """Time rows per env kept in the ring."""
        return self.buffer_size // self.num_envs

    def setup(self, stage: str) -> None:
        if self.collector is not None or self.replay is not None:
            return
        super().setup(stage)
        device = self._resolve_device()
        seed = self._env_seed + 10_007 + 20_011  # the serial collector's sampling seed + 20_011
        self.sample_generator = torch.Generator(device=device).manual_seed(seed)
        self.replay = ReplayRing(self.capacity, self.num_envs, device)
        if self._restored is not None:
            self._apply_replay_state(self._restored)

    def check_fit_config(self, module: Any) -> None:
        """Configs that could never optimise or never fit in the ring are errors here, before any env exists."""
        super().check_fit_config(module)
        rollout = self.num_envs * self.rollout_length
        if self.capacity < self.rollout_length:
            raise ConfigError(
                f"data.buffer_size={self.buffer_size} holds fewer than one rollout (num_envs × rollout_length = "
                f"{rollout}); raise it to at least {rollout}"
            )
        if self.sequence_length > self.capacity:
            raise ConfigError(
                f"data.sequence_length={self.sequence_length} exceeds the {self.capacity} steps per env the ring "
                f"keeps (buffer_size / num_envs); lower it or raise data.buffer_size to "
                f">= {self.sequence_length * self.num_envs}"
            )
        per_env_budget = -(-self.total_env_steps // (self.num_envs * self.world_size))
        per_env_budget = -(-per_env_budget // self.rollout_length) * self.rollout_length
        if per_env_budget < self.sequence_length:
            raise ConfigError(
                f"data.total_env_steps={self.total_env_steps} gives each env only {per_env_budget} steps, fewer "
                f"than data.sequence_length={self.sequence_length}: no batch could ever be sampled; raise "
                f"total_env_steps or lower sequence_length"
            )
        if self.learning_starts >= self.total_env_steps:
            raise ConfigError(
                f"data.learning_starts={self.learning_starts} is not below data.total_env_steps="
                f"{self.total_env_steps}: training would never start; lower learning_starts"
            )

    def collect(self) -> ReplayUpdate:  # type: ignore[override]
        """Collect one rollout with the module's acting policy, store it, and sample this update's batches."""
        if self.replay is None or self.sample_generator is None or (self.collector is None and not self.num_actors):
            raise RuntimeError("ReplayDataModule.collect called before setup()")
        module = self.trainer.lightning_module
        actor_stats = None
        if self.num_actors:
            rollout, actor_stats = self.actor_rollout(module)
        else:
            assert self.collector is not None
            policy = module.acting_policy(self.collector.env, deterministic=False, training=True)
            rollout = self.collector.rollout(policy, self.rollout_length, module.policy_version)
            self.local_env_steps += self.rollout_size
        rollout = module.process_rollout(rollout)
        self._cut_joined_episodes(rollout)
        self.replay.add(rollout)
        ready = self.replay.size >= self.sequence_length and self.env_steps >= self.learning_starts
        batches = None
        if ready:
            total = self.gradient_steps * self.batch_size
            flat = self.replay.sample_sequences(total, self.sequence_length, self.sample_generator)
            batches = flat.reshape(self.sequence_length, self.gradient_steps, self.batch_size).transpose(0, 1)
            self.local_gradient_steps += self.gradient_steps
        update = ReplayUpdate(batches, rollout, self._stats(actor_stats))
        if batches is not None:
            self.last_rollout = Rollout(batches, update.stats)  # what FailFast saves to replay a bad update
        return update

    def _cut_joined_episodes(self, rollout: TensorDict) -> None:
        """Mark ``truncated`` the ring's newest row of every env where ``rollout`` starts a fresh episode although
        that row ended none: a replaced actor's first rows (or a resume that restarted the envs) follow an unrelated,
        unfinished episode in the same column. GAE(λ) stops only at ``terminated | truncated``: without the mark the
        critic's targets would run on into the next episode; with it they bootstrap from the row's ``final_obs``, as
        at a time-limit cut. Device ops only."""
        assert self.replay is not None
        newest = self.replay.newest()
        if newest is None or keys.IS_FIRST not in rollout.keys():  # noqa: SIM118 - TensorDict has no ``in``
            return
        joined = rollout[keys.IS_FIRST][0] & ~(newest[keys.TERMINATED] | newest[keys.TRUNCATED])
        newest[keys.TRUNCATED].logical_or_(joined)

    def _stats(self, actor_stats: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        assert self.replay is not None
        stats = self.rollout_stats() if actor_stats is None else actor_stats
        stats["replay/size"] = torch.tensor(float(len(self.replay) * self.world_size))
        stats["replay/fill"] = torch.tensor(self.replay.size / self.replay.capacity)
        stats["replay/ratio_actual"] = torch.tensor(self.local_gradient_steps / max(self.local_env_steps, 1))
        return stats

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.replay is not None and self.sample_generator is not None:
            mine = {
                "ring": self.replay.state_dict(include_storage=self.save_replay),
                "sample_generator": self.sample_generator.get_state(),
                "local_gradient_steps": self.local_gradient_steps,
            }
            state["replay"] = gather_per_rank(mine, self.world_size)
        return state

    def _apply_state(self, state: dict[str, Any]) -> None:
        super()._apply_state(state)
        if self.replay is not None and self.sample_generator is not None:
            self._apply_replay_state(state)

    def _apply_replay_state(self, state: dict[str, Any]) -> None:
        assert self.replay is not None
        assert self.sample_generator is not None
        replays = state.get("replay", [])
        rank = self.trainer.global_rank if self.trainer is not None else 0
        if len(replays) != self.world_size:
            return  # the collectors' warning already says the run restarts its streams
        mine = replays[rank]
        self.replay.load_state_dict(mine["ring"])
        self.sample_generator.set_state(mine["sample_generator"])
        self.local_gradient_steps = int(mine["local_gradient_steps"])
