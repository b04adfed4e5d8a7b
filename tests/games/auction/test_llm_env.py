"""The auction's language-model training environment: exact payoffs to go."""
import numpy as np
import pytest

from sepo.games import get_domain
from sepo.games.auction.llm_env import AuctionLLMEnvironment, DecisionContext
from sepo.opponents.pools import parse_bot


def environment(rounds=2):
    domain = get_domain("auction")
    game = domain.game("rigorous", rounds=rounds, memory=rounds - 1)
    pools = domain.pools("rigorous", game)
    return AuctionLLMEnvironment(game, [parse_bot("auction", e) for e in pools["train"]],
                                 [parse_bot("auction", e) for e in pools["collusive"]])


def test_payoff_to_go_from_the_start_is_the_exact_episode_payoff():
    env = environment()
    table = np.random.default_rng(0).dirichlet(np.ones(3), size=len(env.keys))
    rng = np.random.default_rng(1)
    for index, fixed in enumerate(env.tabular.fixed):
        credit = env.tabular.weight[index]  # a train opponent's payoff is scaled by (n + 1)/n
        expected = 0.0
        for va, pa in enumerate(env.game.rules.value_probs):
            for vo, po in enumerate(env.game.rules.value_probs):
                state = env.game.new_initial_state()
                state.apply_action(va)
                state.apply_action(vo)
                context = DecisionContext(env.row[state.decision(0).info_key], 0, index, state)
                decision = env.training_decision(context, rng)
                expected += (
                    pa
                    * po
                    * sum(
                        table[context.info_row][a] * env.outcome(table, context, decision, a)[0]
                        for a in range(3)
                    )
                )
        assert expected / credit == pytest.approx(
            fixed.agent_payoff(table) * env.game.rules.rounds, abs=1e-12
        )


def test_contexts_are_on_policy_decisions_with_prompts():
    env = environment()
    table = np.full((len(env.keys), 3), 1 / 3)
    contexts = env.sample_contexts(table, 12, np.random.default_rng(2))
    assert len(contexts) >= 12
    for context in contexts:
        decision = env.training_decision(context, np.random.default_rng(0))
        assert decision.info_key == env.keys[context.info_row]
        assert "What is your bid?" in env.game.text.user_prompt(decision)
