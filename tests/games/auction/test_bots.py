"""The paper's auction bots and demonstrators, and the pools as data."""
import pytest

from sepo.games.auction.bots import BOTS, bot_table
from sepo.games.auction.pools import POOL_VERSIONS, pools
from sepo.games.auction.rules import make_game


def decision(protocol="paper", value=0, history=()):
    """Player 0's decision after rounds `history` [(values, bids, tie winner)] and value index `value`."""
    game = make_game(protocol)
    state = game.new_initial_state()
    for values, bids in history:
        for v in values:
            state.apply_action(v)
        state.apply_actions(bids)
        if bids[0] == bids[1]:
            state.apply_action(0)
    state.apply_action(value)
    state.apply_action(0)
    return state.decision(0)


@pytest.mark.parametrize("name, probs", [
    ("TruthfulBid", {0: 0.5, 1: 0.5, 2: 0.0}),
    ("AggressiveBid", {0: 0.0, 1: 0.0, 2: 1.0}),
    ("ConservativeBid", {0: 1.0, 1: 0.0, 2: 0.0}),
    ("ShadedBid", {0: 1.0, 1: 0.0, 2: 0.0}),
    ("CollusiveLowBid", {0: 1.0, 1: 0.0, 2: 0.0}),
    ("AdaptiveBid", {0: 0.0, 1: 1.0, 2: 0.0}),
])
def test_paper_bots_first_round(name, probs):
    for value in (0, 1):
        assert BOTS[name]().action_probabilities(decision(value=value)) == probs


@pytest.mark.parametrize("other_bid, expected", [(0, 1), (1, 2), (2, 2)])
def test_adaptive_bids_one_above_the_last_other_bid(other_bid, expected):
    d = decision(history=[((0, 0), (1, other_bid))])
    assert BOTS["AdaptiveBid"]().action_probabilities(d)[expected] == 1.0


@pytest.mark.parametrize("name, value, history, bid", [
    ("ValueBid", 0, [], 0), ("ValueBid", 1, [], 1),
    ("AggressiveValue", 0, [], 0), ("AggressiveValue", 1, [], 2),
    ("AdaptiveValue", 1, [], 1),
    ("AdaptiveValue", 1, [((0, 0), (0, 2)), ((0, 0), (0, 2))], 2),  # opponent mean 3 >= 2.5
    ("AdaptiveValue", 1, [((0, 0), (0, 1)), ((0, 0), (0, 1))], 1),  # mean 2 -> ValueBid
    ("AdaptiveValue", 0, [((0, 0), (0, 2))], 0),
])
def test_demonstrators(name, value, history, bid):
    probs = bot_table()[name]().action_probabilities(decision(value=value, history=history))
    assert probs[bid] == 1.0


def test_adaptive_value_midpoint():
    probs = bot_table()["AdaptiveValue"]().action_probabilities(
        decision(value=1, history=[((0, 0), (0, 2)), ((0, 0), (0, 1))])
    )
    assert probs[2] == 1.0


def test_pools_both_versions():
    assert pools("paper")["train"] == ["TruthfulBid", "ConservativeBid", "ShadedBid", "AdaptiveBid"]
    assert pools("paper")["exploiter"] == ["AggressiveBid"]
    game = make_game("paper", pool_version="results")
    assert pools("paper", game)["exploiter"] == ["AggressiveBid", "AdaptiveBid"]
    assert set(POOL_VERSIONS) == {"writeup", "results"}
    for version in POOL_VERSIONS.values():
        assert version["collusive"] == ["CollusiveLowBid"]
        assert all(name in BOTS for entries in version.values() for name in entries)


@pytest.mark.parametrize("old, new", [("f55cf307", "writeup"), ("1dbd7c2d", "results")])
def test_a_pool_versions_former_name_still_works_with_a_deprecation_note(old, new):
    with pytest.warns(FutureWarning, match=f"--pool-version {old} is deprecated .*use --pool-version {new}"):
        game = make_game("paper", pool_version=old)
    assert game.pool_version == new
    assert pools("paper", game) == pools("paper", make_game("paper", pool_version=new))
