"""SPO: the LightningModule, its SMC search and the search's view of the networks."""

from rl_lightning.algos.spo.module import SPO
from rl_lightning.algos.spo.prior import ActorCriticPrior
from rl_lightning.algos.spo.search import SearchConfig, SearchResult, smc_search

__all__ = ["SPO", "ActorCriticPrior", "SearchConfig", "SearchResult", "smc_search"]
