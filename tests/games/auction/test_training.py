"""The auction's tabular training environment and the SEPO trainer on it."""
import numpy as np
import pytest

from sepo.games import get_domain
from sepo.opponents.pools import parse_bot
from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer

PARAMS = {"rounds": 3, "memory": 1}


def environment():
    domain = get_domain("auction")
    game = domain.game("rigorous", **PARAMS)
    pools = domain.pools("rigorous", game)
    return domain.training(game, [parse_bot("auction", e) for e in pools["train"]],
                           [parse_bot("auction", e) for e in pools["collusive"]])


def test_environment_matches_the_solver_and_sums_reach_per_round():
    env = environment()
    assert env.keys == tuple(d.info_key for d in env.solver.decisions())
    table = np.full(env.legal.shape, 1 / env.legal.shape[1])
    for reach in (env.training_reach(table), env.solver.maximiser_reach(table)):
        for t in range(env.solver.rounds):
            assert reach[env.solver.offsets[t]:env.solver.offsets[t + 1]].sum() == pytest.approx(1.0)


def test_sampled_utility_agrees_with_the_exact_one():
    env = environment()
    table = np.random.default_rng(0).dirichlet(np.ones(3), size=len(env.keys))
    rollouts = env.rollouts(table, groups=400, group_size=4, rng=np.random.default_rng(1))
    exact = env.exact_metrics(table)["utility"]
    spread = rollouts.utility.std() / np.sqrt(len(rollouts.utility))
    assert rollouts.utility.mean() == pytest.approx(exact, abs=4 * spread)
    assert rollouts.mask.all() and rollouts.states.shape == (1600, 3)
    assert np.all(rollouts.collusion == 0)  # no collusive partner in the train pool
    assert np.any(rollouts.utility == 0)  # exploiter (gap-maximiser) groups carry no utility


def _trainer(tmp_path, penalty, name):
    config = TabularSEPOConfig(
        game="auction",
        game_params=PARAMS,
        penalty=penalty,
        lambda_e=5.0,
        steps=3,
        groups=8,
        group_size=4,
        seed=3,
    )
    return TabularSEPOTrainer(config, tmp_path / name)


def test_constant_penalty_equals_none(tmp_path):
    constant, none = _trainer(tmp_path, "constant", "c"), _trainer(tmp_path, "none", "n")
    constant.train()
    none.train()
    assert np.max(np.abs(constant.logits - none.logits)) <= 1e-9  # equal up to float rounding


def test_per_rollout_penalty_changes_the_update(tmp_path):
    sepo, none = _trainer(tmp_path, "per-rollout", "s"), _trainer(tmp_path, "none", "n")
    sepo.train()
    none.train()
    assert not np.allclose(sepo.logits, none.logits)
