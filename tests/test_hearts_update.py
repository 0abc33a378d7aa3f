"""PPO on Hearts with the ``hearts`` encoder (a fixed decoding): each rollout row decoded once per update and once
while acting, with updates and values identical to decoding per minibatch (issue 28, cheaper self-play)."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("pyspiel")

from rl_lightning import keys  # noqa: E402
from rl_lightning.algos import PPO  # noqa: E402
from rl_lightning.algos.ppo import TRAIN_KEY  # noqa: E402
from rl_lightning.data.league import SeatPlayers  # noqa: E402
from rl_lightning.data.selfplay import SelfPlayCollector  # noqa: E402
from rl_lightning.envs.base import BatchedEnv  # noqa: E402
from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402
from rl_lightning.networks.hearts import HeartsFeatures  # noqa: E402


def hearts_rollout(module: PPO, ticks: int = 8) -> torch.Tensor:
    env = BatchedEnv(OpenSpielEnv("open_spiel:hearts", reward="trick"), 8, seed=0)
    collector = SelfPlayCollector(env, SeatPlayers(["self"] * 4, None, env.device), seed=0)
    return collector.rollout(module.acting_policy(env.env, deterministic=False, training=True), ticks, 0)


def one_update(module: PPO, flat) -> dict[str, torch.Tensor]:
    module.generator.manual_seed(3)
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
    module.update(flat, optimizer)
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def count_decodes(monkeypatch) -> list[int]:
    rows: list[int] = []
    forward = HeartsFeatures.forward

    def counted(self, obs):
        rows.append(obs.reshape(-1, obs.shape[-1]).shape[0])
        return forward(self, obs)

    monkeypatch.setattr(HeartsFeatures, "forward", counted)
    return rows


@pytest.mark.parametrize("magnet", [None, {"kind": "initial", "coef": 0.5}])
def test_decoding_once_per_update_gives_the_update_of_decoding_per_minibatch(monkeypatch, magnet) -> None:
    torch.manual_seed(0)
    module = PPO(OpenSpielEnv("open_spiel:hearts").spec, hidden_sizes=(32,), encoder="hearts", update_epochs=2,
                 num_minibatches=4, magnet=magnet)  # fmt: skip
    assert module.decodes_once
    with torch.no_grad():  # move the weights off the magnet's so its term has a gradient
        for p in module.actor.parameters():
            p.add_(0.1 * torch.randn_like(p))
    flat = module.process_rollout(hearts_rollout(module)).reshape(-1)
    flat = flat[flat[TRAIN_KEY]]
    per_minibatch = copy.deepcopy(module)
    rows = count_decodes(monkeypatch)
    once = one_update(module, flat)
    assert rows == [flat.numel()]  # one decoding of every row for 2 epochs x 4 minibatches
    rows.clear()
    monkeypatch.setattr(PPO, "decodes_once", property(lambda self: False))
    reference = one_update(per_minibatch, flat)
    assert len(rows) == 8 * (1 if magnet is None else 3)  # the old path: the policy, the magnet's and its own
    for name, value in reference.items():
        torch.testing.assert_close(once[name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_values_come_with_the_actions_and_equal_the_critic_on_the_decoded_rows() -> None:
    torch.manual_seed(0)
    module = PPO(OpenSpielEnv("open_spiel:hearts").spec, hidden_sizes=(32,), encoder="hearts")
    batch = hearts_rollout(module, ticks=4)
    assert keys.VALUE in batch  # acted with the value: process_rollout does not decode the rollout again
    with torch.no_grad():
        expected = module.critic(module.encoder(batch[keys.OBS])).squeeze(-1)
    torch.testing.assert_close(batch[keys.VALUE], expected)


def test_only_fixed_decodings_are_decoded_once() -> None:
    spec = OpenSpielEnv("open_spiel:hearts").spec
    assert not PPO(spec, hidden_sizes=(32,), encoder="mlp").decodes_once  # a flatten: nothing to save
    assert PPO(spec, hidden_sizes=(32,), encoder="hearts", share_encoder=False).decodes_once  # the same map twice


def test_a_normaliser_is_refused_with_a_fixed_decoding_which_reads_the_raw_entries() -> None:
    """A normalised Hearts observation is no longer the 0/1 information state the decoding indexes (with statistics
    from a rollout it reads a trick slot -1), so ``normalize_obs`` is refused in one line; the decode-once update
    therefore never meets a normaliser. The mlp encoder still takes one."""
    spec = OpenSpielEnv("open_spiel:hearts").spec
    with pytest.raises(ConfigError, match=r"model.normalize_obs=true: model.encoder='hearts' decodes \['obs'\]"):
        PPO(spec, hidden_sizes=(32,), encoder="hearts", normalize_obs=True)
    assert PPO(spec, hidden_sizes=(32,), encoder="mlp", normalize_obs=True).obs_normalizer is not None
