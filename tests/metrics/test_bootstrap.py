"""Bootstrap intervals cover known answers: episodes shared between strata are resampled
together, and the exploitability of an estimated policy gets an interval that reaches the bound."""
import numpy as np
import pytest

from sepo.games.kuhn import exact as kuhn_exact
from sepo.metrics.bootstrap import StratifiedSample, boundary_interval, interval

TRIALS = 300


def _coverage_of_sum(linked: bool) -> float:
    """Two strata that replay the same episodes (payoff ~ N(0, 1) each); the metric is the sum of
    their means, whose true value is 0 and true standard error 2/sqrt(n)."""
    hits, n = 0, 40
    for trial in range(TRIALS):
        values = np.random.default_rng(trial).normal(size=n)
        strata = {("train", "A"): {"x": values}, ("collusive", "A"): {"x": values}}
        links = {key: tuple(range(n)) for key in strata} if linked else None
        sample = StratifiedSample(strata, 400, trial, links=links)
        metric = (sample.sum(("train", "A"), "x") + sample.sum(("collusive", "A"), "x")) / n
        _, low, high = interval(metric)
        hits += low <= 0.0 <= high
    return hits / TRIALS


def test_shared_episodes_resampled_together_cover_the_true_value():
    linked, independent = _coverage_of_sum(True), _coverage_of_sum(False)
    assert 0.90 <= linked <= 0.99  # nominal 0.95
    # treating the replayed episodes as independent: intervals ~1/sqrt(2) too narrow
    assert independent < 0.88


def test_linked_strata_share_one_index_and_unlinked_do_not():
    strata = {
        ("a", "x"): {"v": np.arange(5.0)},
        ("b", "x"): {"v": np.arange(5.0)},
        ("c", "y"): {"v": np.arange(5.0)},
    }
    sample = StratifiedSample(
        strata, 50, 0, links={("a", "x"): (1, 2), ("b", "x"): (1, 2), ("c", "y"): (3, 4)}
    )
    assert np.array_equal(sample.sum(("a", "x"), "v"), sample.sum(("b", "x"), "v"))
    assert not np.array_equal(sample.sum(("a", "x"), "v"), sample.sum(("c", "y"), "v"))


def _coverage_of_exploitability(policy: np.ndarray, n: int) -> float:
    """Sample n replies per information state from `policy`, estimate its exploitability and the
    `boundary_interval` from 400 resamples; the fraction of trials whose interval holds the truth."""
    truth = float(kuhn_exact.exploitability(policy))
    hits = 0
    for trial in range(TRIALS // 2):
        rng = np.random.default_rng([trial, n])
        bets = rng.binomial(n, policy[:, 1]) / n
        estimate = np.stack([1 - bets, bets], -1)
        resampled = rng.binomial(n, np.broadcast_to(bets, (400, 12))) / n
        low, high = boundary_interval(float(kuhn_exact.exploitability(estimate)),
                                      kuhn_exact.exploitability(np.stack([1 - resampled, resampled], -1)))
        hits += low <= truth <= high
    return hits / (TRIALS // 2)


@pytest.mark.parametrize("shift", [0.0, 1.0])
def test_exploitability_interval_covers_the_truth_at_the_bound_and_inside(shift):
    policy = kuhn_exact.nash_policy(1 / 3)
    bets = np.clip(policy[:, 1] + shift * np.array([0.1, 0, -0.1, 0.05, 0, 0, 0.1, 0, 0, 0, 0, 0]), 0, 1)
    policy = np.stack([1 - bets, bets], -1)  # shift 1: exploitability 0.0375, away from the bound
    assert _coverage_of_exploitability(policy, 256) >= 0.93  # nominal 0.95


def test_plain_reflected_interval_would_miss_the_bound():
    """The basic bootstrap interval [2e - q97.5, 2e - q2.5] covers 0 for a Nash policy only about
    85% of the time: the plug-in estimate's upward bias at the bound is larger than the bias of
    its resamples. (This is why `boundary_interval` subtracts the whole spread.)"""
    policy, n, hits = kuhn_exact.nash_policy(1 / 3), 256, 0
    for trial in range(TRIALS // 2):
        rng = np.random.default_rng([trial, 7])
        bets = rng.binomial(n, policy[:, 1]) / n
        e = float(kuhn_exact.exploitability(np.stack([1 - bets, bets], -1)))
        resampled = rng.binomial(n, np.broadcast_to(bets, (400, 12))) / n
        high_q = np.percentile(kuhn_exact.exploitability(np.stack([1 - resampled, resampled], -1)), 97.5)
        hits += max(0.0, 2 * e - high_q) <= 0.0
    assert hits / (TRIALS // 2) < 0.92
