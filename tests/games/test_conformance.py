"""Conformance of every registered domain (and the test's plug-in) to the game API, text, bot and
solver contracts, through the registry only (code-shape change 5)."""
from __future__ import annotations

import numpy as np
import pytest

from sepo.evaluation.play import play_episodes
from sepo.games import domain_names, get_domain, register
from sepo.games.base import SIMULTANEOUS
from sepo.games.registry import unregister
from sepo.metrics.exact import action_table, solver_for, uniform_table
from sepo.opponents.pools import BEST_RESPONSE, default_pools
from sepo.policies.tabular import TabularPolicy
from tests.games import pennies

DOMAINS = [*domain_names(), "pennies", "openspiel:kuhn_poker", "openspiel:liars_dice(dice_sides=3)",
           "openspiel:goofspiel(num_cards=3,imp_info=True)", "openspiel:matrix_pd"]


@pytest.fixture(params=DOMAINS)
def domain(request):
    if request.param == "pennies":
        register(pennies.DOMAIN)
        yield pennies.DOMAIN
        unregister("pennies")
    else:
        yield get_domain(request.param)


def _playouts(game, episodes: int, seed: int):
    """Uniformly random play; yields (state before the move, decisions at it)."""
    rng = np.random.default_rng(seed)
    for _ in range(episodes):
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                outcomes = state.chance_outcomes()
                probs = np.array([p for _, p in outcomes])
                assert np.all(probs >= 0) and probs.sum() == pytest.approx(1.0)
                state.apply_action(outcomes[rng.choice(len(outcomes), p=probs)][0])
                continue
            players = state.acting_players()
            assert players and all(0 <= p < state.num_players() for p in players)
            decisions = [state.decision(p) for p in players]
            yield state, decisions
            actions = [d.legal_actions[rng.integers(len(d.legal_actions))] for d in decisions]
            if state.current_player() == SIMULTANEOUS:
                state.apply_actions(actions)
            else:
                assert len(players) == 1
                state.apply_action(actions[0])
        yield state, []


@pytest.mark.parametrize("protocol", ["rigorous", "paper"])
def test_random_playouts_follow_the_game_api(domain, protocol):
    game = domain.game(protocol)
    assert game.name == domain.name and game.num_players >= 2
    rng = np.random.default_rng(1)
    for state, decisions in _playouts(game, 20, seed=0):
        for d in decisions:
            assert d.legal_actions and len(d.action_names) == len(d.legal_actions) == len(
                set(d.legal_actions)
            )
        if not decisions:  # terminal
            rounds = state.rounds()
            assert rounds
            totals = np.sum([r.payoffs for r in rounds], axis=0)
            assert np.allclose(state.returns(), totals)
            for r in rounds:
                assert len(r.payoffs) == game.num_players
                assert set(r.third_party) <= set(game.third_parties)
                if game.zero_sum:
                    assert sum(r.payoffs) == pytest.approx(0.0)
            continue
        if rng.random() < 0.3:  # a clone moves on alone
            clone = state.clone()
            before = (state.current_player(), len(state.rounds()), [d.info_key for d in decisions])
            for _, later in _playouts_from(clone, rng):
                pass
            assert clone.is_terminal()
            assert (
                state.current_player(),
                len(state.rounds()),
                [state.decision(d.player).info_key for d in decisions],
            ) == before


def _playouts_from(state, rng):
    while not state.is_terminal():
        if state.is_chance_node():
            outcomes = state.chance_outcomes()
            state.apply_action(outcomes[rng.integers(len(outcomes))][0])
            continue
        decisions = [state.decision(p) for p in state.acting_players()]
        actions = [d.legal_actions[0] for d in decisions]
        if state.current_player() == SIMULTANEOUS:
            state.apply_actions(actions)
        else:
            state.apply_action(actions[0])
        yield state, decisions


@pytest.mark.parametrize("protocol", ["rigorous", "paper"])
def test_text_round_trip(domain, protocol):
    game = domain.game(protocol)
    text = game.text
    assert text.system_prompt().strip()
    for _, decisions in _playouts(game, 10, seed=2):
        for d in decisions:
            assert text.user_prompt(d).strip()
            for action in d.legal_actions:
                assert text.parse(text.answer_text(d, action), d).action == action
                reply = text.canonical_reply(d, action)
                assert text.parse(reply, d).action == action
                assert reply.endswith(text.answer_text(d, action))


def test_strict_parsers_read_the_answer_after_the_reasoning(domain):
    """docs/parsing.md steps 1-2 in every domain's own parser (the plug-in's is its own): the last
    non-empty line after the last `</think>`; a reply inside an open `<think>` is truncated."""
    if domain.name == "pennies":
        pytest.skip("the plug-in's parser is its own")
    game = domain.game("rigorous")
    text = game.text
    for _, decisions in _playouts(game, 3, seed=4):
        for d in decisions:
            action, other = d.legal_actions[0], d.legal_actions[-1]
            answer = text.answer_text(d, action)
            assert (
                text.parse(f"<think>{text.answer_text(d, other)}</think>\n{answer}\n\n", d).action == action
            )
            assert text.parse(f"<think>\n{answer}", d).status == "truncated"
            assert text.parse("<think>x</think>\n  \n", d).status == "no_action"


def test_bots_keep_the_contract(domain):
    game = domain.game()
    decisions = [d for _, ds in _playouts(game, 10, seed=3) for d in ds]
    for name, factory in domain.bots().items():
        bot = factory()
        assert isinstance(bot.classifier, dict) and "stochastic" in bot.classifier, name
        bot.reset()
        for d in decisions:
            probs = bot.action_probabilities(d)
            assert set(probs) == set(d.legal_actions), (name, d.info_key)
            values = np.array(list(probs.values()))
            assert np.all(values >= 0) and values.sum() == pytest.approx(1.0), (name, d.info_key)
            if not bot.classifier["stochastic"]:
                assert set(np.round(values, 12)) <= {0.0, 1.0}, (name, d.info_key)


@pytest.mark.parametrize("protocol", ["rigorous", "paper"])
def test_paper_pools_parse(domain, protocol):
    pools = default_pools(domain.name, protocol)
    assert pools["train"]
    has_best_response = any(spec.name == BEST_RESPONSE for spec in pools["exploiter"])
    assert has_best_response == (
        protocol == "rigorous" and (domain.solver is not None or domain.lower_bound is not None)
    )


def _agents(domain, game, decisions):
    pool = default_pools(domain.name)["train"]
    return {"uniform": uniform_table(decisions), pool[0].label: action_table(pool[0].build(game), decisions)}


def test_exact_solver_gradient_is_the_derivative_of_its_value(domain):
    game = domain.game()
    solver = solver_for(game)
    if solver is None:
        pytest.skip(f"{domain.name} has no exact solver")
    decisions = solver.decisions()
    assert len({d.info_key for d in decisions}) == len(decisions)
    rng = np.random.default_rng(4)
    legal = np.zeros_like(uniform_table(decisions), dtype=bool)
    for r, d in enumerate(decisions):
        legal[r, : len(d.legal_actions)] = True
    table = np.where(legal, rng.dirichlet(np.ones(legal.shape[1]), size=len(decisions)), 0.0)
    table /= table.sum(1, keepdims=True)
    direction = np.where(legal, rng.normal(size=table.shape), 0.0)
    # rows keep summing to 1
    direction -= legal * (direction.sum(1, keepdims=True) / legal.sum(1, keepdims=True))
    eps = 1e-6
    numeric = (
        solver.evaluate(table + eps * direction).value - solver.evaluate(table - eps * direction).value
    ) / (2 * eps)
    assert numeric == pytest.approx(float((solver.gradient(table) * direction).sum()), abs=1e-6)


def _earned(game, agent, opponents, seeds):
    """Per-episode mean per round of the opponents' payoff and of their lead over the agent."""
    played = play_episodes(game, agent, opponents, seeds, agent_seed=9)
    earned = np.array([e.opponent_payoffs.mean() for e in played])
    lead = np.array([(e.opponent_payoffs - e.agent_payoffs).mean() for e in played])
    return earned, lead


def _bound(samples) -> float:
    return 4 * samples.std() / np.sqrt(len(samples)) + 1e-9


def test_exact_solver_best_response_earns_its_value_and_no_pool_bot_beats_it(domain):
    """Zero-sum: the best response earns `br_payoff` (= exploitability). General-sum: the
    maximiser of the gap leads the agent by `value` per round. No pool bot does better on either."""
    game = domain.game()
    solver = solver_for(game)
    if solver is None:
        pytest.skip(f"{domain.name} has no exact solver")
    decisions = solver.decisions()
    keys = tuple(d.info_key for d in decisions)
    specs = {
        s.label: s for pool in default_pools(domain.name).values() for s in pool if s.name != BEST_RESPONSE
    }
    seeds = list(range(200))
    for label, table in _agents(domain, game, decisions).items():
        result = solver.evaluate(table)
        assert result.value >= -1e-9 and result.pruning_bound >= 0 and result.method
        assert result.value_name in ("exploitability", "adversarial_gap")
        agent = TabularPolicy(table, keys, name=label)
        response = solver.best_response(table)
        earned, lead = _earned(game, agent, [response] * len(seeds), seeds)
        if result.value_name == "exploitability":
            assert earned.mean() == pytest.approx(result.br_payoff, abs=_bound(earned)), label
            assert result.br_payoff == pytest.approx(result.value)
        else:
            assert lead.mean() == pytest.approx(result.value, abs=_bound(lead)), label
        if label != "uniform":
            continue
        for spec in specs.values():
            earned, lead = _earned(game, agent, [spec.build(game) for _ in seeds[:100]], seeds[:100])
            assert earned.mean() <= result.br_payoff + _bound(earned), (label, spec.label)
            if result.value_name == "adversarial_gap":
                assert lead.mean() <= result.value + _bound(lead), (label, spec.label)
