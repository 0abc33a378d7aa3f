"""One DreamerV3 gradient step's losses as a few pure tensor regions, run eagerly or ``torch.compile``d.

``DreamerV3(compile_update=True)`` compiles each region once (``fullgraph=True, dynamic=False``; autograd compiles
their backward too) and calls it in the same Python loops the eager step runs:

- ``embed``: the encoder over the ``[T, B]`` observations;
- ``observe_first`` and ``observe_step``: one posterior RSSM step over ``[B]``, from the initial carry, then ``T − 1``
  times from the previous step's (the observe scan);
- ``world_model_terms``: decoders, reward and continue heads, KL terms over ``[T, B]``;
- ``imagine_step`` and ``imagine_last``: feature, actor sample and prior step over ``N = T·B`` starts, called ``H``
  times, then the last state's feature and action (no gradient);
- ``behaviour_targets``: reward, continue, critic, slow critic, λ-returns and weights over ``[H+1, N]``;
- ``behaviour_terms``: advantages, policy and value losses, after the return normaliser's update, which stays eager
  (its percentiles are all-gathered across ranks);
- ``replay_value``: the 2024 replay value loss along the real sequence.

Loops stay in Python so that a region is one small graph compiled once, whatever ``T`` and ``H`` are; unrolling
them would compile a graph ``T + H`` steps long (minutes on a CPU). The randomness comes in as tensors
(``GradientStepDraws``), so the eager and the compiled step sample the same numbers.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos.dreamer.behavior import (
    ActorCritic,
    behaviour_targets,
    behaviour_terms,
    imagine_step,
    replay_value_terms,
)
from rl_lightning.algos.dreamer.draws import GradientStepDraws
from rl_lightning.algos.dreamer.policy import ActionSpace
from rl_lightning.algos.dreamer.world_model import WorldModel
from rl_lightning.objectives import dreamer as L


def _embed(world_model: WorldModel, obs: torch.Tensor | TensorDict) -> torch.Tensor:
    return world_model.embed(obs)


def _observe_first(world_model: WorldModel, *args: Any) -> tuple[torch.Tensor, ...]:
    return world_model.rssm.obs_core(*args)


def _observe_step(world_model: WorldModel, *args: Any) -> tuple[torch.Tensor, ...]:
    # the same step as ``_observe_first``; its own code object, so dynamo keeps its graph apart from row 0's
    return world_model.rssm.obs_core(*args)


def _world_model_terms(world_model: WorldModel, *args: Any) -> tuple[dict[str, torch.Tensor], ...]:
    return world_model.loss_terms(*args)


def _imagine_last(
    world_model: WorldModel, actor: Any, space: ActionSpace, deter: torch.Tensor, stoch: torch.Tensor, noise: Any
) -> tuple[torch.Tensor, ...]:
    return imagine_step(world_model, actor, space, deter, stoch, noise, None)


def _replay_value(
    ac: ActorCritic,
    world_model: WorldModel,
    deter: torch.Tensor,
    stoch: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    returns: torch.Tensor,
    lam: float,
    discount_horizon: float,
    slowreg: float,
) -> torch.Tensor:
    cont = L.continue_target(terminated.float(), discount_horizon, True)  # γ(1 − term)
    features = torch.cat([deter, stoch.flatten(-2)], -1).detach()
    last = (terminated | truncated).float()
    return replay_value_terms(ac, features, reward, last, returns, lam, cont, slowreg)


REGIONS = {
    "embed": _embed,
    "observe_first": _observe_first,  # row 0: its carry is the initial state, which has no gradient
    "observe_step": _observe_step,
    "world_model_terms": _world_model_terms,
    "imagine_step": imagine_step,
    "imagine_last": _imagine_last,
    "behaviour_targets": behaviour_targets,
    "behaviour_terms": behaviour_terms,
    "replay_value": _replay_value,
}


class UpdateGraphs:
    """The losses of one gradient step from its draws, each region eager or compiled (``compile``).

    The compiled functions are made on first use per device type and are not copied or pickled with the module
    that holds this (a copy compiles its own).
    """

    def __init__(self, compile: bool) -> None:
        self.compile = compile
        self._compiled: dict[tuple[str, str], Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"compile": self.compile, "_compiled": {}}

    def region(self, name: str, device: torch.device) -> Any:
        """The region ``name``, compiled for ``device``'s type if ``compile``."""
        if not self.compile:
            return REGIONS[name]
        key = (name, device.type)
        if key not in self._compiled:
            self._compiled[key] = torch.compile(REGIONS[name], fullgraph=True, dynamic=False)
        return self._compiled[key]

    def losses(
        self, module: Any, seq: TensorDict, draws: GradientStepDraws, gather: Any
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Per-step loss terms (``[T, B]`` or ``[H, N]``) and detached diagnostics of ``module`` on ``seq``."""
        hp, wm, ac, space = module.hparams, module.world_model, module.behaviour, module.space
        device = seq.device if seq.device is not None else module.device

        def run(name: str, *args: Any) -> Any:
            return self.region(name, device)(*args)

        actions = space.to_model(seq[keys.ACTION])
        prev, is_first = wm.observe_inputs(seq, actions)
        embed = run("embed", wm, seq[keys.OBS])
        initial = wm.rssm.initial_carry()
        batch = embed.shape[1]
        deter, stoch = initial[0].expand(batch, -1), initial[1].expand(batch, *initial[1].shape)
        steps = []
        for t in range(embed.shape[0]):
            region = "observe_step" if t else "observe_first"
            out = run(region, wm, deter, stoch, prev[t], embed[t], is_first[t], initial, draws.posterior[t])
            deter, stoch = out[0], out[1]
            steps.append(out)
        deters, stochs, post_logp, prior_logp = (torch.stack(x) for x in zip(*steps))
        wm_terms, wm_diag = run(
            "world_model_terms", wm, deters, stochs, post_logp, prior_logp, seq[keys.OBS], seq[keys.REWARD],
            seq[keys.TERMINATED], hp.free_nats, hp.discount_horizon, hp.discount_continue,
        )  # fmt: skip

        features, imagined = self._imagine(run, wm, ac, space, deters, stochs, draws)
        disc = 1.0 if hp.discount_continue else 1.0 - 1.0 / hp.discount_horizon
        targets = run("behaviour_targets", ac, wm, features, hp.lam, disc)
        returns = targets.returns
        ac.return_norm.update(returns, gather)
        scale = ac.return_norm.scale()
        if getattr(module, "keep_histogram_source", False):  # Histograms: this step's targets (references, no copy)
            module.histogram_source = (returns, targets.value, scale)
        ac_terms, ac_diag = run("behaviour_terms", ac, features, imagined, targets, scale, hp.entropy_coef, hp.slowreg)
        per_step = {**wm_terms, **ac_terms}
        if hp.repval_scale > 0:
            per_step["repval"] = run(
                "replay_value", ac, wm, deters, stochs, seq[keys.REWARD], seq[keys.TERMINATED],
                seq[keys.TRUNCATED], returns, hp.lam, hp.discount_horizon, hp.slowreg,
            )  # fmt: skip
        return per_step, {**{f"wm_{k}": v for k, v in wm_diag.items()}, **ac_diag}

    @staticmethod
    def _imagine(
        run: Any,
        wm: WorldModel,
        ac: ActorCritic,
        space: ActionSpace,
        deters: torch.Tensor,
        stochs: torch.Tensor,
        draws: GradientStepDraws,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Roll the prior ``H`` steps from every posterior state (no gradient): features and actions ``[H+1, N]``."""
        with torch.no_grad():
            deter, stoch = deters.detach().flatten(0, 1), stochs.detach().flatten(0, 1)
            features, actions = [], []
            for step in range(draws.prior.shape[0]):
                feat, action, deter, stoch = run(
                    "imagine_step", wm, ac.actor, space, deter, stoch, draws.action[step], draws.prior[step]
                )
                features.append(feat)
                actions.append(action)
            feat, action = run("imagine_last", wm, ac.actor, space, deter, stoch, draws.action[-1])
            features.append(feat)
            actions.append(action)
        return torch.stack(features), torch.stack(actions)
