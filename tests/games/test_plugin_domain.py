"""A domain plugs in without touching generic code: a test registers repeated matching pennies
(simultaneous moves) and audits and trains it through the public API and the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from sepo.errors import SepoError
from sepo.evaluation.evaluate import EvalConfig, evaluate
from sepo.games import get_domain, load_game, register
from sepo.games.registry import unregister
from sepo.policies.specs import load_agent
from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer, load_run_policy
from tests.games import pennies


@pytest.fixture
def registered():
    register(pennies.DOMAIN)
    yield pennies.DOMAIN
    unregister("pennies")


def test_registry_refuses_a_duplicate_and_lists_known_names(registered):
    with pytest.raises(ValueError, match="already registered"):
        register(pennies.DOMAIN)
    with pytest.raises(SepoError, match=r"known games: ([\w-]+, )*kuhn, ([\w-]+, )*pennies"):
        get_domain("penies")
    with pytest.raises(SepoError, match="did you mean pennies"):
        get_domain("penies")


def test_audit_uniform_and_a_pure_agent(registered):
    game = load_game("pennies", rounds=4)
    uniform = evaluate(game, load_agent("uniform", game), EvalConfig(episodes=40, replicates=50))
    assert uniform["exploitability"] == pytest.approx(0.0)
    assert uniform["collusion"] == pytest.approx(0.5, abs=0.2)
    assert uniform["externality"] is None  # denominator 0: does not apply
    heads = evaluate(game, load_agent("bot:AlwaysHeads", game), EvalConfig(episodes=40, replicates=50))
    assert heads["exploitability"] == pytest.approx(1.0) and heads["br_payoff"] == pytest.approx(1.0)
    assert heads["utility_exact"] == pytest.approx((1.0 + 0.4) / 2)  # vs AlwaysHeads, vs Biased(0.7)
    assert heads["utility"] == pytest.approx(heads["utility_exact"], abs=0.15)
    best = [row for row in heads["opponents"] if row["opponent"] == "BestResponse"][0]
    # the solver's BR plays and wins
    assert best["opponent_per_round"] == 1.0 and best["agent_per_round"] == -1.0
    copycat = [row for row in heads["opponents"] if row["opponent"] == "Copycat"][0]
    assert copycat["agent_per_round"] == 1.0  # Copycat copies HEADS: the matcher always matches
    assert heads["pennies/heads_rate"] == 1.0
    assert heads["safety_uses"] == "exploitability (exact)"


def test_sepo_trains_the_plugin_to_safety_and_payoff_only_grpo_does_not(registered, tmp_path):
    common = {"game": "pennies", "game_params": {"rounds": 2}, "steps": 150, "groups": 16, "group_size": 4,
              "train_pool": ["AlwaysHeads"], "collusive_pool": [], "seed": 0}
    sepo = TabularSEPOTrainer(
        TabularSEPOConfig(penalty="per-rollout", lambda_e=5.0, **common), tmp_path / "sepo"
    ).train()
    grpo = TabularSEPOTrainer(TabularSEPOConfig(penalty="none", **common), tmp_path / "none").train()
    assert sepo["exploitability"] < 0.15
    assert grpo["exploitability"] > 0.8 and grpo["utility"] > sepo["utility"]
    policy = load_run_policy(tmp_path / "none")
    assert policy.keys == ("r0", "r1") and policy.table[:, 0].min() > 0.9  # learned to match AlwaysHeads


def test_constant_penalty_equals_none_in_the_plugin(registered, tmp_path):
    common = {"game": "pennies", "steps": 20, "groups": 8, "group_size": 4, "seed": 1, "lambda_c": 1.0}
    none = TabularSEPOTrainer(TabularSEPOConfig(penalty="none", **common), tmp_path / "n")
    constant = TabularSEPOTrainer(
        TabularSEPOConfig(penalty="constant", lambda_e=3.0, **common), tmp_path / "c"
    )
    none.train()
    constant.train()
    assert np.max(np.abs(none.logits - constant.logits)) <= 1e-9


def test_the_cli_audits_and_exploits_the_plugin(registered, tmp_path):
    from sepo.cli.main import app

    runner = CliRunner()
    result = runner.invoke(app, ["exploit", "--game", "pennies", "--agent", "bot:Biased(p=0.8)", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["exploitability"] == pytest.approx(0.6) and out["exact"] is True
    result = runner.invoke(
        app, ["eval", "--game", "pennies", "--agent", "uniform", "--episodes", "10", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["game"] == "pennies"
    result = runner.invoke(app, ["exploit", "--game", "pennies", "--agent", "nash"])
    assert result.exit_code == 2 and "unknown agent spec 'nash'" in result.stderr
    result = runner.invoke(app, ["eval", "--game", "pennies", "--agent", "uniform", "--hands", "3"])
    assert result.exit_code == 2 and "--hands does not apply to game 'pennies'" in result.stderr
