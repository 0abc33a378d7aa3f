"""Exported graphs of policies that carry state between steps: DreamerV3's player (the RSSM posterior step).

A recurrent graph takes, after the observation inputs, ``is_first`` (bool ``[B]``: this observation starts an
episode) and one ``state/<name>`` input per carried tensor, and returns, after the action and the distribution's
parameters, the same tensors as ``next_state/<name>``: the caller feeds them back on the next step. Where
``is_first`` is True the graph resets the carry itself (as ``DreamerPlayer`` does), so the first step of a game
may pass any state of the right shape, e.g. ``zero_state``'s zeros. ``RecurrentPPOGraph`` carries its actor core's
``h`` (and an LSTM's ``c``).
"""

from __future__ import annotations

import torch
from torch import nn

from rl_lightning.algos import DreamerV3, RecurrentPPO
from rl_lightning.envs.base import EnvSpec
from rl_lightning.export.policy_graph import PolicyGraph, PPOGraph, TensorSpec


class RecurrentGraph(PolicyGraph):
    """A ``PolicyGraph`` with ``is_first`` and the carried ``state/<name>`` tensors as inputs and ``next_state/<name>``
    outputs. Subclasses call ``add_state`` once per carried tensor, in the order ``forward`` takes and returns them,
    then append ``state_outputs`` to ``outputs`` after their action and distribution outputs."""

    def __init__(self, spec: EnvSpec, normalizer: nn.Module | None, mask_dtype: str, stochastic: bool) -> None:
        super().__init__(spec, normalizer, mask_dtype, stochastic)
        self.state_outputs: list[str] = []

    def add_state(self, name: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> None:
        if not any(t.name == "is_first" for t in self.inputs):
            self.inputs.append(TensorSpec("is_first", (), torch.bool))
        self.inputs.append(TensorSpec(f"state/{name}", shape, dtype))
        self.state_outputs.append(f"next_state/{name}")

    @property
    def state_specs(self) -> list[TensorSpec]:
        """The ``state/<name>`` inputs, in order."""
        return [t for t in self.inputs if t.name.startswith("state/")]

    def zero_state(self, batch: int) -> dict[str, torch.Tensor]:
        """Zeros for every ``state/<name>`` input: what a first step (``is_first`` True) may pass."""
        return {t.name: torch.zeros((batch, *t.shape), dtype=t.dtype) for t in self.state_specs}


class DreamerPlayerGraph(RecurrentGraph):
    """DreamerV3's player in evaluation mode: ``embed → RSSM posterior (mode) → actor → action (mode)``.

    Carried state: ``deter`` ``[D]``, ``stoch`` ``[stoch, classes]`` (one-hot modes) and ``prev_action`` (the
    model-format action of the previous step: a one-hot, or the ``[-1, 1]`` box vector). Extra outputs: ``logits``
    (the unimixed log-probabilities the actor's mode is taken from) or ``mean`` and ``log_std`` (the bounded
    Normal's, in the model's ``[-1, 1]`` box).
    """

    def __init__(self, module: DreamerV3) -> None:
        super().__init__(module.env_spec, None, "bool", False)
        networks = module.actor_networks if module.actor_networks is not None else module.acting_networks()
        self.world_model, self.actor = networks["world_model"], networks["actor"]
        self.space = module.space
        rssm = self.world_model.rssm
        self.add_state("deter", (rssm.deter,))
        self.add_state("stoch", (rssm.stoch, rssm.classes))
        self.add_state("prev_action", (self.space.dim,))
        self.outputs += ["logits"] if self.space.discrete else ["mean", "log_std"]
        self.outputs += self.state_outputs

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves, _, rest = self.split(inputs)
        is_first, deter, stoch, prev_action = rest
        rssm = self.world_model.rssm
        embed = self.world_model.embed(self.observation(leaves))
        deter, stoch, _, _ = rssm._obs_core(
            deter, stoch, prev_action, embed, is_first, rssm.initial_carry(), None, False
        )
        out = self.actor(torch.cat([deter, stoch.flatten(-2)], -1))
        action = self.space.sample(out, None, deterministic=True)
        env_action = self.env_action(self.space.to_env(action))
        params = (self.space.log_probs(out),) if self.space.discrete else self.space._normal(out)
        return (env_action, *params, deter, stoch, action)


class RecurrentPPOGraph(RecurrentGraph):
    """RecurrentPPO's actor: ``encoder → actor core (LSTM/GRU, reset where is_first) → PPO heads``.

    Carried state: the actor core's ``h`` (and ``c`` for an LSTM), ``[core_size]`` each; a separate critic core
    does not act, so it is not carried. Outputs as ``PPOGraph``'s, then ``next_state/h`` (and ``next_state/c``).
    """

    def __init__(self, module: RecurrentPPO, mask_dtype: str) -> None:
        super().__init__(module.env_spec, module.obs_normalizer, mask_dtype, False)
        self.ppo = PPOGraph(module, mask_dtype, False)  # the encoder and the heads
        self.core = module.cores.actor_core
        for name in self.core.state_names:
            self.add_state(name, (self.core.size,))
        self.outputs = [*self.ppo.outputs, *self.state_outputs]

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves, mask, rest = self.split(inputs)
        is_first, state = rest[0], dict(zip(self.core.state_names, rest[1:], strict=True))
        out, after = self.core.step(self.ppo.encoder(self.observation(leaves)), state, is_first)
        return (*self.ppo.heads(self.ppo.actor(out), mask, None), *(after[n] for n in self.core.state_names))
