"""A torch env whose evaluation form (``fresh()``) differs from its training form in every number evaluation logs.

Named from CLI configs as ``tests.eval_form_envs.TwoFormEnv``. The observation is constant, so a deterministic
policy takes the same action at every step of every episode: its return is exactly ``scale * (1 + action)`` per
step, while a sampling policy mixes both actions.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec, TorchEnv

TRAIN_LENGTH = 5  # every training-form episode lasts this many steps
TRAIN_SCALE = 1.0
EVAL_LENGTHS = (10, 30)  # evaluation-form episodes last a length drawn at reset from this range (inclusive)
EVAL_SCALE = 10.0


class TwoFormEnv(TorchEnv):
    """Two actions, a constant observation; reward ``scale * (1 + action)`` per step; episodes end (terminated)
    after ``length`` steps.

    Training form: ``length`` = 5, ``scale`` = 1. Evaluation form (``evaluation=True``, what ``fresh()`` builds):
    ``length`` drawn per episode uniformly in ``[10, 30]`` from the reset generator, ``scale`` = 10.

    Args:
        evaluation: build the evaluation form.
    """

    def __init__(self, evaluation: bool = False) -> None:
        self.evaluation = evaluation
        self.spec = EnvSpec(name="TwoFormEnv", obs_shape=(2,), discrete=True, num_actions=2)

    def fresh(self, render: bool = False) -> TwoFormEnv:
        return TwoFormEnv(evaluation=True)

    def draw_lengths(self, num: int, generator: torch.Generator) -> torch.Tensor:
        """Episode lengths of ``num`` new episodes (one draw of ``generator`` in either form, int64 ``[num]``)."""
        drawn = torch.randint(
            EVAL_LENGTHS[0], EVAL_LENGTHS[1] + 1, (num,), generator=generator, device=generator.device
        )
        return drawn if self.evaluation else torch.full_like(drawn, TRAIN_LENGTH)

    def reset_state(self, num: int, generator: torch.Generator) -> TensorDict:
        lengths = self.draw_lengths(num, generator)
        return TensorDict({"elapsed": torch.zeros_like(lengths), "length": lengths}, batch_size=[num])

    def observe(self, state: TensorDict) -> TensorDict:
        obs = torch.ones(*state.batch_size, 2, device=state.device)
        return TensorDict({keys.OBS: obs}, batch_size=state.batch_size)

    def step_state(
        self, state: TensorDict, action: torch.Tensor, generator: torch.Generator, inplace: bool = False
    ) -> tuple[TensorDict, TensorDict]:
        scale = EVAL_SCALE if self.evaluation else TRAIN_SCALE
        elapsed = state["elapsed"] + 1
        terminated = elapsed >= state["length"]
        new_lengths = self.draw_lengths(state.batch_size[0], generator)
        next_state = TensorDict(
            {
                "elapsed": torch.where(terminated, torch.zeros_like(elapsed), elapsed),
                "length": torch.where(terminated, new_lengths, state["length"]),
            },
            batch_size=state.batch_size,
        )
        obs = self.observe(state)[keys.OBS]
        out = TensorDict(
            {
                keys.OBS: obs,
                keys.FINAL_OBS: obs.clone(),
                keys.REWARD: (scale * (1 + action.float())).to(torch.float32),
                keys.TERMINATED: terminated,
                keys.TRUNCATED: torch.zeros_like(terminated),
                keys.IS_FIRST: terminated,
            },
            batch_size=state.batch_size,
        )
        return next_state, out
