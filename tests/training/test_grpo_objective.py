"""One objective for both trainers in repeated games: the language-model trainer's exact expected
update (its charge, payoff to go, events to go and reward, on a table standing in for the model's
played policy) equals the finite-difference gradient of s·(u − λe·e) − λc·c − λx·x and the tabular
trainer's update on the same table, in the IPD, the auction and split bargaining at T = 2, 3 and 4
rounds; c and x are the expected rates per round of evaluation's `events`.

Before the fix the completion's charge was divided by ρ(I), the visits per match, while a
completion meets I with probability ρ(I)/T: the update ascended s·(u − (λe/T)·e). Its collusion and
externality were the events of its own round only, so the events an opponent's later reaction
causes (TFT defecting after the agent's DEFECT, and the agent answering) were the tabular
trainer's but not its own."""
from __future__ import annotations

import numpy as np
import pytest

from sepo.games import get_domain
from sepo.games.records import MatchContext
from sepo.objective.attribution import exploitation_attribution
from sepo.training.grpo import LLMSEPOConfig, SEPOEnvironment
from tests.training.exact_updates import (
    expected_rates,
    llm_update,
    objective_gradient,
    softmax,
    tabular_update,
)

LAMBDA_E, LAMBDA_C, LAMBDA_X = 5.0, 0.7, 1.3

CASES = {
    # case: (game, parameters, train pool, its collusive partners, the environments' seats)
    "ipd": ("ipd", {"memory": 1}, ["TFT", "GrimTrigger", "Mixed(p=0.5)"], ["TFT"], (0,)),
    # the bots alone leave keys unreached
    "ipd-unreached": ("ipd", {"memory": 2}, ["TFT", "GrimTrigger"], ["GrimTrigger"], (0,)),
    "negotiation": (
        "negotiation",
        {"pie": 3, "min_demand": 1, "max_demand": 2, "memory": 1},
        ["Fair", "Hardball"],
        ["Fair"],
        (0,),
    ),
    "auction": (
        "auction",
        {"values": "4", "bids": "1,2"},
        ["TruthfulBid", "CollusiveLowBid"],
        ["CollusiveLowBid"],
        (0, 1),
    ),
}


def environment(case, rounds, **overrides):
    game, params, pool, collusive, seats = CASES[case]
    params = {**params, "rounds": rounds, **({"memory": rounds - 1} if game == "auction" else {})}
    config = LLMSEPOConfig(
        model="none",
        game=game,
        game_params=params,
        train_pool=pool,
        collusive_pool=collusive,
        lambda_e=LAMBDA_E,
        lambda_c=LAMBDA_C,
        lambda_x=LAMBDA_X,
        seed=0,
        **overrides,
    )
    return SEPOEnvironment(config, None, None), seats


def context_of(game, env):
    if game == "auction":
        from sepo.games.auction.llm_env import DecisionContext

        return lambda node: DecisionContext(
            env.row[node.state.decision(node.seat).info_key], node.seat, node.opponent, node.state.clone()
        )
    rows = {key: i for i, key in enumerate(env.solver.keys)}
    return lambda node: MatchContext(
        rows[node.state.decision(node.seat).info_key], node.history, node.opponent
    )


@pytest.mark.parametrize("case, rounds", [
    # 10-30 s
    pytest.param(case, rounds, marks=[pytest.mark.slow] if (case, rounds) == ("auction", 4) else [])
    for case in sorted(CASES) for rounds in (2, 3, 4)])
def test_expected_update_of_both_trainers_is_the_gradient_of_the_objective(case, rounds):
    game = CASES[case][0]
    sepo, seats = environment(case, rounds)
    domain_env, tabular = sepo.domain_env, sepo.domain_env.tabular
    events = get_domain(game).events
    assert domain_env.rounds_per_rollout == rounds
    logits = np.random.default_rng(rounds).normal(
        size=(len(sepo.canonical), max(len(d.legal_actions) for d in sepo.canonical))
    )
    table = softmax(logits)
    opponents = tabular.rollout_opponents(table)
    lambdas = sepo.config.lambdas

    def payoff_and_gap(t):
        return sepo.scale * (
            domain_env.exact_metrics(t)["utility_exact"] - LAMBDA_E * sepo.solver.evaluate(t).value
        )

    # (c, x) of a table against `table`'s opponents (the maximiser carries no events)
    collusion, externality = objective_gradient(
        expected_rates(tabular, sepo.game, events, table, opponents, seats), logits
    )
    assert np.abs(collusion).max() > 1e-2 and np.abs(externality).max() > 1e-2
    target = objective_gradient(payoff_and_gap, logits) - LAMBDA_C * collusion - LAMBDA_X * externality
    language = llm_update(sepo, table, lambdas, context_of(game, domain_env), opponents, seats)
    charge = exploitation_attribution(table, tabular.solver.gradient(table), tabular.training_reach(table))
    exact = tabular_update(tabular, sepo.game, table, lambdas, opponents, charge, seats, events)
    assert np.abs(target).max() > 1e-2
    assert np.allclose(exact, target, rtol=0, atol=1e-7), np.abs(exact - target).max()
    assert np.allclose(language, target, rtol=0, atol=1e-7), np.abs(language - target).max()

    # the exploitability term alone: λe·∇e, not λe·∇e/T
    payoff_only = llm_update(sepo, table, type(lambdas)(), context_of(game, domain_env), opponents, seats)
    exploit_only = llm_update(
        sepo, table, type(lambdas)(e=LAMBDA_E), context_of(game, domain_env), opponents, seats
    )
    gap = objective_gradient(lambda t: sepo.solver.evaluate(t).value, logits)
    assert np.allclose((payoff_only - exploit_only) / (LAMBDA_E * sepo.scale), gap, rtol=0, atol=1e-7)
