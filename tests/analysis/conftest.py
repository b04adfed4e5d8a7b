"""Shared helpers for the analysis tests: example paths and small random games."""
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "analysis"


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


def random_bimatrix(rng: np.random.Generator, max_actions: int = 4):
    """A random two-player game with 2..max_actions actions each; continuous payoffs make it
    non-degenerate with probability one."""
    m, n = rng.integers(2, max_actions + 1, size=2)
    return rng.normal(size=(m, n)), rng.normal(size=(m, n))
