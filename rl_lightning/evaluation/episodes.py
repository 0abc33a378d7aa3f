"""Run whole evaluation episodes on a separate batched env: one episode per env row.

``play_episodes`` plays them and says which ended within ``max_steps``; ``episode_metrics`` turns that into the
logged means, over the episodes that ended (a cut episode is counted in ``episodes_cut``, never averaged in).
Without a policy they play the uniform-random baseline (``envs.random_action``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from rl_lightning import keys
from rl_lightning.envs.base import BatchedEnv, TorchEnv
from rl_lightning.envs.random_action import random_action
from rl_lightning.evaluation.video import FrameRecorder
from rl_lightning.processes import stop
from rl_lightning.processes.learner_waits import pause_point

_CHECK_EVERY = 32  # env steps between the (host-syncing) "all episodes finished?" checks
#: Default bound on steps per evaluation episode: an Atari game's 108,000 frames at frame skip 4 (research/envs.md),
#: so a whole Atari game is never cut; envs with shorter time limits end well before it.
DEFAULT_MAX_STEPS = 27_000


@dataclass
class Episodes:
    """The first episode of each evaluation env row.

    Attributes:
        returns: float32 ``[N]``, summed rewards (of the steps played, for a cut episode).
        lengths: float32 ``[N]``, steps played.
        finished: bool ``[N]``: the episode ended (terminated or truncated by the env) within ``max_steps``;
            False marks an episode cut by ``max_steps``.
    """

    returns: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor


@torch.no_grad()
def play_episodes(
    policy: object,
    env: TorchEnv,
    num_episodes: int,
    device: torch.device,
    seed: int,
    deterministic: bool = True,
    max_steps: int = DEFAULT_MAX_STEPS,
    recorder: FrameRecorder | None = None,
) -> Episodes:
    """Play the first episode of each of ``num_episodes`` env rows, for at most ``max_steps`` steps each.

    ``policy`` is an ``RLModule`` (its ``acting_policy`` in evaluation mode) or the string ``"random"`` for the
    uniform-random baseline (``random_action``: the env's action space, legal actions only). ``env`` is played
    as given: the Evaluation callback passes the training env's evaluation form (``TorchEnv.fresh``). The
    episodes' env states are released at the end; ``env`` itself stays open for the caller to reuse and close.
    A ``recorder`` draws the state of its first rows before every step (rendering costs nothing when there is none).
    Played in a background thread (``processes.learner_waits``), each step first waits for the learner to wait.
    """
    batched = BatchedEnv(env, num_episodes, device, seed=seed)
    act = None if policy == "random" else policy.acting_policy(batched, deterministic, training=False)  # type: ignore[attr-defined]
    generator = torch.Generator(device=device).manual_seed(seed + 1)
    obs = batched.reset()
    returns = torch.zeros(num_episodes, device=device)
    lengths = torch.zeros(num_episodes, device=device)
    running = torch.ones(num_episodes, dtype=torch.bool, device=device)
    try:
        for step in range(max_steps):
            stop.check()  # SIGTERM/Ctrl+C: stop within one env step (rl_lightning.processes.stop)
            pause_point()  # in a background evaluation (Evaluation(background=true)), wait for the learner to wait
            if recorder is not None:
                recorder.capture(batched.state)
            action = random_action(env.spec, obs, generator) if act is None else act(obs, generator)[keys.ACTION]
            out = batched.step(action)
            returns += out[keys.REWARD] * running
            lengths += running.float()
            running &= ~(out[keys.TERMINATED] | out[keys.TRUNCATED])
            obs = out.select(*obs.keys(include_nested=False), strict=False)
            obs[keys.IS_FIRST] = out[keys.IS_FIRST]
            if (step + 1) % _CHECK_EVERY == 0 and not bool(running.any()):
                break
    finally:
        if batched.state is not None:
            env.release(batched.state)  # the caller owns ``env`` and closes it; reused across evaluations
    return Episodes(returns, lengths, ~running)


def run_episodes(
    policy: object,
    env: TorchEnv,
    num_episodes: int,
    device: torch.device,
    seed: int,
    deterministic: bool = True,
    max_steps: int = DEFAULT_MAX_STEPS,
    recorder: FrameRecorder | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``play_episodes`` as ``(returns, lengths)`` of every row, for scripts that average them themselves.

    A cut episode's partial return is in ``returns`` here, so this warns (one host sync) when any was cut;
    ``play_episodes`` with ``episode_metrics`` leaves cut episodes out of the means and counts them.
    """
    episodes = play_episodes(policy, env, num_episodes, device, seed, deterministic, max_steps, recorder)
    cut = int((~episodes.finished).sum())
    if cut:
        warnings.warn(
            f"run_episodes: {cut} of {num_episodes} episodes were cut at max_steps={max_steps} and their partial "
            "returns are included; raise max_steps, or use play_episodes to leave them out",
            stacklevel=2,
        )
    return episodes.returns, episodes.lengths


def episode_metrics(
    episodes: Episodes, reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """``episode_return``, ``episode_length`` (means over the episodes that ended) and ``episodes_cut`` (a count).

    A cut episode (``max_steps`` reached first) is counted in ``episodes_cut`` and stays out of both means; when
    every episode was cut the means are NaN (and a warning says to raise ``max_steps``). ``reduce_sum`` sums a
    tensor over ranks (``trainer.strategy.reduce(..., reduce_op="sum")``), so the means are over all ranks'
    episodes; the values stay on the device (the warning's check reads one number back).
    """
    finished = episodes.finished.float()
    totals = torch.stack(
        [(episodes.returns * finished).sum(), (episodes.lengths * finished).sum(), finished.sum(), (1 - finished).sum()]
    )
    if reduce_sum is not None:
        totals = reduce_sum(totals)
    if not bool(totals[2] > 0):
        warnings.warn(
            "every evaluation episode was cut at max_steps before it ended, so the mean episode return is NaN; "
            "raise the Evaluation callback's max_steps",
            stacklevel=2,
        )
    return {"episode_return": totals[0] / totals[2], "episode_length": totals[1] / totals[2], "episodes_cut": totals[3]}
