"""Copies of OpenSpiel rows in deterministic games that pay during play (cliff_walking, deep_sea).

Such a row remembers the ``returns()`` it has already credited, so a copy must carry that running total: a copy
that starts it at zero pays the whole game so far on its next move (issue 56, bug 7). Each copy is checked move by
move against pyspiel itself (a ``state.clone()`` taken at the same point, whose ``rewards()`` is what one move pays
in a game without chance nodes) and against the live row it was copied from.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("pyspiel")

from rl_lightning import keys  # noqa: E402
from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402

#: Deterministic OpenSpiel games whose reward model pays during play and that provide a tensor to observe.
DENSE_DETERMINISTIC = ["cliff_walking", "deep_sea"]
ROWS = 16


def random_actions(out: dict, generator: torch.Generator) -> torch.Tensor:
    mask = out[keys.ACTION_MASK]
    return torch.where(mask, torch.rand(mask.shape, generator=generator), -1.0).argmax(-1)


def played_rows(env_id: str, moves: int) -> tuple[OpenSpielEnv, torch.Tensor, dict, torch.Generator]:
    """``ROWS`` games of ``env_id`` after ``moves`` random moves each (deep_sea's 5-move games restarted once)."""
    core = OpenSpielEnv(env_id)
    generator = torch.Generator().manual_seed(0)
    state = core.reset_state(ROWS, generator)
    out = core.observe(state)
    for _ in range(moves):
        state, out = core.step_state(state, random_actions(out, generator), generator, inplace=True)
    return core, state, out, generator


def engine_rewards(engines: list, action: torch.Tensor) -> torch.Tensor:
    """What pyspiel pays for each row's move (``rewards()``: no chance node follows a move in these games);
    a finished game restarts, as the env's rows do."""
    paid = []
    for index, act in enumerate(action.tolist()):
        engines[index].apply_action(int(act))
        paid.append(engines[index].rewards())
        if engines[index].is_terminal():
            engines[index] = engines[index].get_game().new_initial_state()
    return torch.tensor(paid, dtype=torch.float32)


@pytest.mark.parametrize("env_id", DENSE_DETERMINISTIC)
def test_a_snapshot_pays_and_shows_what_the_live_row_and_the_engine_do(env_id: str) -> None:
    core, state, out, generator = played_rows(env_id, moves=7)
    snap = core.snapshot(state)
    engines = [core.engine_state(state, index).clone() for index in range(ROWS)]
    out_snap = core.observe(snap)
    draws = torch.Generator().manual_seed(1)
    paying = 0
    for _ in range(30):
        action = random_actions(out, draws)
        expected = engine_rewards(engines, action)
        state, out = core.step_state(state, action, generator, inplace=True)
        snap, out_snap = core.step_state(snap, action, generator, inplace=True)
        torch.testing.assert_close(out_snap[keys.REWARD], expected)
        for key in out.keys():  # noqa: SIM118 - iterating a TensorDict yields rows
            torch.testing.assert_close(out_snap[key], out[key], msg=lambda m, k=key: f"{k}: {m}")
        paying += int((expected != 0).any(-1).sum())
    assert paying > ROWS  # the moves paid: the comparison is not between zeros
    core.close()


@pytest.mark.parametrize("env_id", DENSE_DETERMINISTIC)
def test_stepping_into_new_rows_pays_what_the_engine_pays(env_id: str) -> None:
    """``step_state(inplace=False)`` (how a search expands its tree) copies each row before moving it."""
    core, state, out, generator = played_rows(env_id, moves=7)
    engines = [core.engine_state(state, index).clone() for index in range(ROWS)]
    draws = torch.Generator().manual_seed(2)
    for _ in range(10):
        action = random_actions(out, draws)
        expected = engine_rewards(engines, action)
        state, out = core.step_state(state, action, generator, inplace=False)
        torch.testing.assert_close(out[keys.REWARD], expected)
    core.close()
