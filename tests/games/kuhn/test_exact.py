"""sepo.games.kuhn.exact checked against independent references: OpenSpiel's Python algorithms
(exploitability, nash_conv, best_response, expected_game_score), OpenSpiel's C++
`pyspiel.exploitability` / `pyspiel.nash_conv`, and central finite differences.

Policies are mapped to OpenSpiel row by row through the information-state string, never by
position, so a mix-up of sepo's row order would show up here.
"""
from __future__ import annotations

import numpy as np
import pyspiel
import pytest
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import best_response as os_best_response
from open_spiel.python.algorithms import expected_game_score
from open_spiel.python.algorithms import exploitability as os_exploitability

from sepo.games.kuhn import exact as ke
from sepo.games.kuhn.rules import INFO_STATES

TOL = 1e-9
GAME = pyspiel.load_game("kuhn_poker")


# ---------------------------------------------------------------------------------- helpers

def random_policies(n: int, seed: int) -> np.ndarray:
    """`n` policies `[n, 12, 2]`: Dirichlet rows at several concentrations (0.05 gives rows with
    probabilities within 1e-10 of 0/1), and in a third of them some rows set exactly to 0/1."""
    rng = np.random.default_rng(seed)
    concentration = rng.choice([0.05, 0.3, 1.0, 5.0], size=n)
    policies = np.stack([rng.dirichlet([c, c], size=12) for c in concentration])
    exact = rng.random(n) < 1 / 3
    for i in np.flatnonzero(exact):
        rows = rng.random(12) < 0.5
        policies[i, rows] = np.eye(2)[rng.integers(2, size=rows.sum())]
    return policies


def to_openspiel(policy: np.ndarray) -> os_policy.TabularPolicy:
    """A sepo policy as OpenSpiel's Python TabularPolicy, rows matched by information-state key."""
    tabular = os_policy.TabularPolicy(GAME)
    assert set(tabular.state_lookup) == set(INFO_STATES)
    for key, index in tabular.state_lookup.items():
        tabular.action_probability_array[index] = policy[INFO_STATES.index(key)]
    return tabular


def to_pyspiel(policy: np.ndarray) -> pyspiel.TabularPolicy:
    return pyspiel.TabularPolicy(
        {key: [(0, float(row[0])), (1, float(row[1]))] for key, row in zip(INFO_STATES, policy)}
    )


POLICIES = random_policies(240, seed=20240601)


def test_random_policies_include_exact_zeros_and_ones_and_near_deterministic_rows():
    assert np.sum(POLICIES == 0.0) > 100 and np.sum(POLICIES == 1.0) > 100
    near = (POLICIES > 0) & (POLICIES < 1e-6)
    assert near.sum() > 20
    assert len(POLICIES) >= 200


# ------------------------------------------------------------------------ exploitability

def test_exploitability_and_nash_conv_match_openspiel_python_and_cpp_for_240_policies():
    ours_e = ke.exploitability(POLICIES)
    ours_nc = ke.nash_conv(POLICIES)
    assert ours_e.shape == ours_nc.shape == (len(POLICIES),)
    worst = 0.0
    for policy, e, nc in zip(POLICIES, ours_e, ours_nc):
        python_policy = to_openspiel(policy)
        cpp_policy = to_pyspiel(policy)
        references = {
            "python exploitability": (os_exploitability.exploitability(GAME, python_policy), e),
            "python nash_conv": (os_exploitability.nash_conv(GAME, python_policy), nc),
            "pyspiel.exploitability": (pyspiel.exploitability(GAME, cpp_policy), e),
            "pyspiel.nash_conv": (pyspiel.nash_conv(GAME, cpp_policy), nc),
        }
        for name, (theirs, ours) in references.items():
            assert ours == pytest.approx(theirs, abs=TOL), name
            worst = max(worst, abs(ours - theirs))
    assert worst < TOL


def test_batched_call_equals_per_policy_calls():
    batched = ke.exploitability(POLICIES)
    single = np.array([ke.exploitability(p) for p in POLICIES])
    assert np.array_equal(batched, single) or np.allclose(batched, single, rtol=0, atol=1e-15)
    # any leading batch shape, and a list input
    grid = POLICIES[:24].reshape(4, 6, 12, 2)
    assert ke.nash_conv(grid).shape == (4, 6)
    assert np.allclose(ke.nash_conv(grid).ravel(), ke.nash_conv(POLICIES[:24]), atol=1e-15)
    assert ke.exploitability(POLICIES[0].tolist()) == pytest.approx(batched[0], abs=1e-15)


def test_nash_conv_is_twice_exploitability_and_both_are_non_negative():
    assert np.allclose(ke.nash_conv(POLICIES), 2 * ke.exploitability(POLICIES), atol=1e-15)
    assert ke.exploitability(POLICIES).min() >= -1e-15


@pytest.mark.parametrize("alpha", [0.0, 1 / 6, 1 / 3])
def test_nash_family_has_zero_exploitability(alpha):
    nash = ke.nash_policy(alpha)
    assert abs(ke.exploitability(nash)) <= 1e-12
    assert abs(ke.nash_conv(nash)) <= 1e-12
    assert os_exploitability.exploitability(GAME, to_openspiel(nash)) == pytest.approx(0.0, abs=1e-12)


def test_nash_family_on_a_grid_and_outside_it():
    alphas = np.linspace(0, 1 / 3, 41)
    nash = np.stack([ke.nash_policy(a) for a in alphas])
    assert np.abs(ke.exploitability(nash)).max() <= 1e-12
    # seat 0 bluffs J with alpha, bets K with 3 alpha, calls with Q at alpha + 1/3
    row = {key: i for i, key in enumerate(INFO_STATES)}
    assert np.allclose(nash[:, row["0"], 1], alphas)
    assert np.allclose(nash[:, row["2"], 1], 3 * alphas)
    assert np.allclose(nash[:, row["1pb"], 1], alphas + 1 / 3)
    # leaving the family is exploitable: a slightly different call frequency with Q
    off = ke.nash_policy(0.2).copy()
    off[row["1pb"]] = [0.4, 0.6]
    assert ke.exploitability(off) > 1e-3
    for bad in (-0.01, 0.34, 1.0):
        with pytest.raises(ValueError):
            ke.nash_policy(bad)


def test_uniform_policy_exploitability_is_11_over_24():
    uniform = ke.uniform_policy()
    assert ke.exploitability(uniform) == pytest.approx(11 / 24, abs=1e-15)
    assert 11 / 24 == pytest.approx(0.4583333333333333, abs=1e-15)
    assert os_exploitability.exploitability(GAME, os_policy.UniformRandomPolicy(GAME)) == pytest.approx(
        11 / 24, abs=TOL
    )


# ---------------------------------------------------------------------------- game value

@pytest.mark.parametrize(
    "alpha0,alpha1", [(0.0, 0.0), (0.0, 1 / 3), (1 / 6, 0.1), (1 / 3, 1 / 3), (0.25, 0.05)]
)
def test_game_value_is_minus_one_eighteenth_for_any_pair_of_nash_policies(alpha0, alpha1):
    assert ke.GAME_VALUE == pytest.approx(-1 / 18, abs=1e-16)
    value = ke.expected_value(ke.nash_policy(alpha0), ke.nash_policy(alpha1))
    assert value == pytest.approx(-1 / 18, abs=1e-12)
    theirs = expected_game_score.policy_value(
        GAME.new_initial_state(), [to_openspiel(ke.nash_policy(alpha0)), to_openspiel(ke.nash_policy(alpha1))]
    )
    assert theirs[0] == pytest.approx(-1 / 18, abs=1e-12)
    assert theirs[1] == pytest.approx(1 / 18, abs=1e-12)


def test_expected_value_matches_openspiel_policy_value_for_random_pairs():
    seat0, seat1 = POLICIES[:60], POLICIES[60:120]
    ours = ke.expected_value(seat0, seat1)
    assert ours.shape == (60,)
    root = GAME.new_initial_state()
    for a, b, value in zip(seat0, seat1, ours):
        theirs = expected_game_score.policy_value(root, [to_openspiel(a), to_openspiel(b)])
        assert value == pytest.approx(theirs[0], abs=TOL)


def test_head_to_head_averages_the_two_seats_and_is_antisymmetric():
    a, b = POLICIES[:30], POLICIES[30:60]
    expected = 0.5 * (ke.expected_value(a, b) - ke.expected_value(b, a))
    assert np.allclose(ke.head_to_head(a, b), expected, atol=1e-15)
    assert np.allclose(ke.head_to_head(a, b), -ke.head_to_head(b, a), atol=1e-15)
    assert np.allclose(ke.head_to_head(a, a), 0.0, atol=1e-15)


# ------------------------------------------------------------------------- best response

def test_best_response_values_match_openspiel_best_response_per_seat():
    ours = ke.best_response_values(POLICIES[:80])
    assert ours.shape == (80, 2)
    for policy, (seat0_value, seat1_value) in zip(POLICIES[:80], ours):
        python_policy = to_openspiel(policy)
        root = GAME.new_initial_state()
        theirs0 = os_best_response.BestResponsePolicy(GAME, 0, python_policy).value(root)
        theirs1 = os_best_response.BestResponsePolicy(GAME, 1, python_policy).value(root)
        assert seat0_value == pytest.approx(theirs0, abs=TOL)
        assert seat1_value == pytest.approx(theirs1, abs=TOL)


def test_best_response_policy_attains_the_best_response_values():
    policies = POLICIES[:80]
    responder = ke.best_response(policies)
    assert set(np.unique(responder)) <= {0.0, 1.0}
    values = ke.best_response_values(policies)
    assert np.allclose(ke.expected_value(responder, policies), values[:, 0], atol=1e-12)
    assert np.allclose(-ke.expected_value(policies, responder), values[:, 1], atol=1e-12)


# ---------------------------------------------------------------- exploitability gradient

def _interior(n: int, seed: int) -> np.ndarray:
    """Policies whose best response is unique with a margin (e is smooth around them)."""
    rng = np.random.default_rng(seed)
    return rng.dirichlet([2.0, 2.0], size=(n, 12))


def test_exploitability_gradient_matches_central_differences_along_the_simplex():
    """Moving mass h from action 0 to action 1 at row I changes e by h·(g[I,1] − g[I,0])."""
    h = 1e-6
    for policy in _interior(15, seed=11):
        g = ke.exploitability_gradient(policy)
        assert g.shape == (12, 2)
        for row in range(12):
            plus, minus = policy.copy(), policy.copy()
            plus[row] += [-h, h]
            minus[row] += [h, -h]
            numeric = (ke.exploitability(plus) - ke.exploitability(minus)) / (2 * h)
            assert numeric == pytest.approx(g[row, 1] - g[row, 0], abs=1e-7)


def test_exploitability_gradient_matches_central_differences_per_entry():
    """Each entry: the partial derivative of the (multilinear) tree expression of e, evaluated
    through OpenSpiel's exploitability on an off-simplex table (OpenSpiel does not renormalise)."""
    h = 1e-6
    for policy in _interior(4, seed=12):
        g = ke.exploitability_gradient(policy)
        for row in range(12):
            for action in range(2):
                plus, minus = policy.copy(), policy.copy()
                plus[row, action] += h
                minus[row, action] -= h
                numeric = (os_exploitability.exploitability(GAME, to_openspiel(plus))
                           - os_exploitability.exploitability(GAME, to_openspiel(minus))) / (2 * h)
                assert numeric == pytest.approx(g[row, action], abs=1e-7), (INFO_STATES[row], action)


def test_exploitability_gradient_chain_rule_to_softmax_logits_matches_differences():
    """∇θ e = Σ_a ∂e/∂π(a|I) π(a|I)(1[a=b] − π(b|I)), the form the SEPO property test uses."""
    from sepo.policies.tabular import softmax

    h = 1e-6
    rng = np.random.default_rng(13)
    for _ in range(5):
        theta = rng.normal(scale=0.8, size=(12, 2))
        policy = softmax(theta)
        g = ke.exploitability_gradient(policy)
        analytic = policy * (g - (policy * g).sum(-1, keepdims=True))
        for row in range(12):
            for action in range(2):
                plus, minus = theta.copy(), theta.copy()
                plus[row, action] += h
                minus[row, action] -= h
                numeric = (ke.exploitability(softmax(plus)) - ke.exploitability(softmax(minus))) / (2 * h)
                assert numeric == pytest.approx(analytic[row, action], abs=1e-7)


def test_exploitability_gradient_is_batched():
    batch = _interior(10, seed=14)
    batched = ke.exploitability_gradient(batch)
    assert batched.shape == (10, 12, 2)
    for policy, g in zip(batch, batched):
        assert np.allclose(ke.exploitability_gradient(policy), g, atol=1e-15)


# ------------------------------------------------------------------------- external reach

def test_external_reach_by_enumeration():
    """Probability of reaching each agent information state under chance, a uniform seat and a
    weighted opponent, the agent's own moves excluded, by walking every deal and history."""
    from sepo.games.kuhn.rules import DEALS, is_hand_over, seat_to_act

    opponents = POLICIES[:3]
    weights = np.array([0.5, 0.3, 0.2])
    expected = np.zeros(12)

    def walk(history, cards, agent_seat, opponent, prob):
        if is_hand_over(history):
            return
        seat = seat_to_act(history)
        row = INFO_STATES.index(f"{cards[seat]}{history}")
        if seat == agent_seat:
            expected[row] += prob
            for action in (0, 1):
                walk(history + "pb"[action], cards, agent_seat, opponent, prob)
        else:
            for action in (0, 1):
                walk(history + "pb"[action], cards, agent_seat, opponent, prob * opponent[row, action])

    for opponent, weight in zip(opponents, weights):
        for agent_seat in (0, 1):
            for cards in DEALS:
                walk("", cards, agent_seat, opponent, weight * 0.5 / 6)
    assert np.allclose(ke.external_reach(opponents, weights), expected, atol=1e-15)
    equal = ke.external_reach(opponents)
    assert np.allclose(equal, ke.external_reach(opponents, np.full(3, 1 / 3)), atol=1e-15)


# ------------------------------------------------------------------------ invalid policies

@pytest.mark.parametrize(
    "bad",
    [
        np.full((12, 3), 1 / 3),                                    # wrong number of actions
        np.full((11, 2), 0.5),                                      # wrong number of states
        np.full((2, 6, 2), 0.5),                                    # wrong state axis
        np.full(24, 0.5),                                           # flat
        np.tile([1.2, -0.2], (12, 1)),                              # negative
        np.tile([0.5, 0.6], (12, 1)),                               # rows sum to 1.1
        np.tile([0.3, 0.3], (12, 1)),                               # rows sum to 0.6
        np.where(np.arange(24).reshape(12, 2) == 5, np.nan, 0.5),  # NaN
    ],
    ids=["3-actions", "11-states", "bad-axis", "flat", "negative", "sum>1", "sum<1", "nan"],
)
def test_invalid_policies_raise(bad):
    for function in (ke.exploitability, ke.nash_conv, ke.exploitability_gradient, ke.as_policy):
        with pytest.raises(ValueError):
            function(bad)


def test_one_bad_row_in_a_batch_raises():
    batch = POLICIES[:5].copy()
    batch[3, 7] = [0.7, 0.7]
    with pytest.raises(ValueError):
        ke.exploitability(batch)


def test_blocked_batches_equal_one_block_and_keep_their_shape(monkeypatch):
    rng = np.random.default_rng(12)
    policies = rng.dirichlet([1.0, 1.0], size=(3, 700, 12))
    monkeypatch.setattr(ke, "BLOCK", 10**9)
    whole = ke.nash_conv(policies)
    monkeypatch.setattr(ke, "BLOCK", 256)
    blocked = ke.nash_conv(policies)
    assert blocked.shape == (3, 700)
    assert np.allclose(blocked, whole, rtol=0, atol=1e-12)
    assert ke.exploitability(policies[0, 0]).shape == ()
    with pytest.raises(ValueError, match="12, 2"):
        ke.nash_conv(np.full((300, 12, 3), 1 / 3))
