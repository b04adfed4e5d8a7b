"""The shuffled penalty, the ablation of per-rollout credit that can fail: in the tabular trainer its
exact expected update equals payoff-only GRPO's (groups of two rollouts, every pair of matches and
both permutations enumerated, unscaled advantages), while per-rollout SEPO's does not; its charges
are SEPO's, permuted within each group; and it is an experiment stage.

(Under `constant`, by contrast, the update equals payoff-only's for every batch, not only in
expectation: a group-constant term cancels in the group-relative advantage.)"""
from __future__ import annotations

import itertools

import numpy as np

from sepo.games import get_domain
from sepo.objective.attribution import exploitation_attribution
from sepo.objective.sepo import group_advantages, sepo_rewards
from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer
from tests.training.exact_updates import expand, match_rates, row_of, score, softmax


def _matches(trainer, table):
    """Every match of every rollout opponent: (opponent, probability, (U, E, C, X), its score)."""
    env, game = trainer.env, trainer.env.game
    charge = exploitation_attribution(table, env.solver.gradient(table), env.training_reach(table))
    events = get_domain(trainer.config.game).events
    found = []

    def leaf(node, decisions):
        utility = env.mixture.utility[node.opponent] * np.mean([r.payoffs[0] for r in node.state.rounds()])
        exploit = sum(charge[r, c] for r, c in decisions)
        collusion, externality = match_rates(env, game, events, node)
        found.append((node.opponent, node.p * env.mixture.size, (utility, exploit, collusion, externality),
                      sum(score(table, r, c) for r, c in decisions)))

    expand(game, table, row_of(env), env.rollout_opponents(table), (0,), leaf=leaf)
    return found


def _expected_update(trainer, table, mode):
    """Σ_opponent 1/K Σ over pairs of its matches p1·p2 · mean over both permutations of
    Σ_r A_r ∇log P(r), the advantages unscaled."""
    c = trainer.config
    total = np.zeros_like(table)
    matches = _matches(trainer, table)
    for o in range(trainer.env.mixture.size):
        mine = [m for m in matches if m[0] == o]
        for (_, p1, terms1, score1), (_, p2, terms2, score2) in itertools.product(mine, repeat=2):
            terms = np.array([terms1, terms2]).T
            for permutation in ([0, 1], [1, 0]):
                rewards = sepo_rewards(*terms, np.zeros(2, dtype=int), c.lambdas, trainer.scale, mode,
                                       permutation=np.array(permutation))
                advantages = group_advantages(rewards, np.zeros(2, dtype=int), "none")
                total += (
                    p1 * p2 / trainer.env.mixture.size * (advantages[0] * score1 + advantages[1] * score2) / 2
                )
    return total


def test_shuffled_expected_update_is_payoff_only_and_sepos_is_not(tmp_path):
    config = TabularSEPOConfig(
        game="ipd",
        game_params={"rounds": 2, "memory": 1},
        train_pool=["TFT", "Mixed(p=0.5)"],
        collusive_pool=["AlwaysCooperate"],
        exploiter_pool=["AlwaysDefect"],
        lambda_e=2.0,
        lambda_c=1.5,
        lambda_x=1.0,
        scale_rewards="none",
        steps=1,
    )
    trainer = TabularSEPOTrainer(config, tmp_path / "run")
    assert trainer.env.mixture.size == 5  # the collusive partner and the exploiter joined the rollouts
    table = softmax(np.random.default_rng(0).normal(size=trainer.legal.shape))
    none = _expected_update(trainer, table, "none")
    shuffled = _expected_update(trainer, table, "shuffled")
    per_rollout = _expected_update(trainer, table, "per-rollout")
    assert np.abs(none).max() > 1e-3
    assert np.allclose(shuffled, none, rtol=0, atol=1e-13), np.abs(shuffled - none).max()
    assert np.abs(per_rollout - none).max() > 1e-2


def test_a_training_steps_shuffled_charges_are_its_sepo_charges_permuted_in_each_group(tmp_path):
    config = TabularSEPOConfig(
        game="ipd",
        game_params={"rounds": 3, "memory": 1},
        lambda_e=2.0,
        lambda_c=1.0,
        lambda_x=1.0,
        penalty="shuffled",
        steps=1,
        groups=6,
        group_size=4,
    )
    trainer = TabularSEPOTrainer(config, tmp_path / "run")
    table = trainer.policy()
    rollouts = trainer.env.rollouts(table, 6, 4, np.random.default_rng(1))
    charge = trainer.attribution(table)
    exploit = (charge[rollouts.states, rollouts.actions] * rollouts.mask).sum(1)
    args = (
        rollouts.utility,
        exploit,
        rollouts.collusion,
        rollouts.externality,
        rollouts.groups,
        config.lambdas,
        trainer.scale,
    )
    own = trainer.scale * rollouts.utility - sepo_rewards(*args, "per-rollout")
    shuffled = trainer.scale * rollouts.utility - sepo_rewards(
        *args, "shuffled", rng=np.random.default_rng(2)
    )
    for g in range(6):
        mine = rollouts.groups == g
        assert np.allclose(np.sort(shuffled[mine]), np.sort(own[mine]), rtol=0, atol=1e-12)
        assert np.isclose(shuffled[mine].var(), own[mine].var(), rtol=0, atol=1e-12)


def test_shuffled_is_an_experiment_stage(tmp_path):
    from sepo.experiments.cells import expand as plan
    from sepo.experiments.config import PENALTY_OF_STAGE, validate_config

    config = validate_config(
        {
            "name": "x",
            "domains": [{"name": "kuhn", "lambdas": {"e": [1.0, 2.0]}}],
            "agents": [{"name": "tab", "kind": "tabular"}],
            "stages": ["grpo", "sepo", "shuffled"],
            "seeds": [0],
        }
    )
    cells = [cell for cell in plan(config).cells if cell.stage == "shuffled"]
    assert [cell.lambdas for cell in cells] == [(1.0, 0.0, 0.0), (2.0, 0.0, 0.0)]
    assert PENALTY_OF_STAGE["shuffled"] == "shuffled"
