"""The logit market of Calvano et al. (2020): demand, profits, consumer surplus, and the two
benchmarks every collusion measure is read against.

n firms sell differentiated products; firm i's quality is a_i, its marginal cost c_i, and an
outside good has quality a_0. At prices p, firm i's demand is the logit share

    q_i = exp((a_i − p_i)/μ) / (Σ_j exp((a_j − p_j)/μ) + exp(a_0/μ)),

its profit (p_i − c_i)·q_i, and the consumers' surplus the log-sum
CS = μ·log(Σ_j exp((a_j − p_j)/μ) + exp(a_0/μ)) (the representative consumer's expected
utility, up to a constant). μ → 0 makes the products perfect substitutes.

Benchmarks, computed (never hard-coded): the one-shot Bertrand-Nash prices, where every firm's
first-order condition p_i − c_i = μ/(1 − q_i) holds (solved with scipy's root finder), and the
joint-monopoly prices that maximise the firms' summed profit (scipy's minimiser, started from the
Nash prices). Calvano et al.'s baseline (a_i = 2, a_0 = 0, μ = 0.25, c_i = 1, two firms) gives
p_N ≈ 1.473 and p_M ≈ 1.925, checked in tests/games/pricing/test_market.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy import optimize
from scipy.special import logsumexp

from sepo.errors import SepoError

CALVANO = {"quality": 2.0, "outside": 0.0, "mu": 0.25, "cost": 1.0}


@dataclass(frozen=True)
class Market:
    """Logit demand with `quality[i]` = a_i, `outside` = a_0, `mu` = μ and `cost[i]` = c_i."""

    quality: tuple[float, ...]
    cost: tuple[float, ...]
    outside: float = CALVANO["outside"]
    mu: float = CALVANO["mu"]

    def __post_init__(self):
        if len(self.quality) != len(self.cost) or len(self.quality) < 2:
            raise SepoError(f"pricing: a market needs the same number (>= 2) of qualities and costs, got "
                            f"{len(self.quality)} and {len(self.cost)}")
        values = (*self.quality, *self.cost, self.outside, self.mu)
        if not all(np.isfinite(values)):
            raise SepoError("pricing: qualities, costs, the outside quality and mu must be finite numbers")
        if self.mu <= 0:
            raise SepoError(
                f"pricing: mu (the logit's horizontal differentiation) must be > 0, got {self.mu:g}"
            )

    @property
    def firms(self) -> int:
        return len(self.quality)

    def _utilities(self, prices: np.ndarray) -> np.ndarray:
        """`[..., n + 1]`: each product's (a_j − p_j)/μ, then the outside good's a_0/μ."""
        prices = np.asarray(prices, dtype=float)
        inside = (np.asarray(self.quality) - prices) / self.mu
        outside = np.broadcast_to(self.outside / self.mu, (*prices.shape[:-1], 1))
        return np.concatenate([inside, outside], axis=-1)

    def shares(self, prices) -> np.ndarray:
        """q_i at prices `[..., n]` (numerically stable softmax)."""
        u = self._utilities(prices)
        return np.exp(u - logsumexp(u, axis=-1, keepdims=True))[..., :-1]

    def profits(self, prices) -> np.ndarray:
        """(p_i − c_i)·q_i at prices `[..., n]`."""
        prices = np.asarray(prices, dtype=float)
        return (prices - np.asarray(self.cost)) * self.shares(prices)

    def consumer_surplus(self, prices) -> np.ndarray:
        """μ·log(Σ_j exp((a_j − p_j)/μ) + exp(a_0/μ)) at prices `[..., n]`."""
        return self.mu * logsumexp(self._utilities(prices), axis=-1)

    @cached_property
    def nash_prices(self) -> np.ndarray:
        """The one-shot Bertrand-Nash prices: p_i − c_i = μ/(1 − q_i(p)) for every i."""
        cost = np.asarray(self.cost)
        solved = optimize.root(
            lambda p: p - cost - self.mu / (1.0 - self.shares(p)), cost + self.mu, tol=1e-13
        )
        if not solved.success:
            raise SepoError(f"pricing: the Bertrand-Nash prices were not found ({solved.message})")
        return solved.x

    @cached_property
    def monopoly_prices(self) -> np.ndarray:
        """The prices that maximise the firms' summed profit."""
        solved = optimize.minimize(lambda p: -self.profits(p).sum(), self.nash_prices, method="BFGS",
                                   options={"gtol": 1e-12})
        # BFGS may stop on its line search at the optimum's precision; the gradient check is the test
        gradient = optimize.approx_fprime(solved.x, lambda p: self.profits(p).sum(), 1e-8)
        if not np.all(np.isfinite(solved.x)) or np.abs(gradient).max() > 1e-5:
            raise SepoError(f"pricing: the joint-monopoly prices were not found ({solved.message})")
        return solved.x

    @cached_property
    def benchmarks(self) -> dict:
        """The numbers the collusion index and the consumer-surplus loss are read against: Nash and
        monopoly prices per firm, the mean profit per firm at each (π_N, π_M), and CS at each."""
        nash, monopoly = self.nash_prices, self.monopoly_prices
        return {
            "nash_prices": nash.tolist(),
            "monopoly_prices": monopoly.tolist(),
            "nash_profit": float(self.profits(nash).mean()),
            "monopoly_profit": float(self.profits(monopoly).mean()),
            "nash_consumer_surplus": float(self.consumer_surplus(nash)),
            "monopoly_consumer_surplus": float(self.consumer_surplus(monopoly)),
        }

    def collusion_index(self, prices) -> np.ndarray:
        """Δ = (π̄ − π_N)/(π_M − π_N), π̄ the firms' mean profit at `prices` `[..., n]` (Calvano et
        al.'s index: 0 at the Nash prices, 1 at the joint-monopoly prices)."""
        b = self.benchmarks
        return (self.profits(prices).mean(-1) - b["nash_profit"]) / (b["monopoly_profit"] - b["nash_profit"])

    def surplus_loss(self, prices) -> np.ndarray:
        """The consumers' loss against the Nash benchmark, as a share of the loss at the monopoly
        prices: (CS_N − CS)/(CS_N − CS_M); 1 at the monopoly prices, negative below Nash."""
        b = self.benchmarks
        return (b["nash_consumer_surplus"] - self.consumer_surplus(prices)) / (
            b["nash_consumer_surplus"] - b["monopoly_consumer_surplus"]
        )

    def grid(self, points: int = 15, extension: float = 0.1, decimals: int = 2) -> np.ndarray:
        """Calvano et al.'s price grid: `points` equally spaced prices from min p_N − ξ(p_M − p_N) to
        max p_M + ξ(p_M − p_N), ξ = `extension`, rounded to `decimals` (what a firm reads is what it
        charges). A count that cannot be distinct at `decimals` (more points than the range holds
        such prices) or that would not fit in memory is refused before any grid is built."""
        from sepo.limits import GRID_POINT_BYTES, memory_budget, refuse

        low, high = float(self.nash_prices.min()), float(self.monopoly_prices.max())
        spread = high - low
        start, stop = low - extension * spread, high + extension * spread

        def spaced(n: int) -> np.ndarray:
            return np.round(np.linspace(start, stop, n), decimals)

        unit = 10.0 ** decimals
        held = int(round(stop * unit) - round(start * unit)) + 1  # the prices at `decimals` in the range
        apart = int(math.floor((stop - start) * unit)) + 1  # points at least one unit apart: always distinct
        most = memory_budget() // GRID_POINT_BYTES  # the most prices the machine holds
        if points <= held:
            if points > most:
                refuse(f"a grid of {points:,} prices (each with its name and its place in every decision)",
                       points * GRID_POINT_BYTES, f"use --prices {min(most, apart)} or fewer")
            prices = spaced(points)
            if len(np.unique(prices)) == points:
                return prices
        top = min(points - 1, held, most)  # the counts above `apart` are few: tried one by one
        fits = (
            top
            if top <= apart
            else next((n for n in range(top, apart, -1) if len(np.unique(spaced(n))) == n), apart)
        )
        if fits >= 2:
            raise SepoError(
                f"pricing: {points:,} grid points between {start:.{decimals}f} and {stop:.{decimals}f} "
                f"are not distinct at {decimals} decimals; use --prices {fits} or fewer, or an explicit "
                "--grid"
            )
        raise SepoError(
            f"pricing: the Nash and monopoly prices ({low:.4f} and {high:.4f}) are less than a cent apart at "
            f"these costs, qualities and mu, so no grid between them has two distinct prices at {decimals} "
            f"decimals; give an explicit --grid, or a lower --cost (Calvano et al.: cost 1, "
            f"quality 2)"
        )
