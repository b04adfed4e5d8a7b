"""The Advantage Alignment term against its formula, written out term by term."""
import numpy as np
import pytest

from sepo.errors import SepoError
from sepo.objective.advantage_alignment import alignment_term, check_alignment, check_method, past_advantage_weights


def test_term_is_beta_times_discounted_past_own_advantages_times_the_opponents():
    rng = np.random.default_rng(0)
    own, other = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    beta, gamma = 0.7, 0.9
    expected = np.zeros((5, 4))
    for r in range(5):
        for t in range(4):
            expected[r, t] = beta * sum(gamma ** (t - k) * own[r, k] for k in range(t)) * other[r, t]
    assert np.allclose(alignment_term(own, other, beta, gamma), expected, rtol=0, atol=1e-12)
    assert np.all(past_advantage_weights(own, gamma)[:, 0] == 0)  # nothing before the first decision


@pytest.mark.parametrize("beta, gamma", [(-1.0, 0.9), (float("nan"), 0.9), (1.0, 1.5), (1.0, -0.1)])
def test_bad_settings_are_one_line(beta, gamma):
    with pytest.raises(SepoError):
        check_alignment(beta, gamma)


def test_unknown_method_is_one_line():
    with pytest.raises(SepoError, match="advantage-alignment"):
        check_method("lola")
