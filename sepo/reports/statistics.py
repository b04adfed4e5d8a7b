"""The report's statistics: 95% intervals over seeds, paired differences, and the values a metric can take.

One seed: a cell's own 95% bootstrap interval over episodes. Several seeds: the mean over seeds with
a 95% t-interval across seeds (seed-to-seed variation, which contains the episode noise), cut to the
values the metric can take. A paired difference is taken per seed first (a cell of one stage meets
the cell of the other stage with its seed), then summarised the same way; with one pair, the two
cells' bootstrap half-widths are added in quadrature.
"""
from __future__ import annotations

import math
import re

import numpy as np


def metric_range(name: str) -> tuple[float, float]:
    """The values a metric can take by its definition, in every domain: the invalid-action rate and
    a domain's behaviour rates ("<domain>/..._rate...") lie in [0, 1], GTBench's NRA
    (A − O)/(|A| + |O|) in [-1, 1], and exploitability (NashConv) is never negative. A t-interval
    over seeds is symmetric and can leave that range (an invalid rate of 0.010 [-0.007, 0.027]);
    the truth cannot, so the interval is cut to it. Collusion and externality are not cut: a share
    of rounds in some domains, a surplus loss in others."""
    if name == "invalid_action_rate" or is_behaviour_rate(name):
        return 0.0, 1.0
    if name == "nra_gtbench":
        return -1.0, 1.0
    if name in ("exploitability", "nash_conv"):
        return 0.0, math.inf
    return -math.inf, math.inf


def is_behaviour_rate(name: str) -> bool:
    """Whether a metric is one of a domain's action rates ("<domain>/bet_rate_J",
    "<domain>/cooperation_rate"): the share of the agent's decisions, in some situation, that took some
    action."""
    return "/" in name and re.search(r"(^|[/_])rate($|_)", name) is not None


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95% t-interval of the mean; NaN ends for fewer than two values."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    half = float(stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values)))
    return mean, mean - half, mean + half


def over_seeds(name: str, entries: list[tuple]) -> tuple[float, float, float, str] | None:
    """(value, low, high, how) of a metric over the cells (seeds) of a group, from each cell's
    (value, low, high, exact); None when no cell measured it."""
    found = [e for e in entries if e is not None and not math.isnan(e[0])]
    if not found:
        return None
    if len(found) == 1:
        value, low, high, exact = found[0]
        return value, low, high, "exact" if exact else "bootstrap"
    mean, low, high = t_interval([e[0] for e in found])
    least, most = metric_range(name)
    return mean, max(low, least), min(high, most), f"{len(found)} seeds"


def paired_difference(pairs: list[tuple[tuple, tuple]]) -> tuple[float, float, float, int] | None:
    """(mean, low, high, pairs) of a − b over (a, b) pairs of (value, low, high, ...) entries that met
    by seed: a t-interval over the per-seed differences, or with one pair its bootstrap half-widths
    added in quadrature; None when no pair has both numbers."""
    diffs, halves = [], []
    for a, b in pairs:
        if a is None or b is None or math.isnan(a[0]) or math.isnan(b[0]):
            continue
        diffs.append(a[0] - b[0])
        halves.append(math.hypot((a[2] - a[1]) / 2, (b[2] - b[1]) / 2))
    if not diffs:
        return None
    if len(diffs) == 1:
        return diffs[0], diffs[0] - halves[0], diffs[0] + halves[0], 1
    mean, low, high = t_interval(diffs)
    return mean, low, high, len(diffs)


def zero_width(entry) -> bool:
    """Whether an interval has no width (every seed gave the same number, or a one-seed interval of
    two exact values): it then says nothing about the noise of the episodes behind it."""
    if entry is None or math.isnan(entry[1]):
        return False
    return entry[2] - entry[1] <= 1e-12 * max(1.0, abs(entry[0]))
