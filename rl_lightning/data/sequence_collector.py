"""``SequenceCollector``: steps a ``BatchedEnv`` and emits DreamerV3's replay stream, one row per env per tick.

DreamerV3 (dreamer.md §1) trains on a continuous per-env stream where row ``t`` holds what the agent *saw* at
tick ``t`` and what it did there::

    tick        t=0          t=1         ...   t=T            t=T+1        t=T+2
    obs         o_0 (reset)  o_1               o_T (terminal) o'_0 (reset)  o'_1
    reward      0            r_1               r_T            0             r'_1
    is_first    1            0                 0              1             0
    terminated  0            0                 term_T         0             0
    truncated   0            0                 trunc_T        0             0
    action      a_0          a_1               0 (ignored)    a'_0          a'_1

``reward_t`` is the reward received on arriving at ``o_t``; ``terminated``/``truncated`` say that ``o_t`` ends the
episode (``is_last`` = either). The terminal observation is a row of its own, so the world model learns to predict
termination from it; its action is zeroed and the env does not take it: that tick resets the env instead, and the
next row is the new episode's first observation. So every env writes exactly one row per tick, and the ring stays a
lockstep ``[T, num_envs]`` array. Like danijar's driver, each tick counts as one policy step per env, including the
reset tick (one per episode).

How a terminal row's tick avoids moving the env (``stepping``):

* ``next_step`` (every Gymnasium backend: ``GymnasiumEnv``, ``GymnasiumVectorEnv`` sync/async, ``EnvPoolEnv``,
  ``AleVectorEnv``): the collector switches the env to next-step autoreset (``next_step_autoreset``), steps it
  like any other env with the recorded (zeroed) actions, and writes the next rows from the step's outputs. A row
  that ended on the previous step is reset by this step, its action ignored. This is exactly danijar's driver
  (it zeroes the action of an ``is_last`` row and sends ``reset`` with it; its Gym wrapper resets on that step),
  and it is Gymnasium's ``AutoresetMode.NEXT_STEP`` and EnvPool's and ale-py's native autoreset: no snapshots,
  no extra env calls. Under an Atari preset that ends training episodes at a lost life while the game goes on,
  the reset tick starts the next life as that backend does it (the preset's reset wrappers in the in-process and
  vector backends, EnvPool's own play-on step, FIRE in place of the zero action on ale-py), and its frame stack
  starts afresh: each life is an episode of the stream (``tests/test_dreamer_backends.py``).
* ``hold`` (torch-native envs, and any other env that can snapshot): they keep the same-step contract. The env is
  stepped functionally (``step_state(..., inplace=False)``) and the state of envs showing a terminal row is kept
  with a branch-free ``torch.where`` (their state is tensors: a clone, no snapshot cost); the reset observation
  the same-step auto-reset produced waits in ``pending`` for the next tick.

Why not a ragged ring, where an env that finishes writes its terminal and reset rows in one tick (sheeprl's per-env
buffers)? That needs a write position per env in the ring, its commits and the async engine; next-step autoreset
keeps the ring lockstep and counts policy steps as DreamerV3 does, with small changes to the backends only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.collector_base import CollectorBase
from rl_lightning.envs.base import BatchedEnv, TorchEnv
from rl_lightning.errors import ConfigError
from rl_lightning.processes import stop

#: ``(view, generator) -> TensorDict`` holding ``action``; the view carries ``obs`` and ``is_first``.
Policy = Callable[[TensorDict, torch.Generator], TensorDict]

NEXT_STEP, HOLD = "next_step", "hold"


def stepping(env: TorchEnv) -> str:
    """How the collector keeps a terminal row's env from taking its action (see the module docstring).

    Raises:
        ConfigError: for an env that neither resets on the next step nor can snapshot.
    """
    if callable(getattr(env, "next_step_autoreset", None)):
        return NEXT_STEP
    if env.can_snapshot:
        return HOLD
    raise ConfigError(
        f"data.env={type(env).__name__}: DreamerV3's sequence collector needs an env that resets on the next step "
        "(next_step_autoreset: every Gymnasium backend) or that can snapshot (torch-native envs); this one does "
        "neither"
    )


class SequenceCollector(CollectorBase):
    """Collects ``[num_ticks, num_envs]`` rows of the DreamerV3 stream (see the module docstring).

    Args:
        env: the batched env to step (owned by the collector from now on).
        seed: seeds the action-sampling generator.
    """

    live_keys = ("view", "pending")  # what the policy sees next; hold: reset observations behind terminal rows
    _view: TensorDict | None
    _pending: TensorDict | None

    def __init__(self, env: BatchedEnv, seed: int = 0) -> None:
        super().__init__(env, seed)
        self.stepping = stepping(env.env)
        self._ended: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # episodes ended, not yet counted

    def _start(self) -> None:
        if self.stepping == NEXT_STEP:
            self.env.env.next_step_autoreset()  # type: ignore[attr-defined]
        first = self.env.reset()
        n, device = self.env.num_envs, self.env.device
        first[keys.REWARD] = torch.zeros(n, device=device)
        first[keys.TERMINATED] = torch.zeros(n, dtype=torch.bool, device=device)
        first[keys.TRUNCATED] = torch.zeros(n, dtype=torch.bool, device=device)
        self._view = first
        self._pending = first.select(*self._obs_keys(first)).clone() if self.stepping == HOLD else first.select()

    @staticmethod
    def _obs_keys(view: TensorDict) -> list[str]:
        return [k for k in (keys.OBS, keys.ACTION_MASK) if view.get(k, None) is not None]

    @torch.no_grad()
    def tick(self, policy: Policy, policy_version: int) -> TensorDict:
        """One tick: act on the current view, store it as a row, advance every env not showing a terminal row."""
        stop.check()  # a stop request ends the window here; the checkpoint is the last update's
        if self._view is None:
            self._start()
        view, pending = self._view, self._pending
        assert view is not None
        assert pending is not None
        acted = policy(view, self.generator)
        action = acted[keys.ACTION]
        last = view[keys.TERMINATED] | view[keys.TRUNCATED]
        row = view.clone(recurse=False)
        row[keys.ACTION] = torch.where(_expand(last, action), torch.zeros_like(action), action)
        row[keys.POLICY_VERSION] = torch.full_like(last, policy_version, dtype=torch.int64)
        if self.stepping == NEXT_STEP:
            self._view = self._step_next(row[keys.ACTION], last)
        else:
            self._view, self._pending = self._advance(view, pending, action, last)
        return row

    def _step_next(self, action: torch.Tensor, last: torch.Tensor) -> TensorDict:
        """Next-step autoreset: one plain step; the rows in ``last`` are reset by it (their zeroed action ignored)."""
        out = self.env.step(action)
        self.count_games(out)  # Atari presets: whole-game raw scores for rollout/game_score
        nxt = out.select(*self._obs_keys(out))
        nxt[keys.REWARD] = out[keys.REWARD]
        nxt[keys.IS_FIRST] = out[keys.IS_FIRST]
        nxt[keys.TERMINATED] = out[keys.TERMINATED]
        nxt[keys.TRUNCATED] = out[keys.TRUNCATED]
        self._track_episodes(out[keys.REWARD], last, out[keys.TERMINATED] | out[keys.TRUNCATED])
        return nxt

    def _advance(
        self, view: TensorDict, pending: TensorDict, action: torch.Tensor, last: torch.Tensor
    ) -> tuple[TensorDict, TensorDict]:
        env = self.env
        old = env.state
        assert old is not None
        if env.check:
            env.env.check_action(old, action)
        stepped, out = env.env.step_state(old, action, env.generator, inplace=False)
        env.state = torch.where(last, old, stepped)
        env.env.release(torch.where(last, stepped, old))
        done = (out[keys.TERMINATED] | out[keys.TRUNCATED]) & ~last
        arrived = view.select(*self._obs_keys(view)).clone(recurse=False)
        arrived[keys.OBS] = out[keys.FINAL_OBS]
        if keys.ACTION_MASK in arrived.keys():  # noqa: SIM118 - TensorDict has no ``in``
            arrived[keys.ACTION_MASK] = out[keys.ACTION_MASK]
        nxt = torch.where(last, pending, arrived)
        nxt[keys.REWARD] = torch.where(last, torch.zeros_like(out[keys.REWARD]), out[keys.REWARD])
        nxt[keys.IS_FIRST] = last
        nxt[keys.TERMINATED] = out[keys.TERMINATED] & ~last
        nxt[keys.TRUNCATED] = out[keys.TRUNCATED] & ~last
        fresh = out.select(*self._obs_keys(pending))
        new_pending = torch.where(done, fresh, pending)
        self._track_episodes(nxt[keys.REWARD], last, done)
        return nxt, new_pending

    def _track_episodes(self, reward: torch.Tensor, last: torch.Tensor, done: torch.Tensor) -> None:
        self._episode_return += reward
        self._episode_length += (~last).float()
        zero = torch.zeros_like(self._episode_return)
        self._ended.append(
            (torch.where(done, self._episode_return, zero), torch.where(done, self._episode_length, zero), done)
        )
        self._episode_return.masked_fill_(done, 0.0)
        self._episode_length.masked_fill_(done, 0.0)

    def _count_ended(self) -> None:
        """Add the episodes ended since the last call to ``finished``, once per rollout: a torchmetrics update per
        tick made an Atari prefill tick 7% slower (``benchmarks/dreamer/dreamer_real.py``)."""
        if self._ended:
            returns, lengths, done = (torch.stack(column) for column in zip(*self._ended, strict=True))
            self.finished.update(returns, lengths, done)
            self._ended.clear()

    def episode_stats(self) -> dict[str, torch.Tensor]:
        self._count_ended()
        return super().episode_stats()

    @torch.no_grad()
    def rollout(self, policy: Policy, num_ticks: int, policy_version: int) -> TensorDict:
        """``num_ticks`` ticks stacked into a ``[num_ticks, num_envs]`` TensorDict."""
        start = time.perf_counter()
        rows = [self.tick(policy, policy_version) for _ in range(num_ticks)]
        batch = torch.stack(rows)
        self._count_ended()
        self.env.watch(batch)  # NaN/inf: device ops only; the datamodule reads it once per window
        self.last_collect_seconds = time.perf_counter() - start
        return batch


def _expand(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.reshape(mask.shape + (1,) * (like.dim() - mask.dim()))
