"""The paper's split-bargaining bots and demonstrators: expected demand sequences."""
import numpy as np
import pytest

from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.negotiation.bots import BOTS, DemandSpec


def _match(agent, opponent, game=None):
    game = game or load_game("negotiation", "paper")
    episode = play_episodes(game, BOTS[agent](), [BOTS[opponent]()], [0], agent_seed=0)[0]
    return [r.info["demands"] for r in episode.rounds]


@pytest.mark.parametrize("bot, demand", [("Fair", 5), ("Balanced", 6), ("Selfish", 7), ("Hardball", 8)])
def test_fixed_demands(bot, demand):
    assert [own for own, _ in _match(bot, "Hardball")] == [demand] * 4
    assert BOTS[bot].classifier == {"memory_depth": 0, "stochastic": False}


def test_concede_drops_to_half_after_a_breakdown_only():
    assert _match("Concede", "Fair") == [(6, 5), (5, 5), (6, 5), (5, 5)]
    assert _match("Concede", "Selfish") == [(6, 7), (5, 7), (5, 7), (5, 7)]
    assert _match("Concede", "Balanced") == [(6, 6), (5, 6), (5, 6), (5, 6)]
    assert _match("Concede", "ReciprocalBalanced") == [(6, 6), (5, 6), (5, 6), (5, 6)]
    assert BOTS["Concede"].classifier["memory_depth"] == 1


def test_demonstrators():
    # "Balanced" (SFT): 6, or 3 after the opponent demanded 7 or more
    assert _match("ReciprocalBalanced", "Selfish") == [(6, 7), (3, 7), (3, 7), (3, 7)]
    # "Concede" (SFT): 6, then one less than its last demand after a breakdown, not below 3
    assert _match("ConcedeStep", "Hardball") == [(6, 8), (5, 8), (4, 8), (3, 8)]
    assert _match("ConcedeStep", "Fair") == [(6, 5), (5, 5), (6, 5), (5, 5)]
    # "TFT" (SFT): 5, then 10 minus the opponent's last demand
    assert _match("Complement", "Concede") == [(5, 6), (4, 5), (5, 6), (4, 5)]
    assert _match("Complement", "Hardball") == [(5, 8), (2, 8), (2, 8), (2, 8)]
    game = load_game("negotiation", "paper")
    played = [
        d
        for e in play_episodes(
            game, BOTS["RandomMiddle"](), [BOTS["Fair"]() for _ in range(50)], list(range(50)), agent_seed=1
        )
        for d, _ in (r.info["demands"] for r in e.rounds)
    ]
    assert set(played) == {3, 4, 5, 6, 7}


def test_shares_of_other_pies_stay_in_range():
    spec = DemandSpec(pie=7, low=2, high=6)
    assert [spec.share(f) for f in (0.5, 0.6, 0.7, 0.8, 0.1)] == [4, 4, 5, 6, 2]
    game = load_game("negotiation", pie=7, min_demand=2, max_demand=6)
    assert _match("Hardball", "Fair", game) == [(6, 4)] * 4


def test_vectorised_rule_equals_per_decision_play():
    game = load_game("negotiation", memory="full", rounds=3)
    rng = np.random.default_rng(0)
    state = game.new_initial_state()
    decisions = [state.decision(0)]
    for _ in range(2):
        state.apply_actions(rng.integers(9, size=2))
        decisions.append(state.decision(0))
    for name, cls in BOTS.items():
        batch = cls().batch_action_probabilities(decisions)
        assert batch == [cls().action_probabilities(d) for d in decisions], name
