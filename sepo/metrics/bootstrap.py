"""Stratified bootstrap: resample episodes within each (pool, opponent) stratum.

Every pool metric is a function of per-stratum sums of per-episode fields, so the sums are
computed once per replicate (vectorised) and any metric formula then yields its replicates for
free. Replicate 0 is the full sample (the point estimate). Intervals are 95% percentile ones.
"""
from __future__ import annotations

import numpy as np

REPLICATES = 1000


class StratifiedSample:
    """`strata[key][field]` is an array of per-episode values; `sum(key, field)` gives
    `[1 + replicates]` sums (full sample first, then bootstrap resamples)."""

    def __init__(self, strata: dict, replicates: int = REPLICATES, seed: int = 0):
        self.strata = strata
        self.replicates = replicates
        rng = np.random.default_rng([seed, 0xB007])
        self._index = {}
        for key in sorted(strata, key=str):
            n = len(next(iter(strata[key].values())))
            resample = rng.integers(n, size=(replicates, n))
            self._index[key] = np.vstack([np.arange(n)[None, :], resample])

    def keys(self, pool: str | None = None) -> list:
        return [key for key in self.strata if pool is None or key[0] == pool]

    def sum(self, key, field: str) -> np.ndarray:
        return self.strata[key][field][self._index[key]].sum(1)

    def count(self, key) -> int:
        return self._index[key].shape[1]


def interval(replicates: np.ndarray) -> tuple[float, float, float]:
    """(point estimate, 2.5th, 97.5th percentile) from replicate 0 and the rest."""
    values = np.asarray(replicates, dtype=float)
    point = float(values[0])
    finite = values[1:][np.isfinite(values[1:])]
    if finite.size == 0:
        return point, float("nan"), float("nan")
    low, high = np.percentile(finite, [2.5, 97.5])
    return point, float(low), float(high)
