"""SPO's search on registry envs (OpenSpiel games) copies each particle once and steps it in place: the same search,
draw for draw, as copying every particle at every step, with every state it took released."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pyspiel")

from rl_lightning.algos.spo import SPO  # noqa: E402
from rl_lightning.algos.spo.search import SearchConfig, smc_search  # noqa: E402
from rl_lightning.envs.base import BatchedEnv  # noqa: E402
from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.envs.games.bots import RandomBot  # noqa: E402


class CopyEveryStep:
    """The env seen as a tensor-state env, so the search copies every particle at every step (the old path)."""

    state_is_tensors = True

    def __init__(self, env: OpenSpielEnv) -> None:
        self._env = env

    def __getattr__(self, name: str):
        return getattr(self._env, name)


class CountingEnv(OpenSpielEnv):
    """Counts the game copies taken (each ``_copy_row``)."""

    copies = 0

    def _copy_row(self, row):
        CountingEnv.copies += 1
        return super()._copy_row(row)


@pytest.mark.parametrize(
    ("mode", "period", "depth"), [("period", 4, 4), ("period", 1, 4), ("period", 2, 5), ("ess", 4, 6)]
)
def test_in_place_search_equals_copying_search_and_releases_every_state(mode, period, depth):
    torch.manual_seed(0)
    env = BatchedEnv(CountingEnv("open_spiel:connect_four"), 6, seed=1)
    obs = env.reset()
    gen = torch.Generator().manual_seed(2)
    for _ in range(5):  # a few moves in, so that some particles end their games inside the search
        obs = env.step(RandomBot()(obs["obs"], obs["action_mask"], obs["seat"], gen))
    module = SPO(env_spec=env.spec, hidden_sizes=(16,))
    config = SearchConfig(num_particles=8, depth=depth, resample_mode=mode, resample_period=period,
                          ess_threshold=0.9)  # fmt: skip
    results, copies = [], []
    for view in (env.env, CopyEveryStep(env.env)):
        CountingEnv.copies = 0
        live = env.env.live_count
        result = smc_search(view, env.state, obs, module.prior, config, torch.tensor(0.5),
                            torch.Generator().manual_seed(3), explore=True)  # fmt: skip
        assert env.env.live_count == live  # every state the search took is released
        results.append(result)
        copies.append(CountingEnv.copies)
    in_place, copying = results
    for name in ("action", "sampled_actions", "weights", "log_weights", "advantages", "ess", "alive", "resampled"):
        torch.testing.assert_close(getattr(in_place, name), getattr(copying, name), msg=name)
    assert copying.resampled.any()
    assert copies[1] == 6 * 8 * depth  # a copy per particle per step
    assert copies[0] < copies[1] / 2  # a copy per particle, plus one per survivor sharing a state


def test_a_deterministic_games_copies_share_the_rng_that_chance_games_copy():
    c4, pig = OpenSpielEnv("open_spiel:connect_four"), OpenSpielEnv("open_spiel:pig")
    for env, shared in ((c4, True), (pig, False)):
        state = env.reset_state(2, torch.Generator().manual_seed(0))
        row = env._row(env._ids(state)[0])
        copy = env._copy_row(row)
        assert (copy.rng is row.rng) is shared
        assert copy.rng.getstate() == row.rng.getstate()
