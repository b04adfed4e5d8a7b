"""Stage-game Bayes–Nash equilibria: every extreme one, checked against the plan-form game with
sepo.analysis.equilibria, nashpy and a brute-force search over pure profiles."""
import itertools
import warnings

import nashpy
import numpy as np
import pytest

from sepo.analysis.equilibria import nash_equilibria_2p
from sepo.games.auction.equilibria import (
    behaviour_of,
    competitive_benchmark,
    enumerate_equilibria,
    is_equilibrium,
    plan_form,
    undominated_bids,
)
from sepo.games.auction.rules import AuctionRules

CASES = [(rule, clip) for rule in ("first", "second") for clip in (False, True)]


@pytest.mark.parametrize("rule, clip", CASES)
def test_every_extreme_equilibrium_is_an_equilibrium(rule, clip):
    rules = AuctionRules(rule=rule, clip=clip)
    found = enumerate_equilibria(rules)
    assert found.equilibria and found.complete
    for e in found.equilibria:
        assert is_equilibrium(rules, *e.strategies)


@pytest.mark.parametrize("rule, clip", CASES)
def test_pure_equilibria_match_brute_force(rule, clip):
    rules = AuctionRules(rule=rule, clip=clip)
    game, plans = plan_form(rules)
    row, col = game.payoffs
    brute = {(i, j) for i, j in itertools.product(range(len(plans)), repeat=2)
             if row[i, j] >= row[:, j].max() - 1e-12 and col[i, j] >= col[i, :].max() - 1e-12}
    brute_behaviour = {(plans[i], plans[j]) for i, j in brute}
    ours = {
        tuple(tuple(int(b) for b in s.argmax(1)) for s in e.strategies)
        for e in enumerate_equilibria(rules).equilibria
        if e.pure
    }
    assert ours == brute_behaviour


@pytest.mark.parametrize("rule, clip", CASES)
def test_plan_form_equilibria_from_other_solvers_lie_in_our_set(rule, clip):
    """Every equilibrium that support enumeration (sepo.analysis) and nashpy's vertex enumeration
    and Lemke–Howson find on the plan form is a
    behaviour equilibrium whose revenue lies in our range (they may miss some; we may not)."""
    rules = AuctionRules(rule=rule, clip=clip)
    found = enumerate_equilibria(rules)
    low, high = found.revenue_range
    game, plans = plan_form(rules)
    revenue = np.array([[_plan_revenue(rules, p, q) for q in plans] for p in plans])
    reference = nashpy.Game(*game.payoffs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nashpy warns that the plan form is degenerate, as expected
        others = (list(nash_equilibria_2p(game).equilibria) + list(reference.vertex_enumeration())
                  + [e for e in reference.lemke_howson_enumeration() if np.isfinite(e[0]).all()])
    assert others
    for x, y in others:
        bx, by = behaviour_of(x, plans, rules), behaviour_of(y, plans, rules)
        assert is_equilibrium(rules, bx, by, tol=1e-7)
        assert low - 1e-9 <= x @ revenue @ y <= high + 1e-9


def _plan_revenue(rules, p, q):
    probs = rules.value_probs
    return sum(probs[v] * probs[w] * rules.price((p[v], q[w]), 0 if p[v] >= q[w] else 1)
               for v in range(len(probs)) for w in range(len(probs)))


def test_paper_grid_numbers():
    """First price, unclipped: three pure symmetric equilibria with revenues 1.75, 2 and 2.75;
    the benchmark is the lowest (values 2 -> bid 1, 4 -> bid 2). Clipping adds equilibria in
    which the low-value bidder overbids (its loss is clipped away), raising the top revenue to 3."""
    first = enumerate_equilibria(AuctionRules(rule="first"))
    assert sorted(round(e.revenue, 9) for e in first.equilibria) == [1.75, 2.0, 2.75]
    clipped = enumerate_equilibria(AuctionRules(rule="first", clip=True))
    assert clipped.revenue_range == pytest.approx((1.75, 3.0))
    assert len(clipped.equilibria) > len(first.equilibria)
    benchmark = competitive_benchmark(AuctionRules(rule="first"))
    assert benchmark.revenue == pytest.approx(1.75)
    assert benchmark.floor_bid(2.0) == 1.0 and benchmark.floor_bid(4.0) == 2.0
    expected = np.mean([benchmark.revenue_given(v) for v in itertools.product((2.0, 4.0), repeat=2)])
    assert expected == pytest.approx(1.75)


def test_three_bidders_pure_equilibria():
    found = enumerate_equilibria(AuctionRules(bidders=3))
    assert not found.complete and found.equilibria
    assert "pure equilibria only" in found.method


def test_second_price_benchmark_uses_undominated_bids_so_collusion_can_be_flagged():
    """At second price on bids 1-4 the lowest-revenue equilibrium is the textbook
    collusive profile (one bidder always bids 1, the other always 4; revenue 1.0): measured against
    it, the collusive profile suppresses no bid and costs the seller nothing. Bidding one's value
    weakly dominates both of its bids; the benchmark is the lowest-revenue equilibrium in
    undominated bids, here truthful bidding (revenue 2.5)."""
    rules = AuctionRules(rule="second", bids=(1, 2, 3, 4))
    assert enumerate_equilibria(rules).revenue_range[0] == pytest.approx(1.0)
    benchmark = competitive_benchmark(rules)
    assert benchmark.revenue == pytest.approx(2.5) and "undominated" in benchmark.selection
    # the collusive bids 1 at value 4 fall below
    assert [benchmark.floor_bid(v) for v in (2.0, 4.0)] == [2.0, 4.0]
    keep = undominated_bids(rules)
    assert keep.tolist() == [[False, True, False, False], [False, False, False, True]]
    # the paper grid: 2.25 (both bid their value, 3 at value 4) instead of 1.75, which needed bid 1 at value 2
    assert competitive_benchmark(AuctionRules(rule="second")).revenue == pytest.approx(2.25)
    # first price: unchanged
    assert competitive_benchmark(AuctionRules(rule="first")).revenue == pytest.approx(1.75)


def test_an_equilibrium_in_two_components_is_tagged_with_both():
    """The report lists an extreme equilibrium under every maximal biclique that holds it, not only
    the first; second price (unclipped) has one in both components."""
    from sepo.games.auction.equilibria import enumerate_equilibria, report
    from sepo.games.auction.rules import AuctionRules

    found = enumerate_equilibria(
        AuctionRules(
            values=(2.0, 4.0), value_probs=(0.5, 0.5), bids=(1.0, 2.0, 3.0), rule="second", clip=False
        )
    )
    for index, equilibrium in enumerate(found.equilibria):
        holding = tuple(c for c, members in enumerate(found.components) if index in members)
        assert equilibrium.components == holding and equilibrium.component == holding[0]
    assert any(len(e.components) == 2 for e in found.equilibria)
    assert "  [0,1] (v2->2, v4->3) vs (v2->2, v4->3): revenue 2.25" in report()
