"""``check_bot_fits``: a bot is called once on a game's first positions at start-up and refused in one line."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pyspiel")

from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.envs.games.bots import ConnectFourHeuristic, RandomBot  # noqa: E402
from rl_lightning.envs.games.bots.probe import check_bot_fits  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402


class FirstCell:
    """Always plays action 0 (illegal once cell 0 is taken)."""

    def __call__(self, obs, action_mask, seat, generator):
        return torch.zeros(len(seat), dtype=torch.int64)


class Floats:
    def __call__(self, obs, action_mask, seat, generator):
        return action_mask.float().argmax(-1).float()


class OneAction:
    """Ignores the batch: one action for every row."""

    def __call__(self, obs, action_mask, seat, generator):
        return action_mask[0].float().argmax()



@pytest.mark.parametrize(("bot", "message"), [
    (ConnectFourHeuristic(), "seats[1]: the bot does not fit open_spiel:tic_tac_toe (ValueError: ConnectFourHeuristic "
                             "reads [3, 6, 7]"),
    (Floats(), "seats[1]: the bot returned torch.float32 (2,) on open_spiel:tic_tac_toe; a bot returns int64 actions"),
    (OneAction(), "seats[1]: the bot returned torch.int64 () on open_spiel:tic_tac_toe"),
])  # fmt: skip
def test_a_bot_that_does_not_fit_is_one_line(bot, message) -> None:
    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    with pytest.raises(ConfigError) as err:
        check_bot_fits(env, bot, "seats[1]")
    assert message in str(err.value)
    assert "\n" not in str(err.value)
    assert env.live_count == 0  # the probe's games are released


def test_illegal_first_moves_are_refused_and_fitting_bots_pass() -> None:
    class Occupied:  # plays the first illegal action of each row
        def __call__(self, obs, action_mask, seat, generator):
            return (~action_mask).float().argmax(-1)

    env = OpenSpielEnv("open_spiel:connect_four")
    check_bot_fits(env, ConnectFourHeuristic(), "seats[1]")
    check_bot_fits(env, RandomBot(), "seats[1]")
    check_bot_fits(env, FirstCell(), "seats[1]")  # column 0 is legal on an empty board
    hearts = OpenSpielEnv("open_spiel:hearts")
    with pytest.raises(ConfigError, match="the bot played illegal actions"):
        check_bot_fits(hearts, Occupied(), "seats[1]")
    assert env.live_count == hearts.live_count == 0
