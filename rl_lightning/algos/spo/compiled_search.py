"""SPO's ``compile_search``: the whole SMC search as one ``torch.compile`` graph over noise drawn before it.

``smc_search`` with ``noise=`` is a pure function of its inputs; this module draws the noise (a few kernels, eager,
from the collector's generator), then runs that function compiled with ``fullgraph=True, dynamic=False``: the depth
loop unrolls, the per-depth elementwise work (weights, masks, ESS, bootstrap) fuses, and the networks' matmuls stay
oneDNN/cuBLAS calls. One graph per ``(E, N, depth, explore, greedy)``: training and evaluation each compile once.
It needs an env whose step can take pre-drawn noise (``NoiseSteppedEnv``: the package's torch envs).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning.algos.spo.draws import NoiseDraws
from rl_lightning.algos.spo.prior import ActorCriticPrior
from rl_lightning.algos.spo.search import SearchConfig, SearchResult, smc_search
from rl_lightning.data.fused_step import CPU_OPTIONS
from rl_lightning.envs.base import TorchEnv
from rl_lightning.envs.noise_step import NoiseSteppedEnv
from rl_lightning.errors import ConfigError


def check_compilable(env: TorchEnv) -> None:
    """Refuse ``compile_search`` in one line for an env whose step cannot take pre-drawn noise."""
    if not isinstance(env, NoiseSteppedEnv):
        raise ConfigError(
            f"model.compile_search=true needs an env whose step takes pre-drawn noise (the package's torch envs); "
            f"{type(env).__name__} does not: set model.compile_search=false"
        )


def _search_from_noise(
    env: NoiseSteppedEnv,
    root_state: TensorDict,
    root_obs: TensorDict,
    prior: ActorCriticPrior,
    config: SearchConfig,
    temperature: torch.Tensor,
    noise: dict[str, torch.Tensor],
    explore: bool,
    greedy: bool,
) -> tuple[torch.Tensor, ...]:
    result = smc_search(
        env, root_state, root_obs, prior, config, temperature, None, explore, greedy, noise=NoiseDraws(**noise)
    )
    return tuple(vars(result).values())


class CompiledSearch:
    """``smc_search`` for a ``NoiseSteppedEnv``, compiled (or, with ``compile=False``, the same pure function eager:
    what the tests compare the compiled graph against). The compiled function is built on first use per device type
    and is not copied or pickled with the module that holds this (a copy compiles its own)."""

    def __init__(self, compile: bool = True) -> None:
        self.compile = compile
        self._compiled: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"compile": self.compile, "_compiled": {}}

    def _function(self, device_type: str) -> Any:
        if not self.compile:
            return _search_from_noise
        if device_type not in self._compiled:
            options = CPU_OPTIONS if device_type == "cpu" else None
            self._compiled[device_type] = torch.compile(
                _search_from_noise, fullgraph=True, dynamic=False, options=options
            )
        return self._compiled[device_type]

    def __call__(
        self,
        env: TorchEnv,
        root_state: TensorDict,
        root_obs: TensorDict,
        prior: ActorCriticPrior,
        config: SearchConfig,
        temperature: torch.Tensor,
        generator: torch.Generator,
        explore: bool = False,
        greedy: bool = False,
    ) -> SearchResult:
        check_compilable(env)
        assert isinstance(env, NoiseSteppedEnv)
        noise = NoiseDraws.draw(
            env, prior, root_state.batch_size[0], config.num_particles, config.depth, config.dirichlet_alpha, generator
        )
        search = self._function(noise.readout.device.type)
        with torch.no_grad():
            fields = search(env, root_state, root_obs, prior, config, temperature, noise.as_dict(), explore, greedy)
        return SearchResult(*fields)
