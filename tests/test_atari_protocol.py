"""One Atari protocol on every backend: lives, FIRE, episode ends and whole-game scores, probed by their events.

The probe is Breakout with the NOOP action only: the ball moves only after FIRE, so a life can end only if the
backend pressed FIRE when it started. Under ``baselines`` training every backend must then show the same
sequence: each lost life ends an episode (``terminated``, not ``truncated``) while the game goes on, five
episodes per game (five lives), the fifth a game over (``game_over``), and each life short (FIRE was pressed).
EnvPool's same-step reset once restarted the game at every lost life (no game over, ever) and ale-py's vector env
once pressed FIRE only at the game start (the first life ended, no other one).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.data.collector import Collector
from rl_lightning.envs import BatchedEnv, CartPole
from rl_lightning.envs.gymnasium.atari import PRESETS
from tests.test_atari import BACKENDS, _frames, make, needs_ale

LIVES = 5  # Breakout
LIFE_STEPS = 150  # a NOOP life with the ball launched lasts 20-100 steps; without FIRE it never ends


def events(env, steps: int, action: int | None = 0, seed: int = 0) -> dict[str, np.ndarray]:
    """One env for ``steps`` steps (NOOP, or seeded random actions if ``action`` is None): its step outputs."""
    gen, actions = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)
    state = env.reset_state(1, gen)
    outs = []
    for _ in range(steps):
        act = torch.randint(0, env.spec.num_actions, (1,), generator=actions) if action is None else None
        act = torch.full((1,), action, dtype=torch.int64) if action is not None else act
        state, out = env.step_state(state, act, gen, inplace=True)
        outs.append(out)
    env.close()
    return {key: value[:, 0].numpy() for key, value in torch.stack(outs).to_dict().items() if key != keys.OBS}


def episode_ends(out: dict[str, np.ndarray]) -> np.ndarray:
    return np.flatnonzero(out[keys.TERMINATED] | out[keys.TRUNCATED])


@pytest.mark.parametrize(("backend", "kwargs"), BACKENDS)
def test_baselines_training_lives_fire_and_game_over_per_backend(backend: str, kwargs: dict) -> None:
    out = events(make(backend, "Breakout", "baselines", **kwargs), 400)
    ends = episode_ends(out)
    assert not out[keys.TRUNCATED].any()
    gaps = np.diff(np.concatenate([[-1], ends]))
    assert len(ends) >= LIVES, f"{backend}: {len(ends)} lives ended in 400 NOOP steps: FIRE not pressed at a new life"
    assert gaps.max() <= LIFE_STEPS, f"{backend}: a life lasted {gaps.max()} NOOP steps: FIRE not pressed"
    over = np.flatnonzero(out[keys.GAME_OVER])
    assert len(over) >= 1, f"{backend}: no game over in {len(ends)} lost lives: the game restarts at a lost life"
    assert set(over) <= set(ends)  # a game over ends an episode too
    # lives over time: every game is five episodes, the fifth a game over, none before it
    lives_lost = np.searchsorted(ends, over, side="right")  # episodes ended up to and including each game over
    assert np.array_equal(lives_lost, LIVES * np.arange(1, len(over) + 1)), f"{backend}: {lives_lost}"


@pytest.mark.parametrize(("backend", "kwargs"), BACKENDS)
def test_evaluation_form_episodes_are_whole_games(backend: str, kwargs: dict) -> None:
    """The evaluation copy: an episode is a game (ends only at game over), and its game score is its return."""
    env = make(backend, "Breakout", "baselines", **kwargs).fresh()
    out = events(env, 300, action=None)
    ends = episode_ends(out)
    assert len(ends) >= 1
    assert np.array_equal(out[keys.GAME_OVER], out[keys.TERMINATED] | out[keys.TRUNCATED])
    start = 0
    for end in ends:
        assert out[keys.GAME_SCORE][end] == pytest.approx(out[keys.REWARD][start : end + 1].sum())
        start = end + 1


@pytest.mark.parametrize(("backend", "kwargs"), BACKENDS)
def test_frame_limit_truncates_the_game_on_every_backend(monkeypatch, backend: str, kwargs: dict) -> None:
    """A 400-frame game (100 agent steps): the limit is ``truncated`` (not ``terminated``) and a game over; the next
    game starts with all its lives (five more episode ends before its own game over)."""
    monkeypatch.setitem(PRESETS, "baselines", dataclasses.replace(PRESETS["baselines"], max_episode_frames=400))
    out = events(make(backend, "Breakout", "baselines", **kwargs), 230)
    cut = np.flatnonzero(out[keys.TRUNCATED])
    assert len(cut) >= 1, backend
    assert not out[keys.TERMINATED][cut].any()
    assert out[keys.GAME_OVER][cut].all()
    over = np.flatnonzero(out[keys.GAME_OVER])
    assert set(cut) <= set(over)
    # 400 frames from the game start: 100 agent steps, less the frames of reset no-ops and FIRE that ALE counts too
    assert 75 <= cut[0] <= 100, f"{backend}: truncated at step {cut[0]}"


@pytest.mark.parametrize(("backend", "kwargs"), BACKENDS)
def test_game_score_is_the_raw_whole_game_score(backend: str, kwargs: dict) -> None:
    """SpaceInvaders pays 5-30 per kill: training rewards are clipped to 1 per life episode, while ``game_score``
    sums every life's raw reward."""
    out = events(make(backend, "SpaceInvaders", "baselines", **kwargs), 700, action=None)
    over = np.flatnonzero(out[keys.GAME_OVER])
    assert len(over) >= 1, backend
    end = over[0]
    clipped = out[keys.REWARD][: end + 1].sum()
    assert clipped > 0
    assert out[keys.GAME_SCORE][end] >= 5 * clipped  # every kill pays at least 5
    assert out[keys.GAME_SCORE][end] % 5 == 0
    assert (out[keys.GAME_SCORE][out[keys.GAME_OVER] == 0] == 0).all()


@needs_ale
def test_fresh_of_a_class_default_preset_is_the_evaluation_form() -> None:
    """``AleVectorEnv("Breakout")`` names no preset (the class default is ``baselines``): its evaluation copy is
    still the evaluation form (it once was the training form: life-loss episodes, clipped rewards)."""
    from rl_lightning.envs import AleVectorEnv

    env = AleVectorEnv("Breakout")
    assert not env.atari.evaluation
    evaluation = env.fresh()
    assert evaluation.atari.evaluation
    assert evaluation.atari.name == "baselines"
    out = events(evaluation, 150)
    assert len(episode_ends(out)) <= 1  # a whole game, not one episode per life


@needs_ale
def test_atari100k_is_dreamerv3s_protocol() -> None:
    """danijar/dreamerv3 ``atari100k``: no sticky actions, the minimal action set, up to 30 no-ops, 64x64 RGB, repeat
    4, lives unused, raw rewards; and configs/dreamer_atari.yaml uses it."""
    from rl_lightning.envs import GymnasiumEnv

    preset = PRESETS["atari100k"]
    assert (preset.sticky, preset.full_action_space, preset.noop_max) == (0.0, False, 30)
    assert (preset.obs_shape, preset.frame_skip, preset.life_loss, preset.clips) == ((3, 64, 64), 4, False, False)
    assert GymnasiumEnv("Breakout", atari_preset="atari100k").spec.num_actions == 4  # machado: all 18
    assert GymnasiumEnv("Breakout", atari_preset="machado").spec.num_actions == 18
    from tests.cli_subprocess import ROOT

    config = (ROOT / "configs" / "dreamer_atari.yaml").read_text()
    assert "atari_preset: atari100k" in config


def random_policy(num_actions: int):
    """A collector policy: uniform random actions from the collector's generator."""

    def act(obs: TensorDict, generator: torch.Generator) -> TensorDict:
        action = torch.randint(0, num_actions, obs.batch_size, generator=generator)
        return TensorDict({keys.ACTION: action}, batch_size=obs.batch_size)

    return act


@needs_ale
def test_collector_logs_the_game_score() -> None:
    """``rollout/game_score`` comes from the collector's episode stats: the mean raw score of the games that ended."""
    from rl_lightning.envs import AleVectorEnv

    collector = Collector(BatchedEnv(AleVectorEnv("SpaceInvaders"), 1, seed=0), seed=0)
    batch = collector.rollout(random_policy(6), 900, policy_version=0)
    stats = collector.episode_stats()
    assert batch[keys.REWARD].max() == 1.0  # clipped training rewards
    assert stats["game_score"] > 5 * stats["episode_return"]
    collector.rollout(random_policy(6), 1, policy_version=0)
    assert collector.episode_stats()["game_score"].isnan()  # no game ended since the last read
    collector.close()


@needs_ale
def test_sequence_collector_logs_the_game_score() -> None:
    """DreamerV3's collector (next-step autoreset on ale-py's vector env) reports the same whole-game raw scores as
    the env's own step outputs: the games that ended, each counted once (not again on the reset row after it)."""
    from rl_lightning.data.sequence_collector import SequenceCollector
    from rl_lightning.envs import AleVectorEnv

    collector = SequenceCollector(BatchedEnv(AleVectorEnv("SpaceInvaders"), 1, seed=0), seed=0)
    seen: list[TensorDict] = []
    step = collector.env.step
    collector.env.step = lambda action: seen.append(out := step(action)) or out  # record the env's own outputs
    batch = collector.rollout(random_policy(6), 1000, policy_version=0)
    over = torch.stack([out[keys.GAME_OVER] for out in seen])
    scores = torch.stack([out[keys.GAME_SCORE] for out in seen])[over]
    assert over.any()  # a game ended (random SpaceInvaders lasts ~500-900 agent steps)
    stats = collector.episode_stats()
    assert batch[keys.REWARD].max() == 1.0  # clipped training rewards
    assert stats["game_score"] == pytest.approx(scores.mean().item())
    assert stats["game_score"] > 5 * stats["episode_return"]
    collector.close()


def test_torch_envs_report_no_game_score() -> None:
    collector = Collector(BatchedEnv(CartPole(), 2), seed=0)
    collector.rollout(random_policy(2), 50, policy_version=0)
    assert set(collector.episode_stats()) == {"episode_return", "episode_length"}


@needs_ale
def test_ale_vector_frame_stacks_restart_after_a_truncation(monkeypatch) -> None:
    """A 40-frame game (10 agent steps), deterministic settings: after each truncation the new game's stack repeats
    its first frame on ale-py's vector env exactly as on the Gymnasium backend (ale-py pads it with black)."""
    preset = dataclasses.replace(PRESETS["baselines"], sticky=0.0, noop_max=0, fire_reset=False, max_episode_frames=40)
    monkeypatch.setitem(PRESETS, "baselines", preset)
    ref, out = (_frames(backend, {}, "baselines", steps=25) for backend in ("GymnasiumEnv", "AleVectorEnv"))
    assert ref["truncated"][:, 0].sum() == 2  # steps 10 and 20
    assert torch.equal(out["truncated"], ref["truncated"])
    assert torch.equal(out["obs"], ref["obs"])
    assert torch.equal(out["final_obs"], ref["final_obs"])
