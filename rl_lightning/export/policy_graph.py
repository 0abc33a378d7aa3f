"""The exported policy as a plain ``nn.Module`` over positional tensors: raw observations in, env actions out.

``policy_graph(policy)`` (in ``rl_lightning.export``) wraps the networks a ``load_policy`` ``Policy`` acts with
into a ``PolicyGraph`` whose ``forward(*inputs)`` does everything between the env and ``env.step`` that
``Policy.__call__`` does: the frozen observation normaliser, ``uint8`` pixels scaled inside the encoder, the action
mask, the deterministic action (argmax; the Gaussian mean; SPO's ``tanh`` mode) in the env's terms (Box actions
clipped to the bounds, as ``gym_actions`` does), and the distribution's parameters as extra outputs. The input and
output names and dtypes are the file's interface (``PolicyGraph.inputs`` / ``outputs``), in this order:

* inputs: one per observation leaf (``obs`` for a single array; the ``/``-joined key of each ``Dict`` leaf in the
  checkpoint's ``EnvSpec`` order), in the dtype the env gives; ``action_mask`` where the env has masks; ``noise``
  with ``stochastic`` (the caller's random draws: ``U[0, 1)`` per logit, or ``N(0, 1)`` per action dimension);
  recurrent policies add ``is_first`` and one ``state/<name>`` per carried tensor.
* outputs: ``action``, then ``logits`` (masked) or ``mean`` and ``log_std``; recurrent policies add
  ``next_state/<name>`` for each ``state/<name>``.

Recurrent policies (DreamerV3's player; a recurrent PPO later) implement ``RecurrentGraph``: their carried state is
``state_inputs`` in and ``next_state`` out, so the caller holds it between steps, as ``Policy`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from rl_lightning.algos import PPO, SPO
from rl_lightning.algos.spo.prior import gaussian_head
from rl_lightning.envs.base import EnvSpec
from rl_lightning.errors import ConfigError
from rl_lightning.networks import distributions as D
from rl_lightning.networks.normalizers import DictObservationNormalizer

MASK_DTYPES = {"bool": torch.bool, "float32": torch.float32}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of the exported file: its name, per-row shape (the batch dim comes first) and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


class PolicyGraph(nn.Module):
    """Base of the exported graphs: the observation inputs, the mask input and the frozen normaliser.

    Args:
        spec: the checkpoint's env spec (observation leaves, action space, masks).
        normalizer: the module's observation normaliser (``None``: none); only read.
        mask_dtype: ``bool`` or ``float32`` for the ``action_mask`` input (float: non-zero = legal).
        stochastic: add a ``noise`` input and sample with it instead of taking the mode.
    """

    def __init__(self, spec: EnvSpec, normalizer: nn.Module | None, mask_dtype: str, stochastic: bool) -> None:
        super().__init__()
        self.spec = spec
        self.normalizer = normalizer
        self.leaf_keys = [key for key, _ in spec.obs_leaves()]
        self.stochastic = stochastic
        self.inputs = [TensorSpec("/".join(key) or "obs", tuple(leaf.shape), leaf.dtype) for key, leaf in
                       spec.obs_leaves()]  # fmt: skip
        if spec.has_action_mask:
            self.inputs.append(TensorSpec("action_mask", (spec.num_actions,), MASK_DTYPES[mask_dtype]))
        self.outputs: list[str] = ["action"]
        box = spec.action_kind == "box"
        for name, bound in (("low", spec.action_low), ("high", spec.action_high)):
            value = torch.tensor(bound, dtype=torch.float32).reshape(spec.action_shape) if box else torch.zeros(())
            self.register_buffer(name, value, persistent=False)

    def observation(self, leaves: tuple[torch.Tensor, ...]) -> torch.Tensor | dict[tuple[str, ...], torch.Tensor]:
        """The observation as the module's encoders read it (normalised where the module normalises)."""
        if self.leaf_keys == [()]:
            obs = leaves[0]
            return obs if self.normalizer is None else self.normalizer(obs)
        tree = dict(zip(self.leaf_keys, leaves, strict=True))
        if isinstance(self.normalizer, DictObservationNormalizer):
            for key in self.normalizer.keys:
                key = key if isinstance(key, tuple) else (key,)
                tree[key] = self.normalizer.normalizers["/".join(key)](tree[key])
        return tree

    def split(self, inputs: tuple[torch.Tensor, ...]) -> tuple[tuple[torch.Tensor, ...], torch.Tensor | None, tuple]:
        """``(observation leaves, mask as bool or None, the remaining inputs)``."""
        n = len(self.leaf_keys)
        leaves, rest = inputs[:n], inputs[n:]
        mask = None
        if self.spec.has_action_mask:
            mask, rest = rest[0] != 0, rest[1:]
        return leaves, mask, rest

    def env_action(self, action: torch.Tensor) -> torch.Tensor:
        """What ``gym_actions`` makes of the module's action: Box clipped to its bounds; indices as int64."""
        if self.spec.action_kind == "box":
            return torch.minimum(torch.maximum(action.float(), self.low), self.high)
        return action.long()

    def example_inputs(self, batch: int = 2) -> tuple[torch.Tensor, ...]:
        """Inputs of batch ``batch`` to trace with (masks all legal, observations zero)."""
        return tuple(torch.ones((batch, *t.shape), dtype=t.dtype) if t.name == "action_mask" else
                     torch.zeros((batch, *t.shape), dtype=t.dtype) for t in self.inputs)  # fmt: skip

    def add_noise_input(self, width: int) -> None:
        self.inputs.append(TensorSpec("noise", (width,), torch.float32))


class PPOGraph(PolicyGraph):
    """PPO's actor: masked logits (``Discrete``), Gaussian mean and log-std (``Box``), or independent categoricals /
    Bernoullis (``MultiDiscrete`` / ``MultiBinary``: deterministic only)."""

    def __init__(self, module: PPO, mask_dtype: str, stochastic: bool) -> None:
        super().__init__(module.env_spec, module.obs_normalizer, mask_dtype, stochastic)
        self.encoder, self.actor = module.encoder, module.actor
        kind = self.spec.action_kind
        if module.hparams.get("sde", False):
            raise ConfigError("model.sde=true: a gSDE policy's log-std depends on its hidden features, which this "
                              "graph does not output; export is not supported for it")  # fmt: skip
        self.policy_log_std = module.log_std if kind == "box" else None  # "log_std" would clash with the output
        if stochastic:
            if not module.acts_from_noise:
                raise ConfigError(f"--stochastic: PPO samples {kind} actions without a noise input; export without "
                                  "--stochastic (the deterministic action)")  # fmt: skip
            self.add_noise_input(module.action_width)
        self.outputs += ["mean", "log_std"] if kind == "box" else ["logits"]

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves, mask, rest = self.split(inputs)
        return self.heads(self.actor(self.encoder(self.observation(leaves))), mask, rest[0] if rest else None)

    def heads(
        self, out: torch.Tensor, mask: torch.Tensor | None, noise: torch.Tensor | None
    ) -> tuple[torch.Tensor, ...]:
        """``(action, distribution parameters...)`` from the actor's output, as ``PPO.act`` reads it."""
        kind = self.spec.action_kind
        if kind == "discrete":
            logits = D.masked_logits(out, mask)
            action = D.categorical_from_uniform(logits, noise) if noise is not None else logits.argmax(-1)
            return self.env_action(action), logits
        if kind == "box":
            log_std = self.policy_log_std.expand_as(out)
            action = D.normal_from_noise(out, log_std, noise) if noise is not None else out
            return self.env_action(action.reshape(-1, *self.spec.action_shape)), out, log_std
        nvec = self.spec.action_nvec
        flat = D.multi_categorical_sample(out, nvec, None, True) if nvec else (out > 0).long()
        return flat.reshape(-1, *self.spec.action_shape), out


class SPOPriorGraph(PolicyGraph):
    """SPO's prior π_θ alone, without the search (what ``load_policy``'s ``policy(obs)`` acts with): masked logits,
    or the tanh-squashed Normal's pre-tanh mean and log-std, its mode ``tanh`` scaled to the Box bounds."""

    def __init__(self, module: SPO, mask_dtype: str, stochastic: bool) -> None:
        super().__init__(module.env_spec, module.obs_normalizer, mask_dtype, stochastic)
        self.encoder, self.actor = module.encoder, module.actor
        spec = self.spec
        if stochastic:
            self.add_noise_input(spec.num_actions if spec.discrete else int(self.low.numel()))
        self.outputs += ["logits"] if spec.discrete else ["mean", "log_std"]

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves, mask, rest = self.split(inputs)
        out = self.actor(self.encoder(self.observation(leaves))).float()
        if self.spec.discrete:
            logits = D.masked_logits(out, mask)
            action = D.categorical_from_uniform(logits, rest[0]) if self.stochastic else logits.argmax(-1)
            return self.env_action(action), logits
        mean, std = gaussian_head(out)
        low, high = self.low.reshape(-1), self.high.reshape(-1)
        if self.stochastic:
            action = D.tanh_normal_from_noise(mean, std, low, high, rest[0])
        else:
            action = D.tanh_normal_mode(mean, low, high)
        return self.env_action(action.reshape(-1, *self.spec.action_shape)), mean, std.log()
