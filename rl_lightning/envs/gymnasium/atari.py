"""The two Atari protocols as named presets, and the ALE package imported on demand.

A preset fixes everything that makes Atari scores comparable; the env id only names the game. Both presets give
``uint8`` observations, channels first, on every backend (Gymnasium's ``AtariPreprocessing`` +
``FrameStackObservation`` on ``GymnasiumEnv``/``GymnasiumVectorEnv``, ale-py's ``AtariVectorEnv``, EnvPool).

``baselines`` (the openai/baselines stack whose numbers CleanRL and SB3 report):
    ALE ``{Game}NoFrameskip-v4``; frame skip 4, max-pool of the last two frames; sticky actions 0.0; minimal
    action set; up to 30 no-op actions at reset; FIRE pressed at reset in games that have it; training: a life
    loss ends the episode (``terminated``) but the game goes on, rewards clipped to their sign; 84x84 grayscale,
    stack of the last 4 frames: ``(4, 84, 84)``; 108,000 frames (27,000 agent steps) per game at most.
``machado`` (Machado et al. 2018, ALE v5):
    ALE ``ALE/{Game}-v5``; frame skip 4, max-pool of the last two frames; sticky actions 0.25; full 18-action
    set; no no-ops, no FIRE at reset; no life signal (episodes end at game over); rewards not clipped; 64x64
    RGB, no stack: ``(3, 64, 64)``; 108,000 frames per game at most.
``atari100k`` (danijar/dreamerv3's ``atari100k`` settings, the DreamerV3 paper's Atari 100k):
    as ``machado`` but no sticky actions, the minimal action set and up to 30 no-op actions at reset
    (``sticky: False, actions: needed, noops: 30``; ``repeat: 4``, ``size: [64, 64]``, RGB, ``lives: unused``).

A life loss under ``baselines`` (training) behaves the same on every backend: the step is ``terminated``, the game
goes on, and the next life starts with FIRE pressed in games that have it (openai/baselines' ``EpisodicLifeEnv``
under ``FireResetEnv``); only a game over or the frame limit starts a new game. Every backend also reports each
finished game's raw score (all lives, unclipped) as the step outputs ``game_score`` / ``game_over``
(``keys.GAME_SCORE``, ``keys.GAME_OVER``), which collectors log as ``rollout/game_score``.

Evaluation always plays whole games for the raw score: the evaluation copy of an env (``TorchEnv.fresh``, which
the Evaluation callback builds) turns off life-loss episodes and reward clipping; nothing else changes.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from dataclasses import dataclass

from rl_lightning.errors import ConfigError

#: The line every "ale-py is missing" error ends with.
ATARI_EXTRA = 'pip install -e ".[atari]"'

# ``ALE/Breakout-v5``, ``BreakoutNoFrameskip-v4``, ``Breakout-v4``, ``BreakoutDeterministic-v4``, ``Breakout-ram-v4``
_ALE_ID = re.compile(r"^(?:ALE/)?(?P<game>[A-Z][A-Za-z0-9]*?)(?:-ram)?(?:NoFrameskip|Deterministic)?-v(?P<v>[045])$")


@dataclass(frozen=True)
class AtariPreset:
    """One Atari protocol (see the module doc); ``evaluation`` turns off life-loss episodes and reward clipping."""

    name: str
    v5: bool  # ALE/{Game}-v5 (else {Game}NoFrameskip-v4)
    frame_skip: int
    sticky: float
    full_action_space: bool
    noop_max: int
    fire_reset: bool
    episodic_life: bool
    clip_reward: bool
    size: int
    grayscale: bool
    stack: int
    max_episode_frames: int = 108_000
    evaluation: bool = False

    @property
    def life_loss(self) -> bool:
        """Whether a life loss ends the episode here (training with ``episodic_life`` only)."""
        return self.episodic_life and not self.evaluation

    @property
    def clips(self) -> bool:
        """Whether rewards are clipped to their sign here (training with ``clip_reward`` only)."""
        return self.clip_reward and not self.evaluation

    @property
    def obs_shape(self) -> tuple[int, int, int]:
        """The observation shape on every backend: ``(stack, H, W)`` gray or ``(3 * stack, H, W)`` RGB."""
        return (self.stack if self.grayscale else 3 * self.stack, self.size, self.size)

    def for_evaluation(self) -> AtariPreset:
        """This preset for evaluation: whole games, raw scores."""
        return dataclasses.replace(self, evaluation=True)

    def gym_id(self, game: str) -> str:
        """The Gymnasium id of ``game`` under this preset."""
        return f"ALE/{game}-v5" if self.v5 else f"{game}NoFrameskip-v4"

    def gym_kwargs(self) -> dict:
        """``gymnasium.make`` arguments: one frame per step (``AtariPreprocessing`` skips and max-pools)."""
        return {"frameskip": 1, "repeat_action_probability": self.sticky, "full_action_space": self.full_action_space,
                "max_num_frames_per_episode": self.max_episode_frames}  # fmt: skip

    def envpool_kwargs(self) -> dict:
        """``envpool.make`` options of an EnvPool Atari task (``{Game}-v5``, baselines-style by default).

        EnvPool draws its no-op count from ``[0, noop_max - 1]``: ``noop_max=1`` is no no-ops (0 crashes it).
        """
        return {"episodic_life": self.life_loss, "reward_clip": self.clips, "repeat_action_probability": self.sticky,
                "full_action_space": self.full_action_space, "noop_max": max(self.noop_max, 1),
                "use_fire_reset": self.fire_reset, "frame_skip": self.frame_skip, "img_height": self.size,
                "img_width": self.size, "gray_scale": self.grayscale, "stack_num": self.stack,
                "max_episode_steps": self.max_episode_frames // self.frame_skip}  # fmt: skip

    def ale_vector_kwargs(self) -> dict:
        """``ale_py.vector_env.AtariVectorEnv`` options; its ``episodic_life`` restarts the game after a life loss,
        so the baselines life loss is its ``life_loss_info`` (terminated, the game goes on; ``AleVectorEnv`` presses
        FIRE for the next life). Rewards come raw: the adapter keeps the game score and clips them itself."""
        return {"frameskip": self.frame_skip, "maxpool": True, "repeat_action_probability": self.sticky,
                "full_action_space": self.full_action_space, "noop_max": self.noop_max,
                "use_fire_reset": self.fire_reset, "episodic_life": False, "life_loss_info": self.life_loss,
                "reward_clipping": False, "img_height": self.size, "img_width": self.size,
                "grayscale": self.grayscale, "stack_num": self.stack,
                "max_num_frames_per_episode": self.max_episode_frames}  # fmt: skip


PRESETS = {
    "baselines": AtariPreset(
        "baselines", v5=False, frame_skip=4, sticky=0.0, full_action_space=False, noop_max=30, fire_reset=True,
        episodic_life=True, clip_reward=True, size=84, grayscale=True, stack=4,
    ),
    "machado": AtariPreset(
        "machado", v5=True, frame_skip=4, sticky=0.25, full_action_space=True, noop_max=0, fire_reset=False,
        episodic_life=False, clip_reward=False, size=64, grayscale=False, stack=1,
    ),
    "atari100k": AtariPreset(
        "atari100k", v5=True, frame_skip=4, sticky=0.0, full_action_space=False, noop_max=30, fire_reset=False,
        episodic_life=False, clip_reward=False, size=64, grayscale=False, stack=1,
    ),
}  # fmt: skip


def named_preset(name: str | None, evaluation: bool = False, field: str = "atari_preset") -> AtariPreset | None:
    """The preset called ``name`` (``None``: none), for evaluation if asked; an unknown name is one line."""
    if name is None:
        return None
    if name not in PRESETS:
        raise ConfigError(f"{field}={name!r} is not an Atari preset; choose one of {sorted(PRESETS)}")
    preset = PRESETS[name]
    return preset.for_evaluation() if evaluation else preset


def looks_like_ale(env_id: str) -> bool:
    """Whether ``env_id`` can only be an ALE id (``ALE/...``, ``...NoFrameskip-v4``, ``...Deterministic-v4``)."""
    return env_id.startswith("ALE/") or re.search(r"(NoFrameskip|Deterministic)-v[04]$", env_id) is not None


def import_ale(field: str) -> None:
    """Import ``ale_py`` (it registers the ALE ids with Gymnasium); missing, it is one line naming the extra."""
    try:
        importlib.import_module("ale_py")
    except ImportError as err:
        raise ConfigError(f"{field} needs the ale-py package ({err}); install the extra: {ATARI_EXTRA}") from None


def game_name(env_id: str, preset: AtariPreset, backend_id: str, field: str = "env_id") -> str:
    """The game (``"Breakout"``) that ``env_id`` names: the bare game or the id ``backend_id`` gives under the preset.

    An id of another protocol (``ALE/Breakout-v5`` under ``baselines``) is refused rather than quietly changed.
    """
    match = _ALE_ID.match(env_id)
    game = env_id if re.fullmatch(r"[A-Z][A-Za-z0-9]*", env_id) else match and match["game"]
    if not game or (env_id != game and env_id != backend_id.format(game=game)):
        want = backend_id.format(game=game or "Breakout")
        raise ConfigError(
            f"{field}={env_id!r} with atari_preset={preset.name!r}: name the game ('{game or 'Breakout'}') or its "
            f"id under this preset ({want!r}); the preset fixes the ALE version and settings"
        )
    return game


def snake_case(game: str) -> str:
    """ale-py's ROM name of a game: ``"SpaceInvaders"`` -> ``"space_invaders"``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()
