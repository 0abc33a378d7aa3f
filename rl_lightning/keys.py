"""TensorDict key names shared by envs, collectors, replay and losses: one place, no typos."""

from __future__ import annotations

# Env outputs (docs/reference/envs.md).
OBS = "obs"  # observation the agent acts on (after an auto-reset: the new episode's first)
FINAL_OBS = "final_obs"  # true next observation of the step (before any auto-reset), for bootstrapping
REWARD = "reward"
TERMINATED = "terminated"  # episode ended in an absorbing state: bootstrap value is 0
TRUNCATED = "truncated"  # episode cut by a time limit: bootstrap from V(final_obs)
IS_FIRST = "is_first"  # OBS starts a new episode
ACTION_MASK = "action_mask"  # bool [..., n]; True = legal
SEAT = "seat"  # int64 [B]: the seat to act next in a multi-seat game (docs/guides/games.md)
#: float [B, S * D]: every seat's view of the state, the acting seat's first, then the others in turn order: what a
#: centralised critic reads in training (never the policy); emitted by game envs that offer it (``critic_obs``).
CRITIC_OBS = "critic_obs"
# bool [B, S], multi-seat games that can truncate: the seat was still in the game when it was cut (bootstrap from its
# final_obs); a seat eliminated earlier (terminated) reads False. Absent: every seat follows the game's truncated.
SEAT_TRUNCATED = "seat_truncated"
# Atari presets only (envs/gymnasium/atari.py): a whole game's raw score, below life-loss episodes and reward clipping.
GAME_OVER = "game_over"  # bool [B]: the game itself ended at this step (game over or frame limit, not a life loss)
GAME_SCORE = "game_score"  # float32 [B]: the raw score of the game that ended at this step (0 where none did)

# Policy outputs.
ACTION = "action"
LOGPROB = "logprob"
VALUE = "value"
# Recurrent policies (RecurrentPPO): the carried state a row was acted from (before its is_first reset), and after.
RECURRENT_STATE = "recurrent_state"
NEXT_RECURRENT_STATE = "next_recurrent_state"

# Lineage and learning targets.
POLICY_VERSION = "policy_version"
NEXT_VALUE = "next_value"  # V(final_obs) of each step
ADVANTAGE = "advantage"
RETURN = "return"
# PPO's minibatches when the encoder is a fixed decoding (``networks/encoders.py``, e.g. ``hearts``): each rollout row
# decoded once per update, the minibatches carry its features instead of ``obs``.
FEATURES = "features"

# SPO search outputs, stored per replay row (spo.md §1.4).
SAMPLED_ACTIONS = "sampled_actions"  # [N(, D)] the surviving particles' root actions: the target's support
SAMPLED_WEIGHTS = "sampled_weights"  # [N] their normalised weights softmax(w / η): the target q̂
SAMPLED_ADVANTAGES = "sampled_advantages"  # [N] per-particle search advantages (temperature dual)
SEARCH_VALUE = "search_value"  # V(s_0) at the root (diagnostic; no loss reads it)
