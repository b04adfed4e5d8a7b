"""The logit market's benchmarks: computed, and equal to Calvano et al.'s published values."""
from __future__ import annotations

import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.games.pricing.market import Market


def test_calvano_baseline_nash_and_monopoly_prices():
    market = Market((2.0, 2.0), (1.0, 1.0))
    # Calvano, Calzolari, Denicolò and Pastorello (2020), section III: p_N ≈ 1.473, p_M ≈ 1.925
    assert market.nash_prices == pytest.approx([1.473, 1.473], abs=1e-3)
    assert market.monopoly_prices == pytest.approx([1.925, 1.925], abs=1e-3)
    b = market.benchmarks
    assert b["nash_profit"] == pytest.approx(0.2229, abs=1e-4) and b["monopoly_profit"] == pytest.approx(
        0.3375, abs=1e-4
    )


def test_benchmarks_satisfy_their_conditions():
    market = Market((2.0, 2.2, 1.9), (1.0, 1.1, 0.9), outside=0.1, mu=0.3)
    nash = market.nash_prices
    for i in range(3):  # no firm gains by a unilateral price change
        def own(p, i=i):
            prices = nash.copy()
            prices[i] = p
            return market.profits(prices)[i]
        grid = np.linspace(nash[i] - 0.3, nash[i] + 0.3, 601)
        assert own(nash[i]) >= max(own(p) for p in grid) - 1e-10
    monopoly = market.monopoly_prices
    joint = market.profits(monopoly).sum()
    rng = np.random.default_rng(0)
    assert all(market.profits(monopoly + rng.normal(0, 0.05, 3)).sum() <= joint + 1e-12 for _ in range(200))


def test_index_and_surplus_loss_are_zero_at_nash_and_one_at_monopoly():
    market = Market((2.0, 2.0), (1.0, 1.0))
    assert market.collusion_index(market.nash_prices) == pytest.approx(0.0, abs=1e-9)
    assert market.collusion_index(market.monopoly_prices) == pytest.approx(1.0, abs=1e-9)
    assert market.surplus_loss(market.nash_prices) == pytest.approx(0.0, abs=1e-9)
    assert market.surplus_loss(market.monopoly_prices) == pytest.approx(1.0, abs=1e-9)
    # the log-sum consumer surplus, by hand
    p = np.array([1.6, 1.8])
    assert market.consumer_surplus(p) == pytest.approx(
        0.25 * np.log(np.exp((2 - 1.6) / 0.25) + np.exp((2 - 1.8) / 0.25) + 1)
    )


def test_calvano_grid_spans_nash_to_monopoly_with_a_margin():
    grid = Market((2.0, 2.0), (1.0, 1.0)).grid()
    assert len(grid) == 15 and grid[1] < 1.473 < grid[2] and grid[-3] < 1.925 < grid[-2]
    assert grid[0] == pytest.approx(1.473 - 0.1 * (1.925 - 1.473), abs=0.006)


def test_bad_markets_are_one_line_errors():
    with pytest.raises(SepoError, match="mu"):
        Market((2.0, 2.0), (1.0, 1.0), mu=0.0)
    with pytest.raises(SepoError, match="same number"):
        Market((2.0,), (1.0,))
