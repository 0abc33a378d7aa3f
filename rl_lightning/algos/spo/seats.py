"""SPO in multi-seat games (docs/guides/games.md): where its search is sound, how it scores, and its per-seat critic.

Search is sound only where the searched state is what the searching seat may know: perfect-information games
with snapshots. Imperfect-information games (Hearts, poker) are refused (searching the true state would read
the hidden cards), and so are envs that cannot snapshot (PettingZoo). Scoring converts every value to the
searching seat's side, which needs two seats in a zero-sum game (the opponent's value is the negation), so
other multi-seat games are refused too.

Sign convention. The critic predicts the value of an observation for the seat that acts at it (the seat whose
view it is), as the per-seat credit trains it (``objectives/seat_credit.py``). A particle of searching seat
``s`` (the root's seat to act) is scored with ``s``'s reward ``reward[:, s]`` and the bootstrap

    V_s(obs') = +V(obs')  when ``s`` acts at obs',   −V(obs')  when the opponent does (zero-sum),
    V_s = V(final_obs[:, s]) on truncation (s's own view of the last state), 0 on termination,

so the TD increments telescope to ``Σ reward[:, s] + V_s(s_k) − V(s_0)`` as in the single-agent search. The
opponents' turns inside the search are proposed by the same prior (the network acting for the seat to move).

Replay: self-play rollouts arrive as ``[S + T, B]`` with ``S`` carried rows first (``SelfPlayCollector``);
SPO's replay keeps the ``T`` ticks only (``strip_carried``), each row a decision of its acting seat (pure
self-play: every seat learns). The critic's targets follow the per-seat credit rule on each replayed sequence:
``seat_credit`` + ``seat_gae`` with the target critic; a decision whose seat neither decides again nor sees its
game end within the sequence has no complete target there and is left out of that batch's critic loss.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.envs.base import EnvSpec
from rl_lightning.errors import ConfigError
from rl_lightning.objectives.seat_credit import seat_credit, seat_gae

#: Self-play bookkeeping that SPO's replay does not keep (every row is a learning decision in pure self-play).
_SELFPLAY_KEYS = ("learner", "carried", "player")


def check_searchable(spec: EnvSpec) -> None:
    """Refuse, in one line, a game whose true state a search may not read (imperfect information)."""
    if spec.num_seats > 1 and not spec.perfect_information:
        raise ConfigError(
            f"data.env={spec.name!r} is an imperfect-information game: SPO's search would step the true state and "
            "read the other seats' hidden cards; train it with PPO self-play (rl_lightning.algos.PPO)"
        )


def check_search_game(env: Any) -> None:
    """Refuse a multi-seat env whose particles cannot be scored from one seat's side (two seats, zero-sum)."""
    spec = env.spec
    if spec.num_seats == 1:
        return
    if spec.num_seats != 2 or not is_zero_sum(env):
        raise ConfigError(
            f"data.env={spec.name!r}: SPO scores search particles from the searching seat's side, which needs a "
            f"two-seat zero-sum game (the opponent's value is the negation); this one has {spec.num_seats} seats"
            f"{'' if is_zero_sum(env) else ' and is not zero-sum'}; train it with PPO self-play"
        )


def is_zero_sum(env: Any) -> bool:
    """An env's ``zero_sum`` attribute, else an OpenSpiel game's declared utility, else False."""
    if hasattr(env, "zero_sum"):
        return bool(env.zero_sum)
    game = getattr(env, "game", None)
    if game is not None and hasattr(game, "get_type"):
        import pyspiel

        return game.get_type().utility == pyspiel.GameType.Utility.ZERO_SUM
    return False


def searching_seats(root_obs: TensorDict, num_particles: int) -> torch.Tensor:
    """The root's seat to act, per particle ``[E·N]`` (env ``e`` owns rows ``e·N … e·N + N − 1``)."""
    return root_obs[keys.SEAT].repeat_interleave(num_particles)


def seat_step_score(
    value_fn: Any, out: TensorDict, searcher: torch.Tensor, gamma: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """One search step scored from each particle's searching seat: ``(reward [E·N], discounted bootstrap [E·N])``.

    Args:
        value_fn: the critic on raw observations (``ActorCriticPrior.value``).
        out: the step's outputs (``reward`` ``[E·N, 2]``, ``seat``, ``obs``; ``final_obs`` ``[E·N, 2, ...]`` when
            the env can truncate).
        searcher: the searching seat of each particle.
        gamma: the search discount.
    """
    reward = out[keys.REWARD].gather(-1, searcher.unsqueeze(-1)).squeeze(-1)
    sign = torch.where(out[keys.SEAT] == searcher, 1.0, -1.0)
    value = sign * value_fn(out[keys.OBS])
    final = out.get(keys.FINAL_OBS, None)
    if final is not None:  # truncation: the searching seat's own view of the last state
        own = final[torch.arange(searcher.shape[0], device=searcher.device), searcher]
        value = torch.where(out[keys.TRUNCATED], value_fn(own), value)
    return reward, (~out[keys.TERMINATED]) * gamma * value


def strip_carried(batch: TensorDict, num_seats: int) -> TensorDict:
    """The ``T`` ticks of a ``[S + T, B]`` self-play rollout, without the carried rows and the seat-map flags."""
    ticks = batch[num_seats:]
    return ticks.exclude(*_SELFPLAY_KEYS)


def seat_value_targets(
    target_value: torch.Tensor, final_value: torch.Tensor | None, seq: TensorDict, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The critic's targets on ``[L, B]`` replayed sequences under the per-seat credit rule, and which rows have one.

    Returns ``(targets, weight)``, both ``[L, B]``: GAE(λ) returns along each seat's own decisions
    (``seat_credit`` + ``seat_gae`` with the target critic's values), and 1.0 where the decision's credit is
    complete within the sequence (0.0 for a decision whose seat neither decides again nor sees its game end).

    Args:
        target_value: the target critic's ``V(obs)`` ``[L, B]`` (the acting seat's value of its own view).
        final_value: the target critic's value of each seat's own final view ``[L, B, S]`` (``None``: no truncation).
        seq: the sequences (``seat``, ``reward`` ``[L, B, S]``, ``terminated``, ``truncated``).
        gamma: discount per decision of the seat.
        lam: GAE λ along the seat's own decisions.
    """
    credit = seat_credit(
        seq[keys.SEAT], seq[keys.REWARD], seq[keys.TERMINATED], seq[keys.TRUNCATED], target_value, final_value
    )
    _, targets = seat_gae(credit, target_value, gamma, lam)
    return targets, (~credit.open).to(target_value.dtype)


def seat_critic_terms(
    value: torch.Tensor,
    target_value: torch.Tensor,
    final_value: torch.Tensor | None,
    seq: TensorDict,
    gamma: float,
    lam: float,
    vf_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Critic loss ``vf_coef · mean ½ (V − y)²`` over the rows with a complete target, and explained variance.

    ``value`` is the online critic's ``V(obs)`` ``[L, B]`` (with gradient); the rest as ``seat_value_targets``.
    """
    with torch.no_grad():
        targets, weight = seat_value_targets(target_value, final_value, seq, gamma, lam)
        count = weight.sum().clamp_min(1.0)
    loss = vf_coef * (0.5 * (value - targets).pow(2) * weight).sum() / count

    def variance(x: torch.Tensor) -> torch.Tensor:
        mean = (x * weight).sum() / count
        return ((x - mean).pow(2) * weight).sum() / count

    return loss, 1.0 - variance(value.detach() - targets) / variance(targets).clamp_min(1e-8)
