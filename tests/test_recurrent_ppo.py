"""RecurrentPPO: the update replays exactly what acting computed, truncation bootstraps with the state that saw
``final_obs``, and bad configs are refused in one line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tensordict import TensorDict

from rl_lightning import keys
from rl_lightning.algos import RecurrentPPO
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.data.collector import Collector
from rl_lightning.envs import CartPole, ClassSpec, GymnasiumEnv, TicTacToe
from rl_lightning.envs.base import BatchedEnv
from rl_lightning.errors import ConfigError
from tests.helpers import trainer


def _module(env: CartPole, **kwargs) -> RecurrentPPO:
    torch.manual_seed(0)
    settings = {"core": "lstm", "core_size": 8, "hidden_sizes": (8,), "update_epochs": 1, "num_minibatches": 2}
    return RecurrentPPO(env_spec=env.spec, **{**settings, **kwargs})


def _rollouts(module: RecurrentPPO, env: CartPole, count: int = 2, num_envs: int = 4, steps: int = 12) -> TensorDict:
    """The ``count``-th rollout of a collector (earlier ones leave a non-zero carried state at its start)."""
    collector = Collector(BatchedEnv(env, num_envs, torch.device("cpu"), seed=3), seed=5)
    policy = module.acting_policy(collector.env, deterministic=False, training=True)
    for _ in range(count):
        batch = collector.rollout(policy, steps, module.policy_version)
    return module.process_rollout(batch)


def _naive_cell(rnn: torch.nn.LSTM, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
    """An LSTM step written out from its equations (PyTorch's gate order i, f, g, o)."""
    gates = x @ rnn.weight_ih_l0.T + rnn.bias_ih_l0 + h @ rnn.weight_hh_l0.T + rnn.bias_hh_l0
    i, f, g, o = gates.chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


@torch.no_grad()
def _naive_replay(module: RecurrentPPO, batch: TensorDict) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability and value of every row, one env and one step at a time from each env's stored state at the
    rollout's start, zeroing the state where ``is_first``."""
    steps, num_envs = batch.batch_size
    logprob, value = torch.zeros(steps, num_envs), torch.zeros(steps, num_envs)
    actor_cell, critic_cell = module.cores.actor_core.rnn, module.cores.critic_core.rnn
    for b in range(num_envs):
        start = batch[keys.RECURRENT_STATE][0, b]
        h, c, ch, cc = start["h"], start["c"], start["critic_h"], start["critic_c"]
        for t in range(steps):
            if batch[keys.IS_FIRST][t, b]:
                h, c, ch, cc = (torch.zeros_like(h) for _ in range(4))
            x = batch[keys.OBS][t, b]
            h, c = _naive_cell(actor_cell, x, h, c)
            ch, cc = _naive_cell(critic_cell, x, ch, cc)
            logits = module.actor(h)
            logprob[t, b] = F.log_softmax(logits, -1)[batch[keys.ACTION][t, b]]
            value[t, b] = module.critic(ch).squeeze(-1)
    return logprob, value


def test_update_replays_each_env_sequence_as_a_naive_step_by_step_loop():
    env = CartPole(observe="position", max_episode_steps=7)  # episodes end (truncation, termination) in the rollout
    module = _module(env, shared_core=False)
    batch = _rollouts(module, env)
    assert batch[keys.IS_FIRST][1:].any()  # resets inside the rollout
    assert batch[keys.RECURRENT_STATE][0]["h"].abs().sum() > 0  # a carried, non-zero state at the rollout's start
    logprob, value = _naive_replay(module, batch)
    torch.testing.assert_close(batch[keys.LOGPROB], logprob)  # acting == the naive loop
    torch.testing.assert_close(batch[keys.VALUE], value)
    seen = []
    evaluate = module._evaluate_minibatch

    def recording(mb):
        out = evaluate(mb)
        seen.append((mb, [o.detach() for o in out]))
        return out

    module._evaluate_minibatch = recording
    module.update(batch, torch.optim.SGD(module.parameters(), lr=0.0))  # lr 0: every minibatch sees these weights
    assert len(seen) == 2  # two groups of two envs' whole sequences
    for mb, (mb_logprob, _, mb_value) in seen:
        assert mb[keys.OBS].shape == (12, 2, 2)
        torch.testing.assert_close(mb_logprob, mb[keys.LOGPROB])  # the update == acting == the naive loop
        torch.testing.assert_close(mb_value, mb[keys.VALUE])


def test_gru_with_a_shared_core_replays_what_it_acted():
    env = CartPole(observe="position", max_episode_steps=5)
    module = _module(env, core="gru", shared_core=True)
    batch = _rollouts(module, env)
    assert set(batch[keys.RECURRENT_STATE].keys()) == {"h"}
    out = module.sequence_log_prob_entropy_value(
        batch[keys.OBS], batch[keys.IS_FIRST], batch[keys.RECURRENT_STATE][0], batch[keys.ACTION].flatten()
    )
    torch.testing.assert_close(out[0].reshape(12, 4), batch[keys.LOGPROB])
    torch.testing.assert_close(out[2].reshape(12, 4), batch[keys.VALUE])


@torch.no_grad()
def test_truncation_bootstraps_with_the_state_that_saw_final_obs():
    env = CartPole(observe="position", max_episode_steps=4)
    module = _module(env, shared_core=False)
    batch = _rollouts(module, env)
    truncated = batch[keys.TRUNCATED] & ~batch[keys.TERMINATED]
    assert truncated.any()
    critic_cell = module.cores.critic_core.rnn
    for t, b in truncated.nonzero().tolist():
        state = batch[keys.NEXT_RECURRENT_STATE][t, b]
        x = batch[keys.FINAL_OBS][t, b]
        h, _ = _naive_cell(critic_cell, x, state["critic_h"], state["critic_c"])
        expected = module.critic(h).squeeze(-1)
        h0, _ = _naive_cell(critic_cell, x, torch.zeros_like(h), torch.zeros_like(h))
        reset = module.critic(h0).squeeze(-1)
        assert not torch.allclose(expected, reset)  # the test can tell the two states apart
        torch.testing.assert_close(batch[keys.NEXT_VALUE][t, b], expected)


def _replayed_logprob(module: RecurrentPPO, batch: TensorDict) -> torch.Tensor:
    mask = batch.get(keys.ACTION_MASK, None)
    logprob, _, _ = module.sequence_log_prob_entropy_value(
        module._obs(batch),
        batch[keys.IS_FIRST],
        batch[keys.RECURRENT_STATE][0],
        batch[keys.ACTION].flatten(0, 1),
        None if mask is None else mask.flatten(0, 1),
    )
    return logprob.reshape(batch.batch_size)


def test_action_masks_act_and_replay_alike():
    env = TicTacToe()  # masked actions; games end inside the rollout
    module = _module(env, normalize_obs=True)
    batch = _rollouts(module, env, steps=6)
    assert batch[keys.ACTION_MASK].gather(-1, batch[keys.ACTION].unsqueeze(-1)).all()
    assert batch[keys.IS_FIRST][1:].any()
    torch.testing.assert_close(_replayed_logprob(module, batch), batch[keys.LOGPROB])


def test_dict_observations_act_and_replay_alike():
    env = GymnasiumEnv(env_class=ClassSpec("tests.space_envs.TwoKeyDict", {}))
    assert env.spec.obs_keys
    module = _module(env, normalize_obs=True)
    batch = _rollouts(module, env, steps=6)
    assert isinstance(batch[keys.OBS], TensorDict)
    torch.testing.assert_close(_replayed_logprob(module, batch), batch[keys.LOGPROB])
    env.close()


@pytest.mark.parametrize(
    ("model", "data", "match"),
    [
        ({"core": "rnn"}, {}, r"model.recurrent.core='rnn' is not one of \['lstm', 'gru'\]"),
        ({"num_minibatches": 3}, {}, "model.num_minibatches=3 does not divide data.num_envs=4"),
        ({}, {"compile": True}, "data.compile=true .* does not support RecurrentPPO"),
        ({"compile_update": True}, {}, "model.compile_update=true is not supported by RecurrentPPO"),
        ({"init_weights": "bc.ckpt"}, {}, "model.init_weights is not supported by RecurrentPPO"),
    ],
)
def test_unsupported_settings_are_refused_in_one_line(tmp_path, model, data, match):
    datamodule = OnPolicyDataModule(CartPole(), num_envs=4, num_steps=8, total_env_steps=64, **data)

    def fit() -> None:
        module = RecurrentPPO(env_spec=datamodule.env_spec, core_size=8, **model)
        trainer(tmp_path, max_steps=1).fit(module, datamodule)

    with pytest.raises(ConfigError, match=match) as raised:
        fit()
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "checkpoints").exists()


def test_cartpole_observe_position_keeps_x_and_theta_of_the_same_dynamics():
    full = BatchedEnv(CartPole(), 4, torch.device("cpu"), seed=2)
    masked = BatchedEnv(CartPole(observe="position"), 4, torch.device("cpu"), seed=2)
    assert masked.env.spec.obs_shape == (2,)
    a, b = full.reset(), masked.reset()
    torch.testing.assert_close(b[keys.OBS], a[keys.OBS][:, [0, 2]])
    for step in range(40):
        action = torch.tensor([step % 2, 1, 0, (step // 3) % 2])
        a, b = full.step(action), masked.step(action)
        for key in (keys.OBS, keys.FINAL_OBS):
            torch.testing.assert_close(b[key], a[key][:, [0, 2]])
        assert torch.equal(a[keys.TERMINATED], b[keys.TERMINATED])
    with pytest.raises(ConfigError, match=r"observe='velocity' is not one of \['full', 'position'\]"):
        CartPole(observe="velocity")
