"""PPO's bootstrap wiring, env → collector → ``process_rollout`` → advantages, against a naive replay of the env.

A table env with known transitions and a table critic make every value exact. The states an episode ends in
have values unlike the start state's, so bootstrapping from the post-reset observation, treating a truncation
as a termination, or storing the reset observation as ``final_obs`` each change the advantages.
"""

from __future__ import annotations

import torch
from helpers import tiny_ppo, trainer
from tensordict import TensorDict
from torch import nn

from rl_lightning import keys
from rl_lightning.algos import PPO
from tests.spo_toys import TableEnv

NUM_ENVS, NUM_STEPS, MAX_STEPS, GAMMA, LAM = 4, 12, 3, 0.9, 0.8
# next[s, a]: from the start state 0, action 1 walks 0 → 1 → 3 → (truncated at step 3); action 0 can reach the
# terminal state 5. Values: V(start) = 0.5 differs from every state an episode can end in.
NEXT = torch.tensor([[2, 1], [5, 3], [4, 1], [5, 3], [5, 2], [5, 5]])
REWARD = torch.tensor([[1.0, -1.0], [2.0, 0.5], [-0.5, 1.5], [3.0, -2.0], [0.25, 1.0], [0.0, 0.0]])
VALUES = torch.tensor([0.5, -1.0, 2.0, 3.0, -2.0, 7.0])
TERMINAL = (5,)


def _table_critic() -> nn.Linear:
    """V(s) = VALUES[s] on one-hot observations."""
    critic = nn.Linear(len(VALUES), 1, bias=False)
    with torch.no_grad():
        critic.weight.copy_(VALUES.unsqueeze(0))
    return critic


def naive_advantages(states: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Replay each env from the table alone (no collector output): GAE with V(true successor) for truncation,
    0 for termination, λ-chain cut at both. Returns ``(advantage, terminated, truncated)``, each ``[T, B]``."""
    steps, envs = states.shape
    advantage = torch.zeros(steps, envs)
    terminated = torch.zeros(steps, envs, dtype=torch.bool)
    truncated = torch.zeros(steps, envs, dtype=torch.bool)
    for b in range(envs):
        deltas, dones, length = [], [], 0
        for t in range(steps):
            s, a = int(states[t, b]), int(actions[t, b])
            nxt = int(NEXT[s, a])
            length += 1
            term = nxt in TERMINAL
            trunc = length >= MAX_STEPS and not term
            boot = 0.0 if term else GAMMA * float(VALUES[nxt])
            deltas.append(float(REWARD[s, a]) + boot - float(VALUES[s]))
            dones.append(term or trunc)
            terminated[t, b], truncated[t, b] = term, trunc
            if term or trunc:
                length = 0
        running = 0.0
        for t in range(steps - 1, -1, -1):
            running = deltas[t] + (0.0 if dones[t] else GAMMA * LAM * running)
            advantage[t, b] = running
    return advantage, terminated, truncated


def test_advantages_bootstrap_truncation_from_the_true_final_state(tmp_path):
    env = TableEnv(NEXT, REWARD, terminal=TERMINAL, max_steps=MAX_STEPS)
    model, datamodule = tiny_ppo(
        env, num_envs=NUM_ENVS, num_steps=NUM_STEPS, total_env_steps=NUM_ENVS * NUM_STEPS, gamma=GAMMA, gae_lambda=LAM
    )
    model.critic = _table_critic()
    batches = []
    process = model.process_rollout

    def record(batch):
        batches.append(process(batch).clone())
        return batches[-1]

    model.process_rollout = record
    trainer(tmp_path).fit(model, datamodule)
    (batch,) = batches
    states = batch[keys.OBS].argmax(-1)
    expected, terminated, truncated = naive_advantages(states, batch[keys.ACTION])
    # The rollout must exercise what is being tested: both kinds of episode end, in the collector's own flags.
    assert torch.equal(batch[keys.TERMINATED], terminated)
    assert torch.equal(batch[keys.TRUNCATED], truncated)
    assert bool(terminated.any())
    assert bool(truncated.any())
    # After every episode end the next row starts again from state 0 (same-step auto-reset).
    ends = (terminated | truncated)[:-1]
    assert bool((states[1:][ends] == 0).all())
    torch.testing.assert_close(batch[keys.ADVANTAGE], expected)
    torch.testing.assert_close(batch[keys.RETURN], expected + VALUES[states])


def test_next_value_is_the_critic_on_final_obs_at_every_step_of_a_pixel_rollout():
    """``process_rollout`` reuses ``value[t + 1]`` inside episodes and runs the critic only at episode ends and the
    last tick; every row must still equal ``V(final_obs)`` computed the naive way (shared CNN, values from acting)."""
    from rl_lightning.data.collector import Collector
    from rl_lightning.envs import BatchedEnv, Catch

    torch.manual_seed(0)
    env = BatchedEnv(Catch(rows=4, columns=4, size=64), 3)
    model = PPO(env_spec=env.spec, encoder="nature", share_encoder=True, hidden_sizes=())
    with torch.no_grad():
        policy = model.acting_policy(env, deterministic=False, training=True)
        batch = model.process_rollout(Collector(env, seed=0).rollout(policy, 10, 0))
        naive = TensorDict({keys.OBS: batch[keys.FINAL_OBS]}, batch.batch_size)
        expected = model.critic(model._critic_features(naive)).squeeze(-1)
    ends = batch[keys.TERMINATED] | batch[keys.TRUNCATED]
    assert bool(ends[:-1].any())
    assert bool((~ends[:-1]).any())
    torch.testing.assert_close(batch[keys.NEXT_VALUE], expected, rtol=1e-5, atol=1e-6)
