"""The Advantage Alignment term against its formula, written out term by term."""
import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.objective.advantage_alignment import (
    alignment_term,
    check_alignment,
    check_method,
    past_advantage_weights,
)


def test_term_is_beta_gamma_times_discounted_past_own_advantages_times_the_opponents():
    """The authors' formula A* = A1 + β·γ·(Σ_{k<t} γ^(t−k)·A1_k)·A2_t, leading γ included."""
    rng = np.random.default_rng(0)
    own, other = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    beta, gamma = 0.7, 0.9
    expected = np.zeros((5, 4))
    for r in range(5):
        for t in range(4):
            expected[r, t] = beta * gamma * sum(gamma ** (t - k) * own[r, k] for k in range(t)) * other[r, t]
    assert np.allclose(alignment_term(own, other, beta, gamma), expected, rtol=0, atol=1e-12)
    assert np.all(past_advantage_weights(own, gamma)[:, 0] == 0)  # nothing before the first decision


def test_term_on_a_hand_computed_case():
    """A1 = (1, 2, 3), A2 = (4, 5, 6), β = 2, γ = 1/2: t = 1 gives 2·½·(½·1)·5 = 2.5, t = 2 gives
    2·½·(¼·1 + ½·2)·6 = 7.5 (without the leading γ it would be 5 and 15)."""
    term = alignment_term(np.array([[1.0, 2.0, 3.0]]), np.array([[4.0, 5.0, 6.0]]), 2.0, 0.5)
    assert np.allclose(term, [[0.0, 2.5, 7.5]], rtol=0, atol=1e-12)


@pytest.mark.parametrize("beta, gamma", [(-1.0, 0.9), (float("nan"), 0.9), (1.0, 1.5), (1.0, -0.1)])
def test_bad_settings_are_one_line(beta, gamma):
    with pytest.raises(SepoError):
        check_alignment(beta, gamma)


def test_unknown_method_is_one_line():
    with pytest.raises(SepoError, match="advantage-alignment"):
        check_method("lola")
