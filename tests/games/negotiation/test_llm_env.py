"""Split bargaining's language-model training environment: exact payoffs to go, on-policy contexts."""
import numpy as np
import pytest

from sepo.games import get_domain
from sepo.games.credit import Charges
from sepo.games.negotiation.llm_env import DecisionContext, NegotiationLLMEnvironment
from sepo.opponents.pools import parse_bot


def environment(charges=Charges(), **params):
    domain = get_domain("negotiation")
    game = domain.game("rigorous", **params)
    pools = domain.pools("rigorous", game)
    return NegotiationLLMEnvironment(game, [parse_bot("negotiation", e) for e in pools["train"]],
                                     [parse_bot("negotiation", e) for e in pools["collusive"]], (), charges)


def test_payoff_to_go_from_the_start_is_the_exact_match_payoff():
    env = environment(rounds=3, breakdown_cost=0.5)
    table = np.random.default_rng(0).dirichlet(np.ones(9), size=len(env.solver.keys))
    per_opponent = env.tabular._train_forward(table)[1]
    rng = np.random.default_rng(1)
    for index, payoff in enumerate(per_opponent):
        context = DecisionContext(0, (), index)
        decision = env.training_decision(context, rng)
        expected = sum(table[0, a] * env.outcome(table, context, decision, a)[0] for a in range(9))
        assert expected == pytest.approx(env.weight[index] * payoff * env.game.rounds, abs=1e-12)
    maximiser = DecisionContext(0, (), len(per_opponent))
    assert env.outcome(table, maximiser, env.training_decision(maximiser, rng), 3) == (0.0, 0.0, 0.0)


def test_collusion_and_externality_of_one_demand_are_its_events_to_go():
    """A demand is charged the events of its round and of the rounds after it (Fair never reacts,
    so those are the uniform table's per-round events): the tabular trainer's whole-match events."""
    env = environment(charges=Charges(collusion=True, externality=True))
    table = np.full((len(env.solver.keys), 9), 1 / 9)
    fair = [bot.name for bot in env.tabular.opponents].index("Fair")
    c, x = env.tabular.mixture.collusion[fair], env.tabular.mixture.externality[fair]  # each event's credit
    greedy_rate, loss_rate = (float(np.mean(e)) for e in env.tabular.events(np.arange(9), np.full(9, 4)))
    for history, rest in (((), 3), (((4, 4),) * 3, 0)):
        context = DecisionContext(0, history, fair)
        decision = env.training_decision(context, np.random.default_rng(0))
        # demands 6 against Fair's 5: greedy, breakdown
        _, greedy, loss = env.outcome(table, context, decision, 5)
        assert greedy == pytest.approx(c * (1 + rest * greedy_rate))
        assert loss == pytest.approx(x * (1 + rest * loss_rate))
        _, greedy, loss = env.outcome(table, context, decision, 4)  # 5 + 5: a fair deal
        assert greedy == pytest.approx(c * rest * greedy_rate)
        assert loss == pytest.approx(x * rest * loss_rate)


def test_contexts_are_on_policy_decisions_with_prompts():
    env = environment()
    table = np.full((len(env.solver.keys), 9), 1 / 9)
    contexts = env.sample_contexts(table, 12, np.random.default_rng(2))
    assert len(contexts) >= 12 and {len(c.history) for c in contexts} == {0, 1, 2, 3}
    for context in contexts:
        decision = env.training_decision(context, np.random.default_rng(0))
        assert decision.info_key == env.solver.keys[context.info_row]
        assert "How many points do you demand (1-9)?" in env.game.text.user_prompt(decision)
