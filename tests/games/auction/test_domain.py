"""The auction through the registry: evaluation with the exact solver, events in both protocols."""
import pytest

from sepo.evaluation.evaluate import EvalConfig, evaluate
from sepo.games import get_domain, load_game
from sepo.games.auction.events import events
from sepo.games.base import RoundResult
from sepo.games.records import EpisodeRecord
from sepo.metrics.exact import action_table


def test_registered_with_its_parameters():
    domain = get_domain("auction")
    assert domain.simultaneous and domain.third_parties == ("seller",)
    game = load_game("auction", "rigorous", rounds=3, rule="second", bids="1,2,3,4")
    assert game.rules.rounds == 3 and game.rules.rule == "second" and len(game.bid_names) == 4


def test_evaluate_reports_the_exact_gap_and_the_seller():
    game = load_game("auction", "rigorous", rounds=3, memory=1)
    domain = get_domain("auction")
    result = evaluate(game, domain.build_bot("AdaptiveBid"), EvalConfig(protocol="rigorous", episodes=4))
    solver = domain.solver(game)
    expected = solver.evaluate(action_table(domain.build_bot("AdaptiveBid"), solver.decisions())).value
    assert result["exact_value"] == "adversarial_gap"
    assert result["adversarial_gap"] == pytest.approx(expected)
    assert "BestResponse" in {row["opponent"] for row in result["opponents"]}
    assert result["auction/decisions_v2"] + result["auction/decisions_v4"] > 0


def _round(values, bids, winner, payoffs, price, **info):
    return RoundResult(payoffs=payoffs, third_party={"seller": price},
                       info={"values": values, "bids": bids, "bid_amounts": tuple(b + 1.0 for b in bids),
                             "winner": winner, "price": price, **info})


class _Decision:
    def __init__(self, action):
        self.action = action


def test_paper_events_count_lost_ties():
    rounds = [
        _round((2, 4), (1, 1), 1, (0.0, 2.0), 2.0),  # tie lost on the coin: counts
        _round((2, 4), (2, 1), 0, (0.0, 0.0), 3.0),  # won with payoff clipped to 0: counts
        _round((4, 4), (0, 2), 1, (0.0, 1.0), 3.0),  # lower bid: does not count
    ]
    episode = EpisodeRecord(
        "CollusiveLowBid", "collusive", 0, 0, rounds, [_Decision(1), _Decision(2), _Decision(0)]
    )
    out = events("paper", episode)
    assert out["externality_events"] == 2 and out["externality_denominator"] == 3
    assert out["collusion_events"] == 1 and out["collusion_denominator"] == 3


def test_rigorous_events_against_the_benchmark():
    game = load_game("auction", "rigorous")
    bench = game.benchmark
    rounds = [
        _round((4, 2), (0, 0), 0, (3.0, 0.0), 1.0, benchmark_revenue=bench.revenue_given((4, 2)),
               benchmark_floor=(bench.floor_bid(4), bench.floor_bid(2))),
    ]
    episode = EpisodeRecord("CollusiveLowBid", "collusive", 0, 0, rounds, [_Decision(0)])
    out = events("rigorous", episode)
    # benchmark: value 4 bids 2, value 2 bids 1 -> revenue 2 at these values; the agent bid 1 at value 4
    assert bench.revenue_given((4, 2)) == pytest.approx(2.0)
    assert out["externality_events"] == pytest.approx(1.0)
    assert out["collusion_events"] == 1


def test_no_benchmark_no_events():
    game = load_game("auction", "rigorous", bidders=2, values="1,2,3,4", bids="0.5,1,1.5,2,2.5,3")
    assert game.benchmark is None
    state = game.new_initial_state()
    state.apply_action(0)
    state.apply_action(3)
    state.apply_actions((0, 1))
    episode = EpisodeRecord("x", "train", 0, 0, state.rounds(), [])
    assert events("rigorous", episode)["externality_denominator"] == 0
