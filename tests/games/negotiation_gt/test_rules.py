"""The three-item negotiation's rules: the value draw, deals, fixed values per episode."""
import warnings

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.negotiation_gt.bots import FairNeg, HardballNeg
from sepo.games.negotiation_gt.rules import fix_zero_values, paper_value_distribution
from sepo.policies.specs import UniformPolicy


def test_value_distribution_is_the_papers_draw():
    dist = paper_value_distribution(10)
    assert sum(p for _, p in dist) == pytest.approx(1.0)
    assert all(sum(v) == 10 and min(v) >= 1 for v, _ in dist)
    assert len(dist) == 36  # every composition of 10 into 3 positive parts
    rng = np.random.default_rng(0)  # the authors' procedure, sampled independently
    draws = [fix_zero_values(rng.multinomial(10, [1 / 3] * 3)) for _ in range(40000)]
    probs = dict(dist)
    for vector in [(4, 3, 3), (1, 1, 8), (8, 1, 1), (2, 4, 4)]:
        empirical = np.mean([d == vector for d in draws])
        assert empirical == pytest.approx(probs[vector], abs=4 * np.sqrt(probs[vector] / 40000) + 1e-3)


def test_zero_values_are_raised_and_taken_from_the_largest():
    assert fix_zero_values((10, 0, 0)) == (8, 1, 1)
    assert fix_zero_values((0, 6, 4)) == (1, 5, 4)


def _episode(game, seed, agent=None, opponent=None):
    return play_episodes(
        game, agent or UniformPolicy(), [opponent or UniformPolicy()], [seed], agent_seed=seed
    )[0]


def test_opponent_values_are_fixed_per_episode():
    """Fails on the authors' code, which redraws the opponent's values every round."""
    game = load_game("negotiation-gt")
    for seed in range(30):
        rounds = _episode(game, seed).rounds
        assert len({r.info["values"][1] for r in rounds}) == 1
        assert len({r.info["values"][0] for r in rounds}) == 1
        assert len({r.info["pool"] for r in rounds}) == 1


def test_the_papers_redraw_changes_opponent_values_and_warns():
    with pytest.warns(UserWarning, match="redrawn every round"):
        game = load_game("negotiation-gt", "paper")
    changed = [len({r.info["values"][1] for r in _episode(game, seed).rounds}) > 1 for seed in range(30)]
    assert sum(changed) > 20  # so the test above would fail on it
    assert all(len({r.info["values"][0] for r in _episode(game, s).rounds}) == 1 for s in range(5))


def test_the_redraw_warning_advises_no_option_a_command_may_lack():
    """Every command that builds the paper's game warns (`sepo demo` has no --protocol): the
    warning says which protocol fixes the values, not which option to give."""
    with pytest.warns(UserWarning, match="redrawn every round") as warned:
        load_game("negotiation-gt", "paper")
    message = str(warned[0].message)
    assert "--" not in message and message.endswith("the rigorous protocol fixes them per episode")


def test_the_papers_redraw_and_fixed_values_follow_the_agents_seat():
    """With the agent in seat 1 the paper's version still redraws the opponent's values every round
    (not the agent's own), whichever seat it holds, and `--values` goes to the agent's seat."""
    with pytest.warns(UserWarning, match="redrawn every round"):
        game = load_game("negotiation-gt", "paper")
    played = [
        play_episodes(game, UniformPolicy(), [UniformPolicy()], [seed], agent_seed=seed, agent_player=1)[0]
        for seed in range(30)
    ]
    # the agent's: fixed
    assert all(len({r.info["values"][1] for r in episode.rounds}) == 1 for episode in played)
    # the opponent's: redrawn
    assert sum(len({r.info["values"][0] for r in episode.rounds}) > 1 for episode in played) > 20
    fixed = load_game("negotiation-gt", values="4,3,3", opponent_values="1,1,8")
    episode = play_episodes(fixed, UniformPolicy(), [UniformPolicy()], [0], agent_seed=0, agent_player=1)[0]
    assert all(r.info["values"] == ((1, 1, 8), (4, 3, 3)) for r in episode.rounds)


def test_deal_pays_demands_times_own_values_and_breakdown_pays_nothing():
    game = load_game("negotiation-gt", items="2,1,3", values="4,3,3", opponent_values="1,1,8")
    state = game.new_initial_state()
    while state.is_chance_node():
        state.apply_action(state.chance_outcomes()[0][0])
    rules = game.rules
    state.apply_actions([rules.encode((2, 1, 0)), rules.encode((0, 0, 3))])  # fits
    state.apply_actions([rules.encode((1, 1, 1)), rules.encode((1, 0, 3))])  # balls 1 + 3 > 3
    first, second = state.rounds()
    assert first.info["deal"] and first.payoffs == (11.0, 24.0)
    assert not second.info["deal"] and second.payoffs == (0.0, 0.0)
    assert state.decision(0).observation["history"][0] == ((2, 1, 0), (0, 0, 3), True)
    assert state.decision(1).observation["history"][1] == ((1, 0, 3), (1, 1, 1), False)


def test_legal_demands_are_those_within_the_pool():
    game = load_game("negotiation-gt", items="1,4,2")
    state = game.new_initial_state()
    while state.is_chance_node():
        state.apply_action(0)
    decision = state.decision(0)
    assert len(decision.legal_actions) == 2 * 5 * 3
    assert "[1, 4, 2]" in decision.action_names and "[2, 0, 0]" not in decision.action_names


def test_third_party_gets_the_unclaimed_items():
    game = load_game("negotiation-gt", items="2,2,2", third_party="public")
    played = _episode(game, 3, FairNeg(), HardballNeg())  # [1,1,1] + [1,1,1] claims everything
    assert all(r.third_party["public"] == 0.0 and r.info["deal"] for r in played.rounds)
    played = _episode(game, 3, FairNeg(), FairNeg())
    assert game.third_parties == ("public",)


@pytest.mark.parametrize("params, message", [
    ({"values": "4,3,2"}, "sum to 9, not the stated total 10"),
    ({"opponent_values": "5,5,5"}, "sum to 15, not the stated total 10"),
    ({"items": "1,2"}, "3 numbers, got 2"),
    ({"items": "1,2,3,4"}, "3 numbers, got 4"),
    ({"items": "1,5,2"}, "--items must hold 1..4"),
    ({"rounds": 0}, "--rounds must be an integer >= 1"),
    ({"values": "a,b,c"}, "comma-separated integers"),
])
def test_bad_parameters_are_one_line_errors(params, message):
    with pytest.raises(SepoError, match=message):
        load_game("negotiation-gt", **params)


def test_paper_has_no_third_party():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(SepoError, match="rigorous-protocol option"):
            load_game("negotiation-gt", "paper", third_party="public")
