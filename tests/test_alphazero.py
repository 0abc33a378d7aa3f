"""AlphaZero: its loss against a naive per-row reference and its closed-form gradient, the search's policy targets
against brute-force minimax (proven losing moves get no mass), the root noise against its Dirichlet draw, the acting
rule (explore, then the most visited), root noise in self-play, value targets equal to the game's result, the
update's loss (with a normaliser and tree positions) against the network as the search reads it, Adam's L2 penalty
against a hand-written step, and the user's path: a CLI fit whose checkpoint a fresh process searches with, plays and
exports; one-line refusals."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest
import torch

pytest.importorskip("pyspiel")

from rl_lightning import keys  # noqa: E402
from rl_lightning.algos import AlphaZero  # noqa: E402
from rl_lightning.algos.alphazero import SEARCH_POLICY, PUCTSearch, root_values, visit_targets  # noqa: E402
from rl_lightning.algos.alphazero.module import TERMS, TREE_MASK, TREE_OBS, TREE_POLICY, TREE_VALID  # noqa: E402
from rl_lightning.algos.alphazero.tree import tree_positions  # noqa: E402
from rl_lightning.algos.selfplay_targets import TRAIN_KEY  # noqa: E402
from rl_lightning.data import OnPolicyDataModule  # noqa: E402
from rl_lightning.envs import Pendulum  # noqa: E402
from rl_lightning.envs.base import BatchedEnv  # noqa: E402
from rl_lightning.envs.games import OpenSpielEnv  # noqa: E402
from rl_lightning.errors import ConfigError  # noqa: E402
from rl_lightning.objectives.alphazero import alphazero_loss  # noqa: E402
from tests.cli_subprocess import ERROR_PREFIX, ROOT, run_cli, run_python  # noqa: E402
from tests.helpers import trainer  # noqa: E402
from tests.test_games_search import TTT, ttt_best, ttt_positions, ttt_value  # noqa: E402
from tests.test_selfplay import Rollouts  # noqa: E402


def test_loss_matches_a_naive_per_row_reference_and_its_gradient_is_softmax_minus_target():
    gen = torch.Generator().manual_seed(0)
    n, a = 6, 5
    raw = torch.randn(n, a, generator=gen)
    mask = torch.rand(n, a, generator=gen) > 0.3
    mask[:, 0] = True
    logits = raw.masked_fill(~mask, torch.finfo(raw.dtype).min).requires_grad_(True)
    target = torch.rand(n, a, generator=gen) * mask
    target[:, 1] = 0.0  # zero-target entries (legal or not) must contribute nothing, not NaN
    target[:, 0] += 0.1
    target = target / target.sum(-1, keepdim=True)
    value = torch.randn(n, generator=gen, requires_grad=True)
    z = torch.randn(n, generator=gen)
    terms = alphazero_loss(logits, value, target, z, vf_coef=0.7)
    ce, kl, ent, sq = [], [], [], []
    for row in range(n):
        legal = [j for j in range(a) if mask[row, j]]
        norm = math.log(sum(math.exp(raw[row, j].item()) for j in legal))
        logp = {j: raw[row, j].item() - norm for j in legal}
        t = {j: target[row, j].item() for j in legal if target[row, j] > 0}
        ce.append(-sum(t[j] * logp[j] for j in t))
        kl.append(sum(t[j] * (math.log(t[j]) - logp[j]) for j in t))
        ent.append(-sum(math.exp(logp[j]) * logp[j] for j in legal))
        sq.append(0.5 * (value[row].item() - z[row].item()) ** 2)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert terms["loss_policy"].item() == pytest.approx(mean(ce), rel=1e-5)
    assert terms["search_kl"].item() == pytest.approx(mean(kl), abs=1e-5)
    assert terms["entropy"].item() == pytest.approx(mean(ent), rel=1e-5)
    assert terms["loss_value"].item() == pytest.approx(mean(sq), rel=1e-5)
    assert terms["loss"].item() == pytest.approx(mean(ce) + 0.7 * mean(sq), rel=1e-5)
    terms["loss"].backward()
    probs = torch.softmax(logits.detach(), -1)
    assert torch.allclose(logits.grad, (probs - target) / n, atol=1e-6)  # d CE / d logits, illegal entries 0
    assert torch.allclose(value.grad, 0.7 * (value.detach() - z) / n, atol=1e-6)


def _positions(min_moves: int, count: int, seed: int) -> list:
    found = [s for s in ttt_positions() if len(s.history()) >= min_moves and len(ttt_best(s)) < len(s.legal_actions())]
    return random.Random(seed).sample(found, count)


def test_targets_give_no_mass_to_moves_minimax_refutes_once_the_search_proves_them():
    # 300 uniform simulations solve tic-tac-toe from five moves in: the target keeps only minimax-optimal moves.
    sample = _positions(5, 200, seed=0)
    roots = PUCTSearch(None, 300, 1.5).search(sample)
    assert all(root.solved is not None for root in roots)
    targets = visit_targets(roots, 9)
    assert np.allclose(targets.sum(-1), 1.0)
    for state, row in zip(sample, targets, strict=True):
        support = set(np.flatnonzero(row).tolist())
        assert support, str(state)
        assert support <= ttt_best(state), (str(state), support, ttt_best(state))


def test_targets_with_few_simulations_drop_only_proven_losses_and_keep_the_visit_shares():
    sample = _positions(2, 200, seed=1)
    roots = PUCTSearch(None, 25, 1.5).search(sample)
    targets = visit_targets(roots, 9)
    dropped_losses = 0
    for state, root, row in zip(sample, roots, targets, strict=True):
        mover = root.player
        results = [c.solved[mover] if c is not None and c.solved is not None else None for c in root.children]
        kept = [i for i, a in enumerate(root.legal) if row[a] > 0]
        for i, action in enumerate(root.legal):
            if results[i] is not None and results[i] < 0 and any(r is None or r >= 0 for r in results):
                assert row[action] == 0  # a proven loss beside a move that is not one
                assert ttt_value((*state.history(), action)) * (1 if mover == 0 else -1) == -1  # truly lost
                dropped_losses += 1
        if all(results[i] is None or results[i] == 0 for i in range(len(results))) and not root.solved:
            counts = np.array([root.counts[i] for i in kept], dtype=float)
            assert np.allclose(row[[root.legal[i] for i in kept]], counts / counts.sum())
    assert dropped_losses > 20  # the rule was exercised


def test_root_values_are_proven_minimax_values_or_the_visit_weighted_mean():
    sample = _positions(2, 120, seed=4)
    roots = PUCTSearch(None, 60, 1.5).search(sample)
    values = root_values(roots)
    solved = 0
    for state, root, value in zip(sample, roots, values, strict=True):
        sign = 1 if root.player == 0 else -1
        if root.solved is not None:
            assert value == sign * ttt_value(tuple(state.history()))
            solved += 1
        else:
            per_move = [root.value_sum[i] / root.counts[i] for i in range(len(root.legal)) if root.counts[i]]
            weights = [root.counts[i] for i in range(len(root.legal)) if root.counts[i]]
            assert value == pytest.approx(sum(v * w for v, w in zip(per_move, weights)) / sum(weights), abs=1e-6)
    assert 0 < solved < len(sample)  # both branches exercised


def test_root_noise_is_the_dirichlet_draw_of_the_given_rng():
    state = TTT.new_initial_state()
    prior_only = PUCTSearch(None, 1, 1.5).search([state])[0].prior
    noisy = PUCTSearch(None, 1, 1.5).search([state], root_noise=(0.5, 0.25, np.random.default_rng(7)))[0].prior
    eta = np.random.default_rng(7).dirichlet([0.5] * 9)
    assert np.allclose(noisy, 0.75 * np.array(prior_only) + 0.25 * eta)
    assert sum(noisy) == pytest.approx(1.0)


def _module(**kwargs):
    env = OpenSpielEnv("open_spiel:tic_tac_toe")
    return AlphaZero(env.spec, **{"hidden_sizes": (32,), "simulations": 16, **kwargs})


def test_acting_draws_from_the_targets_while_exploring_then_plays_the_most_visited_and_repeats_under_a_seed():
    module = _module(explore_moves=3)
    early = [s for s in ttt_positions() if len(s.history()) < 3][:40]
    late = [s for s in ttt_positions() if len(s.history()) >= 3][:200]
    out = module.search_and_act(early + late, torch.Generator().manual_seed(0))
    targets, action = out[SEARCH_POLICY], out[keys.ACTION]
    assert torch.allclose(targets.sum(-1), torch.ones(len(targets)))
    assert (targets.gather(1, action[:, None]) > 0).all()  # every move has target mass (legal, not refuted)
    assert torch.equal(action[len(early) :], targets[len(early) :].argmax(-1))
    assert not torch.equal(action[: len(early)], targets[: len(early)].argmax(-1))  # drawn, not the argmax
    again = module.search_and_act(early + late, torch.Generator().manual_seed(0))
    assert torch.equal(again[keys.ACTION], action)
    assert torch.equal(again[SEARCH_POLICY], targets)


def test_value_targets_are_each_decisions_game_result_mixed_with_the_search_value_beside_a_league(tmp_path):
    search_weight = 0.25  # the target is 0.75 z + 0.25 q; q is checked against minimax in its own test
    module = _module(explore_moves=9, value_target_search=search_weight)
    # League snapshots are rebuilt from the module's hyper-parameters (PPO's whole set beside AlphaZero's own).
    dm = OnPolicyDataModule(OpenSpielEnv("open_spiel:tic_tac_toe"), num_envs=4, num_steps=24, total_env_steps=192,
                            seats={0: "self", 1: "self"},
                            league={"size": 2, "snapshot_every_n_updates": 1, "share": 0.5})  # fmt: skip
    rollouts = Rollouts()
    trainer(tmp_path, callbacks=[rollouts]).fit(module, dm)
    assert dm.selfplay.league.taken >= 1
    assert any((batch["player"] != 0).any() for batch in rollouts.batches[1:])  # a snapshot played a seat
    batch = rollouts.batches[0]
    assert SEARCH_POLICY in batch
    seat, reward = batch[keys.SEAT], batch[keys.REWARD]
    done = batch[keys.TERMINATED] | batch[keys.TRUNCATED]
    checked = 0
    for b in range(batch.batch_size[1]):
        for t in range(batch.batch_size[0]):
            if not batch[TRAIN_KEY][t, b]:
                continue
            end = next((u for u in range(t, batch.batch_size[0]) if done[u, b]), None)
            if end is None:
                continue  # a game the rollout cut: its target bootstraps
            result = reward[end, b, seat[t, b]].item()  # tic-tac-toe pays only at the end
            expected = (1 - search_weight) * result + search_weight * batch[keys.SEARCH_VALUE][t, b].item()
            assert batch[keys.RETURN][t, b] == pytest.approx(expected, abs=1e-6)
            checked += 1
    assert checked > 20


def test_cli_fit_then_a_fresh_process_searches_plays_and_exports_the_checkpoint(tmp_path):
    result = run_cli(["fit", "--config", "configs/alphazero_tictactoe.yaml", "--data.init_args.num_envs", "8",
                      "--data.init_args.num_steps", "8", "--data.init_args.total_env_steps", "128",
                      "--model.init_args.simulations", "8", "--trainer.callbacks", "[]",
                      "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"),
                      "--trainer.default_root_dir", str(tmp_path)], cwd=ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    ckpt = sorted((tmp_path / "runs").rglob("*.ckpt"))[-1]
    script = f"""
from rl_lightning import load_policy
from rl_lightning.envs.games import OpenSpielEnv
from rl_lightning.envs.games.bots.minimax import MinimaxBot
from rl_lightning.games import play_match
from rl_lightning.games.search import NetworkMCTS
search = NetworkMCTS.from_checkpoint({str(ckpt)!r}, simulations=50)
env = OpenSpielEnv("open_spiel:tic_tac_toe")
search.check_env(env)
match = play_match(env, search, MinimaxBot(), num_deals=4, seed=0, duplicate=False, baseline=False)
print("games", int(match.tested.diagonal(dim1=1, dim2=2).isfinite().sum()))
print("family", type(load_policy({str(ckpt)!r}).module).__name__)
"""
    out = run_python(["-c", script], ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "games 8" in out.stdout, out.stdout  # the searching agent finished every game, in both seats
    assert "family AlphaZero" in out.stdout, out.stdout
    exported = run_cli(["export", "--ckpt_path", str(ckpt), "--format", "onnx", "--out", str(tmp_path / "az.onnx")],
                       tmp_path)  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert (tmp_path / "az.onnx").stat().st_size > 0


@pytest.mark.parametrize(
    ("args", "says"),
    [(["--data.init_args.env.init_args.env_id", "open_spiel:kuhn_poker"], "data.env: .*hides information"),
     (["--model.init_args.dirichlet_fraction", "1.5"], "model.dirichlet_fraction=1.5"),
     (["--model.init_args.simulations", "0"], "model.simulations=0"),
     (["--data.init_args.compile", "true"], "data.compile=true steps with the network alone")],
)  # fmt: skip
def test_cli_refuses_in_one_line_before_any_work(tmp_path, args, says):
    result = run_cli(["fit", "--config", "configs/alphazero_tictactoe.yaml", "--trainer.callbacks", "[]",
                      "--trainer.default_root_dir", str(tmp_path),
                      "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), *args], cwd=ROOT)  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, result.stderr[-1500:]
    assert re.search(says, lines[0]), lines[0]
    assert not list((tmp_path / "runs").rglob("*.ckpt"))


_MINIMAX_JUDGE = (
    '[{"class_path": "rl_lightning.callbacks.GameEvaluation", "init_args": {"every_n_env_steps": 1000, '
    '"num_games": 20, "opponents": ["rl_lightning.envs.games.bots.minimax.MinimaxBot"]}}]'
)


@pytest.mark.parametrize(
    ("config", "args", "says"),
    [("alphazero_tictactoe", ["--data.init_args.env.init_args.env_id", "open_spiel:kuhn_poker"],
      r"data\.env: open_spiel:kuhn_poker hides information.*; AlphaZero plays perfect-information games"),
     ("alphazero_tictactoe", ["--data.init_args.env.init_args.env_id", "open_spiel:pig"],
      r"data\.env: open_spiel:pig has chance nodes; AlphaZero searches deterministic games"),
     ("ppo_kuhn", ["--trainer.callbacks", _MINIMAX_JUDGE],
      r"GameEvaluation: MinimaxBot cannot play open_spiel:kuhn_poker: it hides information")],
)  # fmt: skip
def test_cli_refusal_on_a_game_names_what_refuses_and_why(tmp_path, config, args, says):
    """The bundled config's judge (a MinimaxBot opponent) refuses Kuhn poker too, but the line names the algorithm
    the run trains; and a MinimaxBot that refuses names itself, not a bot it borrowed its check from."""
    result = run_cli(["fit", "--config", f"configs/{config}.yaml", "--trainer.default_root_dir", str(tmp_path),
                      "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), *args], cwd=ROOT)  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, result.stderr[-1500:]
    assert re.search(says, lines[0]), lines[0]
    assert "OpenSpielMCTSBot" not in lines[0]


def test_bad_settings_and_envs_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="explore_moves"):
        _module(explore_moves=-1)
    spec = Pendulum().spec
    with pytest.raises(ConfigError, match="has box actions"):
        AlphaZero(spec)


def test_a_target_temperature_sharpens_the_stored_target_but_not_the_search_or_the_moves():
    states = [s for s in ttt_positions() if len(s.history()) < 4][:60]
    base = _module(explore_moves=9)
    plain = base.search_and_act(states, torch.Generator().manual_seed(3))
    module = _module(explore_moves=9, target_temperature=0.25)
    module.load_state_dict(base.state_dict())  # the same network
    sharp = module.search_and_act(states, torch.Generator().manual_seed(3))
    assert torch.equal(sharp[keys.ACTION], plain[keys.ACTION])
    expected = plain[SEARCH_POLICY].pow(4)
    assert torch.allclose(sharp[SEARCH_POLICY], expected / expected.sum(-1, keepdim=True), atol=1e-6)


def test_the_update_loss_reads_the_network_through_the_legal_moves_mask():
    module = _module()
    states = [s for s in ttt_positions() if len(s.history()) >= 3][:32]
    obs = torch.tensor([s.observation_tensor(s.current_player()) for s in states]).reshape(len(states), 3, 3, 3)
    mask = torch.zeros(len(states), 9, dtype=torch.bool)
    for row, state in enumerate(states):
        mask[row, state.legal_actions()] = True
    target = mask.float() / mask.float().sum(-1, keepdim=True)
    z = torch.linspace(-1, 1, len(states))
    loss, terms = module.minibatch_loss({keys.OBS: obs, keys.ACTION_MASK: mask, SEARCH_POLICY: target, keys.RETURN: z})
    raw = module.actor(module.encoder(obs))
    value = module.critic(module.encoder(obs)).squeeze(-1)
    ce = []
    for row in range(len(states)):
        legal = raw[row, mask[row]]
        ce.append(-(torch.log_softmax(legal, -1) * target[row, mask[row]]).sum())
    expected = torch.stack(ce).mean() + 1.0 * 0.5 * (value - z).pow(2).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert terms.shape == (len(TERMS) - 1,)  # every term but the gradient norm


def _tree_nodes(root):
    stack, nodes = [c for c in root.children if c is not None], []
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(c for c in node.children if c is not None)
    return nodes


def test_tree_positions_are_the_solved_then_most_visited_unfinished_positions_of_each_tree():
    sample = _positions(1, 60, seed=5)
    roots = PUCTSearch(None, 80, 1.5).search(sample)
    picked = tree_positions(roots, 5, 6)
    for root, chosen in zip(roots, picked, strict=True):
        eligible = [n for n in _tree_nodes(root) if n.legal and n.prior is not None and
                    (n.solved is not None or n.visits >= 6)]  # fmt: skip
        keys_of = sorted(((n.solved is not None, n.visits) for n in eligible), reverse=True)[:5]
        assert [(n.solved is not None, n.visits) for n in chosen] == keys_of
        assert all(n is not root and not n.state.is_terminal() for n in chosen)
    solved = [n for chosen in picked for n in chosen if n.solved is not None]
    for node, row in zip(solved, visit_targets(solved, 9), strict=True):
        assert set(np.flatnonzero(row).tolist()) <= ttt_best(node.state)  # proofs leave only minimax moves
    assert len(solved) > 20


def _naive_tree_loss(module, out, policy_input) -> float:
    """Mean cross-entropy of the policy on ``policy_input`` (the valid tree positions, as the policy reads them)."""
    valid = out[TREE_VALID]
    logits = module.actor(module.encoder(policy_input))
    logits = logits.masked_fill(~out[TREE_MASK][valid], float("-inf"))
    log_p = torch.log_softmax(logits, -1)
    target = out[TREE_POLICY][valid]
    return -torch.stack([(t[t > 0] * lp[t > 0]).sum() for t, lp in zip(target, log_p, strict=True)]).mean().item()


def test_tree_targets_are_stored_per_decision_and_the_loss_reads_only_the_valid_ones():
    torch.manual_seed(0)
    module = _module(simulations=100, tree_targets=6, tree_min_visits=4, explore_moves=0)
    sample = _positions(1, 40, seed=6)
    out = module.search_and_act(sample, torch.Generator().manual_seed(0))
    valid = out[TREE_VALID]
    assert valid.any(dim=1).sum() >= 10  # a root solved at once (a win in one) grows no tree worth a target
    checked = 0
    for row in range(len(sample)):
        for slot in range(6):
            if not valid[row, slot]:
                assert not out[TREE_POLICY][row, slot].any()
                continue
            target = out[TREE_POLICY][row, slot]
            assert target.sum() == pytest.approx(1.0, abs=1e-5)
            assert not (target > 0)[~out[TREE_MASK][row, slot]].any()  # only legal moves
            checked += 1
    assert checked > 40
    mb = {key: out[key] for key in (TREE_OBS, TREE_MASK, TREE_POLICY, TREE_VALID)}
    loss = module._tree_loss(mb)
    assert loss.item() == pytest.approx(_naive_tree_loss(module, out, out[TREE_OBS][valid]), rel=1e-5)
    garbage = dict(mb, **{TREE_OBS: torch.where(valid[:, :, None, None, None], mb[TREE_OBS], 7.0)})
    assert module._tree_loss(garbage).item() == pytest.approx(loss.item(), rel=1e-6)  # invalid slots ignored


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Row by row: ``−Σ_a t_a log softmax(logits)_a`` over the moves with target mass."""
    log_p = torch.log_softmax(logits, -1)
    return torch.stack([-(t[t > 0] * lp[t > 0]).sum() for t, lp in zip(target, log_p, strict=True)])


def test_the_update_loss_with_a_normaliser_is_the_loss_of_the_network_as_the_search_reads_it():
    """``normalize_obs`` and ``tree_targets``: every position (roots and tree) reaches the network normalised, as the
    search reads it (``logits_and_value`` on raw observations), and the tree term is weighted by ``tree_coef``."""
    torch.manual_seed(0)
    module = _module(simulations=60, tree_targets=4, tree_min_visits=4, explore_moves=0, normalize_obs=True,
                     tree_coef=0.3, vf_coef=0.7, update_epochs=1, num_minibatches=1)  # fmt: skip
    states = _positions(1, 24, seed=7)
    obs = torch.tensor([s.observation_tensor(s.current_player()) for s in states]).reshape(len(states), 3, 3, 3)
    mask = torch.zeros(len(states), 9, dtype=torch.bool)
    for row, state in enumerate(states):
        mask[row, state.legal_actions()] = True
    module.obs_normalizer.update(obs)  # statistics far from the prior's (mean 0, var 1): raw and normalised differ
    out = module.search_and_act(states, torch.Generator().manual_seed(0))
    valid = out[TREE_VALID]
    assert valid.sum() > 20
    z = torch.linspace(-1, 1, len(states))
    batch = out.select(keys.ACTION, SEARCH_POLICY, TREE_OBS, TREE_MASK, TREE_POLICY, TREE_VALID)
    batch.update({keys.OBS: obs, keys.ACTION_MASK: mask, keys.RETURN: z, keys.VALUE: torch.zeros(len(states))})
    seen: list[torch.Tensor] = []
    loss_of = module.minibatch_loss

    def recorded(mb):
        loss, terms = loss_of(mb)
        seen.append(loss.detach())
        return loss, terms

    module.minibatch_loss = recorded
    terms = module.update(batch, torch.optim.SGD(module.parameters(), lr=0.0))  # one step that changes nothing
    logits, value = module.logits_and_value(obs, mask)
    tree_logits, _ = module.logits_and_value(out[TREE_OBS][valid], out[TREE_MASK][valid])
    root_ce = _cross_entropy(logits, out[SEARCH_POLICY]).mean()
    tree_ce = _cross_entropy(tree_logits, out[TREE_POLICY][valid]).mean()
    assert terms["loss_tree"].item() == pytest.approx(tree_ce.item(), rel=1e-5)
    assert terms["loss_policy"].item() == pytest.approx(root_ce.item(), rel=1e-5)
    expected = root_ce + 0.7 * 0.5 * (value - z).pow(2).mean() + 0.3 * tree_ce
    assert len(seen) == 1
    assert seen[0].item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("fraction", [0.0, 1.0])
def test_self_play_mixes_root_noise_into_each_rows_search(fraction):
    """Through the acting path a collector steps: 90 games at their first move, searched with 2 simulations (the
    second visits the root's highest prior). With pure noise of a small concentration (near one-hot draws) the
    moves spread over the board; without noise every row searches the same network prior and plays the same move."""
    module = _module(simulations=2, dirichlet_alpha=0.05, dirichlet_fraction=fraction, explore_moves=0)
    env = BatchedEnv(OpenSpielEnv("open_spiel:tic_tac_toe"), 90, seed=0)
    obs = env.reset()
    out = module.acting_policy(env, training=True)(obs, torch.Generator().manual_seed(0))
    assert torch.equal(out[SEARCH_POLICY].argmax(-1), out[keys.ACTION])  # the most visited move (explore_moves 0)
    played = set(out[keys.ACTION].tolist())
    if fraction == 0.0:
        assert len(played) == 1
    else:
        assert len(played) >= 7  # 9 moves, each the noise's favourite in ~10 of 90 rows
    env.close()


def test_the_optimiser_is_adam_with_the_coupled_l2_penalty_of_a_hand_written_step():
    """Three steps of ``configure_optimizers``' optimiser against Adam written out with ``g + weight_decay·θ`` as its
    gradient. The gradients are small beside ``weight_decay·θ``, so the penalty sets the direction of every step."""
    module = _module(lr=0.01, weight_decay=0.05, adam_eps=1e-8)
    optimizer = module.configure_optimizers()
    params = [p for p in module.parameters() if p.requires_grad]
    theta = [p.detach().clone().double() for p in params]
    m = [torch.zeros_like(t) for t in theta]
    v = [torch.zeros_like(t) for t in theta]
    gen = torch.Generator().manual_seed(0)
    for step in range(1, 4):
        grads = [1e-4 * torch.randn(p.shape, generator=gen) for p in params]
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        optimizer.step()
        for i, g in enumerate(grads):
            g = g.double() + 0.05 * theta[i]
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            m_hat, v_hat = m[i] / (1 - 0.9**step), v[i] / (1 - 0.999**step)
            theta[i] = theta[i] - 0.01 * m_hat / (v_hat.sqrt() + 1e-8)
    for p, t in zip(params, theta, strict=True):
        torch.testing.assert_close(p.detach().double(), t, rtol=1e-4, atol=1e-6)
