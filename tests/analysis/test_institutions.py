"""The institution search's choice rule and intervals (the search itself:
tests/games/pricing/test_institutions.py)."""

import pytest

from sepo.analysis.institutions import SearchConfig, choose, mean_interval
from sepo.errors import SepoError


def _row(cell, collusion, externality):
    return {
        "cell": cell,
        "setting": {"x": cell},
        "collusion": {"mean": collusion},
        "externality": {"mean": externality},
    }


def test_least_collusion_then_least_externality_within_the_tolerance():
    rows = [_row(0, 0.50, 0.1), _row(1, 0.10, 0.4), _row(2, 0.11, 0.2), _row(3, 0.30, 0.0)]
    assert choose(rows, 0.02)["chosen_cell"] == 2
    assert choose(rows, 0.0)["chosen_cell"] == 1
    assert choose(rows, 0.5)["chosen_cell"] == 3


def test_mean_interval_is_students_t():
    mean, low, high = mean_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and high - mean == pytest.approx(4.302653 * 1.0 / 3 ** 0.5, rel=1e-6)
    assert mean_interval([0.5]) == (0.5, None, None)  # one seed: no interval, not a zero-width one


def test_config_is_checked_before_anything_runs():
    with pytest.raises(SepoError, match="--vary"):
        SearchConfig(game="x", vary={}).validate()
    with pytest.raises(SepoError, match="both name 'fine'"):
        SearchConfig(game="x", vary={"fine": [0.0]}, fixed={"fine": 1.0}).validate()
