"""``model.policy_table_rows``: a learned logit correction per distinct observation on top of PPO's actor
(``networks/observation_table.py``). Its output and gradient against the plain network, the rows of Leduc's
information states, a self-play fit that trains and checkpoints it, and the one-line refusals."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.algos import PPO, RecurrentPPO
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.envs import CartPole, Pendulum
from rl_lightning.errors import ConfigError
from rl_lightning.networks.mlp import mlp
from rl_lightning.networks.observation_table import TableCorrected


def _corrected(rows: int = 64) -> tuple[torch.nn.Sequential, TableCorrected]:
    torch.manual_seed(0)
    network = mlp(5, 3, (8,), float32=True)
    return network, TableCorrected(network, 5, 3, rows)


def test_starts_as_the_plain_network_and_adds_each_observations_row() -> None:
    network, corrected = _corrected()
    x = torch.tensor([[0.0, 1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0, 1.0]])
    torch.testing.assert_close(corrected(x), network(x))
    rows = corrected.row(x)
    assert rows[0] == rows[2]
    assert rows[0] != rows[1]
    with torch.no_grad():
        corrected.table.copy_(torch.arange(corrected.table.numel(), dtype=torch.float32).view_as(corrected.table))
    torch.testing.assert_close(corrected(x), network(x) + corrected.table[rows])
    assert corrected[-1] is network[-1]  # indexable as the network was (the head's dtype is read there)


def test_a_gradient_moves_only_the_rows_of_the_batch() -> None:
    _, corrected = _corrected()
    x = torch.tensor([[0.0, 1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0, 1.0]])
    corrected(x).square().sum().backward()
    touched = corrected.table.grad.abs().sum(-1) > 0
    assert set(touched.nonzero().flatten().tolist()) == set(corrected.row(x).tolist())


def test_leducs_information_states_get_their_own_rows() -> None:
    pyspiel = pytest.importorskip("pyspiel")
    game = pyspiel.load_game("leduc_poker")
    tensors: dict[str, list[float]] = {}

    def walk(state) -> None:
        if state.is_terminal():
            return
        if state.is_chance_node():
            for action, _ in state.chance_outcomes():
                walk(state.child(action))
            return
        player = state.current_player()
        tensors[state.information_state_string(player)] = state.information_state_tensor(player)
        for action in state.legal_actions():
            walk(state.child(action))

    walk(game.new_initial_state())
    x = torch.tensor(list(tensors.values()))
    assert len(x) == 936
    assert len({tuple(t) for t in x.tolist()}) == 936

    def rows_of(x: torch.Tensor) -> torch.Tensor:  # a fresh instance each time: a resumed or actor-process copy
        return TableCorrected(mlp(x.shape[1], 3, (8,)), x.shape[1], 3, 65536).row(x)

    rows = rows_of(x)
    shared = len(x) - len(set(rows.tolist()))
    assert shared <= 20  # 14 with this hash (~7 pairs expected); a hash that ignored the multipliers shares hundreds
    assert torch.equal(rows_of(x), rows)


def test_a_self_play_fit_trains_the_rows_and_a_checkpoint_restores_them(tmp_path) -> None:
    pytest.importorskip("pyspiel")
    from helpers import trainer

    from rl_lightning.envs.games import OpenSpielEnv
    from rl_lightning.games.exploitability import InfoStateTable

    env = OpenSpielEnv("open_spiel:kuhn_poker")
    datamodule = OnPolicyDataModule(env, num_envs=8, num_steps=8, total_env_steps=256, seats={0: "self", 1: "self"})
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=2, policy_table_rows=256)
    trainer(tmp_path).fit(module, datamodule)
    assert isinstance(module.actor, TableCorrected)
    assert (module.actor.table.abs().sum(-1) > 0).sum() >= 6  # Kuhn's 12 information states; most are reached
    fresh = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=2, policy_table_rows=256)
    fresh.load_state_dict(module.state_dict())
    table = InfoStateTable(env)
    assert table.evaluate(fresh) == pytest.approx(table.evaluate(module))
    plain = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=2)
    plain.load_state_dict({k: v for k, v in module.state_dict().items() if "table" not in k and "row_" not in k})
    assert table.evaluate(plain) != pytest.approx(table.evaluate(module))  # the rows are part of the policy played


def test_the_table_learns_at_its_own_multiple_of_the_scheduled_lr(tmp_path) -> None:
    from helpers import tiny_ppo, trainer

    module, datamodule = tiny_ppo(total_env_steps=256, policy_table_rows=64, policy_table_lr_scale=10.0,
                                  lr=1e-3, anneal_lr=True)  # fmt: skip
    assert module.configure_optimizers().param_groups[1]["lr"] == pytest.approx(1e-2)
    trainer(tmp_path).fit(module, datamodule)
    rest, table = module.optimizers().param_groups
    assert table["params"] == [module.actor.table]
    assert 0.0 < rest["lr"] < 1e-3  # annealed on the way
    assert table["lr"] == pytest.approx(10.0 * rest["lr"])


def test_a_value_table_corrects_the_critic_at_its_own_lr(tmp_path) -> None:
    pytest.importorskip("pyspiel")
    from helpers import trainer

    from rl_lightning.envs.games import OpenSpielEnv

    env = OpenSpielEnv("open_spiel:kuhn_poker")
    datamodule = OnPolicyDataModule(env, num_envs=8, num_steps=8, total_env_steps=256, seats={0: "self", 1: "self"})
    module = PPO(env_spec=env.spec, hidden_sizes=(8,), update_epochs=1, num_minibatches=2, policy_table_rows=256,
                 policy_table_lr_scale=3.0, value_table_rows=128, value_table_lr_scale=20.0, lr=1e-3)  # fmt: skip
    assert isinstance(module.critic, TableCorrected)
    assert module.critic.table.shape == (128, 1)
    groups = module.configure_optimizers().param_groups
    assert [g["params"] for g in groups[1:]] == [[module.actor.table], [module.critic.table]]
    assert [g["lr"] for g in groups] == pytest.approx([1e-3, 3e-3, 2e-2])
    trainer(tmp_path).fit(module, datamodule)
    rows = (module.critic.table.abs().sum(-1) > 0).sum()
    assert rows >= 6  # Kuhn's 12 information states; most are reached and their values move
    features = module._critic_features(datamodule.last_rollout.batch.reshape(-1))
    with torch.no_grad():
        plain = torch.nn.Sequential(*module.critic)(features)
        torch.testing.assert_close(module.critic(features), plain + module.critic.table[module.critic.row(features)])
        assert not torch.allclose(module.critic(features), plain)  # the rows of the played sets are not zero


def test_refusals_name_the_field() -> None:
    spec = OnPolicyDataModule(Pendulum(), num_envs=2, num_steps=4).env_spec
    with pytest.raises(ConfigError, match="policy_table_rows corrects Discrete logits"):
        PPO(env_spec=spec, policy_table_rows=64)
    spec = OnPolicyDataModule(CartPole(), num_envs=2, num_steps=4).env_spec
    with pytest.raises(ConfigError, match="set normalize_obs: false"):
        PPO(env_spec=spec, policy_table_rows=64, normalize_obs=True)
    with pytest.raises(ConfigError, match="policy_table_rows=-1 is invalid"):
        PPO(env_spec=spec, policy_table_rows=-1)
    with pytest.raises(ConfigError, match="policy_table_lr_scale=5.0 is invalid: it scales the table's lr"):
        PPO(env_spec=spec, policy_table_lr_scale=5.0)
    with pytest.raises(ConfigError, match="policy_table_lr_scale=0.0 is invalid"):
        PPO(env_spec=spec, policy_table_rows=64, policy_table_lr_scale=0.0)
    with pytest.raises(ConfigError, match="not supported by RecurrentPPO"):
        RecurrentPPO(env_spec=spec, policy_table_rows=64)
    with pytest.raises(ConfigError, match="model.value_table_rows is not supported by RecurrentPPO"):
        RecurrentPPO(env_spec=spec, value_table_rows=64)
    with pytest.raises(ConfigError, match="value_table_rows hashes the raw observation"):
        PPO(env_spec=spec, value_table_rows=64, normalize_obs=True)
    with pytest.raises(ConfigError, match="value_table_lr_scale=5.0 is invalid: it scales the value table's lr"):
        PPO(env_spec=spec, value_table_lr_scale=5.0)
    pendulum = OnPolicyDataModule(Pendulum(), num_envs=2, num_steps=4).env_spec
    assert isinstance(PPO(env_spec=pendulum, value_table_rows=64).critic, TableCorrected)  # any action kind
