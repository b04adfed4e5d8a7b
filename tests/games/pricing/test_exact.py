"""The exact solver, the training environments' exact expectations, and the bots, checked against
closed forms and played episodes."""
from __future__ import annotations

import numpy as np
import pytest

from sepo.evaluation.play import play_episodes
from sepo.games import get_domain, load_game
from sepo.games.pricing.exact import PricingSolver
from sepo.metrics.exact import action_table, audit_agent
from sepo.opponents.pools import parse_bot


def test_gap_of_the_competitive_bot_is_the_one_shot_best_response():
    game = load_game("pricing", rounds=4)
    solver = PricingSolver(game)
    bot = get_domain("pricing").build_bot("Competitive")
    found = audit_agent(game, bot, solver)
    m = game.stage_matrices(0)
    nash = int(np.argmax(action_table(bot, solver.decisions()[:1])[0]))
    assert found.result.exact
    assert found.result.value == pytest.approx(float((m["rival"][nash] - m["agent"][nash]).max()))
    assert found.result.br_payoff == pytest.approx(float(m["rival"][nash].max()))


def test_a_bot_is_solved_alike_on_its_declared_state_and_as_a_memory_one_table():
    game = load_game("pricing", rounds=5)
    solver = PricingSolver(game)
    bot = get_domain("pricing").build_bot("TitForTat")
    declared = audit_agent(game, bot, solver).result.value
    table = solver.evaluate(action_table(bot, solver.decisions())).value
    assert declared == pytest.approx(table, abs=1e-12)


def test_forward_pass_equals_played_episodes_against_deterministic_bots():
    from sepo.policies.tabular import TabularPolicy

    game = load_game("pricing", rounds=6)
    domain = get_domain("pricing")
    env = domain.training(game, [parse_bot("pricing", "GrimTrigger"), parse_bot("pricing", "Undercut")],
                          [parse_bot("pricing", "GrimTrigger")])
    agent = domain.build_bot("TitForTat")
    table = action_table(agent, env.solver.decisions())
    for rival in env.rivals:
        _, totals = env.forward(table, rival)
        played = play_episodes(
            game, TabularPolicy(table, env.keys), [domain.build_bot(rival.label)], [0], agent_seed=0
        )[0]
        assert totals[0] == pytest.approx(played.agent_payoffs.mean())
        assert totals[3] == pytest.approx(np.mean([r.info["delta"] for r in played.rounds]))


def test_training_reach_counts_visits_and_llm_values_match_the_forward_pass():
    game = load_game("pricing", rounds=3, prices=5)
    domain = get_domain("pricing")
    train = [parse_bot("pricing", name) for name in ("Competitive", "TitForTat", "GrimTrigger")]
    env = domain.llm_training(game, train, train[1:])
    rng = np.random.default_rng(0)
    table = rng.dirichlet(np.ones(game.k), size=len(env.solver.keys))
    assert env.training_reach(table).sum() == pytest.approx(game.rounds)
    values = env.action_values(table)
    for index, rival in enumerate(env.tabular.rollout_rivals(table)):
        _, totals = env.tabular.forward(table, rival)
        start = (table[0] * values[index][0][0, 0, :, 0]).sum()
        assert start == pytest.approx(totals[0] * game.rounds)


def test_rollouts_agree_with_the_exact_utility():
    game = load_game("pricing", rounds=4, prices=7)
    domain = get_domain("pricing")
    train = [parse_bot("pricing", name) for name in ("Competitive", "Undercut")]
    env = domain.training(game, train, [])
    table = np.full((len(env.keys), game.k), 1.0 / game.k)
    rollouts = env.rollouts(table, 4000, 2, np.random.default_rng(1))
    exact = env.exact_metrics(table)["utility"]
    assert rollouts.utility.mean() == pytest.approx(exact, abs=0.004)


class _Undeclared:
    """A bot that hides its memory, as a language model would."""

    classifier: dict = {}

    def __init__(self, bot):
        self.bot, self.name = bot, f"undeclared {bot.name}"

    def action_probabilities(self, decision):
        return self.bot.action_probabilities(decision)

    def batch_action_probabilities(self, decisions):
        return [self.bot.action_probabilities(d) for d in decisions]


@pytest.mark.parametrize("name", ["TitForTat", "GrimTrigger", "Uniform"])
def test_an_undeclared_agent_gets_a_lower_bound_exact_at_its_true_memory(name):
    from sepo.metrics.exact import exact_label

    game = load_game("pricing", rounds=6)
    solver = PricingSolver(game)
    bot = get_domain("pricing").build_bot(name)
    truth = audit_agent(game, bot, solver).result.value
    found = audit_agent(game, _Undeclared(bot), solver)
    assert exact_label(found.result) == "lower bound" and "lower bound" in found.result.method
    assert found.result.value <= truth + 1e-12
    # memory 1, deterministic: the projection's maximiser is the agent's, one path read
    if name == "TitForTat":
        assert found.result.value == pytest.approx(truth, abs=1e-12)
        assert found.result.extra["histories_read"] == game.rounds
    # it reads the whole history: the memory-1 projection's maximiser still nearly attains it
    elif name == "GrimTrigger":
        assert found.result.value == pytest.approx(truth, abs=0.02)
    else:  # 15 prices a period: branches below reach 1e-4 are counted at their worst, a looser bound
        assert found.result.extra["pruned_reach"] > 0


def test_llm_environment_reports_the_market_numbers_of_the_models_table():
    game = load_game("pricing", rounds=3, prices=5)
    domain = get_domain("pricing")
    train = [parse_bot("pricing", name) for name in ("Competitive", "TitForTat")]
    env = domain.llm_training(game, train, train[1:])
    table = np.random.default_rng(2).dirichlet(np.ones(game.k), size=len(env.solver.keys))
    found, tabular = env.exact_metrics(table), env.tabular.exact_metrics(table)
    assert (
        found["collusion_exact"] == tabular["collusion"]
        and found["externality_exact"] == tabular["externality"]
    )
    assert found["delta_collusive"] == tabular["delta_collusive"] and "consumer_surplus_train" in found


class _Sampled(_Undeclared):
    """The bot as a language model at temperature 1 would show it: its policy estimated from 10
    replies per state (here the bot's own distribution, so the numbers are the bot's)."""

    def estimate(self, decisions):
        from sepo.policies.text_policy import PolicyEstimate

        rows = []
        for d in decisions:
            probs = self.bot.action_probabilities(d)
            rows.append(np.array([[probs.get(a, 0.0) for a in d.legal_actions]]))
        return PolicyEstimate(list(decisions), rows, [np.array([10.0]) for _ in decisions], False, 10,
                              [0] * len(decisions), [1] * len(decisions))


def test_a_sampled_policys_lower_bound_is_labelled_a_point_estimate_without_an_interval():
    """The lower bound of an estimated policy is labelled a point estimate without an interval: the
    rival is chosen on the same sampled replies it is measured on, so neither the value nor a
    resampling interval bounds the truth."""
    from sepo.cli.audit import _exact_notes
    from sepo.metrics.exact import POINT_ESTIMATE_NOTE, SAMPLED_NOTE, exact_label

    game = load_game("pricing", rounds=6)
    solver = PricingSolver(game)
    bot = get_domain("pricing").build_bot("TitForTat")
    found = audit_agent(game, _Sampled(bot), solver)
    assert exact_label(found.result) == "lower bound" and found.interval is None
    assert (
        found.result.extra["point_estimate"] is True and "point estimate of the bound" in found.result.method
    )
    assert _exact_notes(found.result, found) == [POINT_ESTIMATE_NOTE] and SAMPLED_NOTE not in _exact_notes(
        found.result, found
    )
    plain = audit_agent(game, _Undeclared(bot), solver)  # an agent read exactly: a bound, no such label
    assert "point_estimate" not in plain.result.extra and "point estimate" not in plain.result.method
    assert found.result.value == pytest.approx(plain.result.value)
