"""The compiled evaluation step (docs/guides/speed.md): deterministic act and env step in one graph, no storage."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.fused_step import compile_step, require_fusable
from rl_lightning.envs.base import BatchedEnv, TorchEnv
from rl_lightning.envs.noise_step import NoiseSteppedEnv
from rl_lightning.errors import ConfigError
from rl_lightning.evaluation.episodes import DEFAULT_MAX_STEPS, Episodes
from rl_lightning.processes import stop

_CHECK_EVERY = 32  # steps between the (host-syncing) "all episodes finished?" checks, as in ``run_episodes``


def eval_step(module: Any, env: NoiseSteppedEnv, carry: dict[str, Any]) -> None:
    """One evaluation step in place: the module's deterministic action, the env's step, the first-episode sums.

    ``carry`` holds ``view`` (obs [+ action_mask]), ``state`` (the env state's tensors), ``noise`` (one fixed draw
    of ``step_noise``: a row that finished its first episode restarts from it, and nothing after that is counted),
    ``running`` (bool), ``returns`` and ``lengths`` (float32), all ``[B, ...]``.
    """
    view = carry["view"]
    batch = carry["running"].shape[:1]
    action = module.act(TensorDict(dict(view), batch_size=batch), None, deterministic=True)[keys.ACTION]
    state, out = env.step_from_noise(TensorDict(dict(carry["state"]), batch_size=batch), action, carry["noise"])
    running = carry["running"]
    carry["returns"].add_(out[keys.REWARD] * running)
    carry["lengths"].add_(running.float())
    running.copy_(running & ~(out[keys.TERMINATED] | out[keys.TRUNCATED]))
    for key, value in view.items():
        value.copy_(out[key])
    for key, value in carry["state"].items():
        value.copy_(state[key])


def require_compiled_evaluation(module: Any, env: TorchEnv, deterministic: bool) -> None:
    """Refuse, in one line, an evaluation ``CompiledEpisodes`` cannot play (``Evaluation(compile=True)`` at setup)."""
    require_fusable(module, env, field="Evaluation: compile")
    if not deterministic:
        raise ConfigError(
            "Evaluation: compile=true acts deterministically (argmax or mean); set deterministic: true or "
            "compile: false"
        )


class CompiledEpisodes:
    """Plays the first episode of each of ``num_episodes`` env rows, as ``run_episodes`` does, with ``eval_step``.

    Same start states as ``run_episodes`` for the same seed (same env, same reset), and the same returns and
    lengths wherever the compiled policy picks the same actions (argmax/mean; float tolerance aside). The step is
    compiled once, on the first ``run``; each later ``run`` reuses it.

    Args:
        module: an algorithm whose ``act(td, None, deterministic=True)`` is pure (PPO).
        env: the eval env core (a ``NoiseSteppedEnv``: ``require_compiled_evaluation`` checks it).
        num_episodes: rows, one episode each.
        device: where the env and the module live.
    """

    def __init__(self, module: Any, env: TorchEnv, num_episodes: int, device: torch.device) -> None:
        self.env = env
        self.num_episodes = num_episodes
        self.device = torch.device(device)

        def step(carry: dict[str, Any]) -> None:
            eval_step(module, env, carry)

        self._step = compile_step(step, self.device)

    @torch.no_grad()
    def run(self, seed: int, max_steps: int = DEFAULT_MAX_STEPS) -> Episodes:
        """The ``num_episodes`` episodes started from env seed ``seed`` (``finished`` False: cut by ``max_steps``)."""
        batched = BatchedEnv(self.env, self.num_episodes, self.device, seed=seed)
        obs = batched.reset()
        assert batched.state is not None
        zeros = torch.zeros(self.num_episodes, device=self.device)
        carry = {
            "view": {key: value.clone() for key, value in obs.items() if key != keys.IS_FIRST},
            "state": {key: value.clone() for key, value in batched.state.items()},
            "noise": self.env.step_noise(batched.generator, (self.num_episodes,)),
            "running": torch.ones(self.num_episodes, dtype=torch.bool, device=self.device),
            "returns": zeros,
            "lengths": zeros.clone(),
        }
        for step in range(max_steps):
            stop.check()
            self._step(carry)
            if (step + 1) % _CHECK_EVERY == 0 and not bool(carry["running"].any()):
                break
        return Episodes(carry["returns"], carry["lengths"], ~carry["running"])
