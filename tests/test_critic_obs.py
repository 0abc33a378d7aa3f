"""A centralised critic for imperfect-information games: ``critic_obs`` from ``OpenSpielEnv(critic_obs=true)`` (every
seat's view, the acting seat's first) and PPO's ``critic_input: critic_obs``, whose critic reads it in training while
the policy reads only ``obs``. The views against OpenSpiel's own tensors, the values against the critic run by hand,
a fit with an actor process through the CLI, and the one-line refusals."""

from __future__ import annotations

import pytest
import torch

from rl_lightning import keys
from rl_lightning.algos import PPO, RecurrentPPO
from rl_lightning.data import OnPolicyDataModule
from rl_lightning.errors import ConfigError
from tests.cli_subprocess import error_line, run_cli

pytest.importorskip("pyspiel", reason='needs pip install -e ".[games]"')

from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402 - after the skip: needs open_spiel


def _views_by_hand(state, acting: int, seats: int) -> torch.Tensor:
    """Each seat's information state tensor from OpenSpiel itself, the acting seat's first, then in turn order."""
    order = [(acting + k) % seats for k in range(seats)]
    return torch.tensor([x for seat in order for x in state.information_state_tensor(seat)])


@pytest.mark.parametrize("game", ["open_spiel:leduc_poker", "open_spiel:kuhn_poker(players=3)"])
def test_critic_obs_holds_every_seats_view_acting_seat_first(game) -> None:
    env = OpenSpielEnv(game, observation="info_state", critic_obs=True)
    seats = env.spec.num_seats
    assert env.spec.critic_obs_shape == (seats * env.spec.obs_shape[0],)
    generator = torch.Generator().manual_seed(0)
    state = env.reset_state(6, generator)
    out = env.observe(state)
    ended = 0
    for tick in range(30):  # through several games' ends: the restarted games' views too
        for row in range(6):
            engine = env.engine_state(state, row)
            acting = engine.current_player()
            assert int(out[keys.SEAT][row]) == acting
            torch.testing.assert_close(out[keys.CRITIC_OBS][row], _views_by_hand(engine, acting, seats))
            torch.testing.assert_close(out[keys.CRITIC_OBS][row, : env.spec.obs_shape[0]], out[keys.OBS][row])
        legal = out[keys.ACTION_MASK].float()
        action = torch.multinomial(legal, 1, generator=generator).squeeze(-1)
        state, out = env.step_state(state, action, generator, inplace=True)
        ended += int(out[keys.TERMINATED].sum())
    assert ended >= 6
    env.close()


def test_the_env_refuses_critic_obs_with_a_step_limit() -> None:
    with pytest.raises(ConfigError, match="critic_obs=true with max_episode_steps=8: .* set max_episode_steps: 0"):
        OpenSpielEnv("open_spiel:leduc_poker", critic_obs=True, max_episode_steps=8)


def _leduc_fit(tmp_path, **model_kwargs):
    from helpers import trainer

    env = OpenSpielEnv("open_spiel:leduc_poker", observation="info_state", critic_obs=True)
    datamodule = OnPolicyDataModule(env, num_envs=8, num_steps=8, total_env_steps=128, seats={0: "self", 1: "self"})
    module = PPO(env_spec=env.spec, hidden_sizes=(16,), update_epochs=1, num_minibatches=2, gamma=1.0, **model_kwargs)
    trainer(tmp_path).fit(module, datamodule)
    return module, datamodule


def test_the_critic_values_every_seats_view_and_the_policy_only_its_own(tmp_path) -> None:
    module, datamodule = _leduc_fit(tmp_path, critic_input="critic_obs")
    width = module.env_spec.obs_shape[0]
    assert module.critic[0].in_features == 2 * width
    batch = datamodule.last_rollout.batch.exclude(keys.VALUE, keys.NEXT_VALUE, keys.ADVANTAGE, keys.RETURN)
    batch = module.process_rollout(batch)  # with the weights as they are now
    with torch.no_grad():
        by_hand = module.critic(batch[keys.CRITIC_OBS]).squeeze(-1)
    torch.testing.assert_close(batch[keys.VALUE], by_hand)  # process_rollout's values read critic_obs
    rows = batch.reshape(-1)[:16]
    _, _, value = module._evaluate_minibatch({key: rows[key] for key in (keys.OBS, keys.ACTION, keys.ACTION_MASK,
                                                                        keys.CRITIC_OBS)})  # fmt: skip
    torch.testing.assert_close(value.detach(), module.critic(rows[keys.CRITIC_OBS]).squeeze(-1).detach())
    hidden = rows.clone()
    hidden[keys.CRITIC_OBS][:, width:] = 1.0 - hidden[keys.CRITIC_OBS][:, width:]  # the other seat's cards differ
    with torch.no_grad():
        assert not torch.allclose(module._critic_features(hidden), module._critic_features(rows))
        logits = module._logits(rows, module._features(rows)[0])
        assert torch.equal(logits, module._logits(hidden, module._features(hidden)[0]))  # the policy never sees it


def test_a_value_table_keys_on_every_seats_view(tmp_path) -> None:
    module, datamodule = _leduc_fit(tmp_path, critic_input="critic_obs", value_table_rows=4096,
                                    value_table_lr_scale=10.0)  # fmt: skip
    assert module.critic.row_multipliers.shape == (60,)
    assert (module.critic.table.abs().sum(-1) > 0).sum() >= 8
    views = datamodule.last_rollout.batch[keys.CRITIC_OBS].reshape(-1, 60)
    swapped = views.clone()
    swapped[:, 30:] = 1.0 - swapped[:, 30:]  # the same own view, another state of the other seat
    assert (module.critic.row(views) != module.critic.row(swapped)).float().mean() > 0.9


def test_refusals_name_the_field() -> None:
    plain = OpenSpielEnv("open_spiel:kuhn_poker")
    with pytest.raises(ConfigError, match="model.critic_input='state' is not a choice"):
        PPO(env_spec=plain.spec, critic_input="state")
    with pytest.raises(ConfigError, match="needs an env that emits critic_obs; open_spiel:kuhn_poker emits none"):
        PPO(env_spec=plain.spec, critic_input="critic_obs")
    spec = OpenSpielEnv("open_spiel:kuhn_poker", critic_obs=True).spec
    with pytest.raises(ConfigError, match="set normalize_obs: false"):
        PPO(env_spec=spec, critic_input="critic_obs", normalize_obs=True)
    with pytest.raises(ConfigError, match="critic_input=critic_obs is not supported by RecurrentPPO"):
        RecurrentPPO(env_spec=spec, critic_input="critic_obs")
    module = PPO(env_spec=spec, critic_input="critic_obs")
    with pytest.raises(ConfigError, match="a search over one seat's observation cannot supply"):
        module.logits_and_value(torch.zeros(1, spec.obs_shape[0]), torch.ones(1, spec.num_actions, dtype=torch.bool))


def test_a_centralised_critic_fits_with_an_actor_process_through_the_cli(tmp_path) -> None:
    args = [
        "fit", "--config", "ppo_leduc.yaml", "--data.init_args.env.init_args.critic_obs", "true",
        "--model.init_args.critic_input", "critic_obs", "--data.init_args.num_actors", "1",
        "--data.init_args.num_envs", "16", "--data.init_args.num_steps", "16", "--data.init_args.total_env_steps",
        "1024", "--model.init_args.hidden_sizes", "[16]",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.enable_progress_bar", "false",
    ]  # fmt: skip
    result = run_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    run = next((tmp_path / "runs" / "ppo_leduc").iterdir())
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["state_dict"]["critic.0.weight"].shape[1] == 60  # Leduc's 30-entry view for each of 2 seats
    events = b"".join(path.read_bytes() for path in run.glob("events.out.tfevents.*"))
    assert b"train/loss_value" in events
    assert b"eval/exploitability" in events  # the config's evaluation plays the policy alone, on obs


def test_the_cli_refuses_a_centralised_critic_on_an_env_without_it(tmp_path) -> None:
    args = ["fit", "--config", "ppo_kuhn.yaml", "--model.init_args.critic_input", "critic_obs",
            "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")]  # fmt: skip
    line = error_line(run_cli(args, tmp_path))
    assert "model.critic_input=critic_obs needs an env that emits critic_obs" in line
    assert not (tmp_path / "runs").exists()
