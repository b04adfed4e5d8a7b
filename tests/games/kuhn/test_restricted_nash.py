"""Restricted Nash responses and the exploitability frontier of Kuhn poker, checked against
kuhn_exact, brute force over all 4096 pure policies, and OpenSpiel."""
from __future__ import annotations

import itertools

import numpy as np
import pyspiel
import pytest
from open_spiel.python import policy as os_policy
from open_spiel.python.algorithms import exploitability as os_exploitability
from open_spiel.python.algorithms import sequence_form_utils

from sepo.games.kuhn import exact as ke
from sepo.games.kuhn import restricted_nash as rn
from sepo.games.kuhn.rules import INFO_STATES

TOL = 1e-9
LAMBDAS = (0.25, 0.4, 1.0, 4.0)


def _policy(bet: dict[str, float]) -> np.ndarray:
    return np.array([[1.0 - bet[key], bet[key]] for key in INFO_STATES])


def train_pool() -> np.ndarray:
    """The paper's Kuhn `train` pool: NashApprox (α = 1/3), TightPassive, LooseAggressive."""
    nash_approx = _policy({"0": 1 / 3, "1": 0, "2": 1, "0p": 1 / 3, "1p": 0, "2p": 1,
                           "0b": 0, "1b": 1 / 3, "2b": 1, "0pb": 0, "1pb": 1 / 3, "2pb": 1})
    tight_passive = _policy({key: float(key[0] == "2") for key in INFO_STATES})
    loose_aggressive = _policy({key: float(key[0] in "12") for key in INFO_STATES})
    return np.stack([nash_approx, tight_passive, loose_aggressive])


def random_policies(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet([0.7, 0.7], size=(n, 12))


RANDOM_POOL = random_policies(4, seed=7)
RANDOM_WEIGHTS = np.array([0.1, 0.2, 0.3, 0.4])
POOLS = {"train": (train_pool(), None), "random": (RANDOM_POOL, RANDOM_WEIGHTS)}

# every deterministic policy (both seats): the best response to anything is among them
PURE = np.eye(2)[np.array(list(itertools.product((0, 1), repeat=12)))]


def pool_utilities(policies, opponents, weights=None) -> np.ndarray:
    weights = np.full(len(opponents), 1 / len(opponents)) if weights is None else weights
    return sum(w * ke.head_to_head(policies, o) for w, o in zip(weights, opponents))


def to_openspiel(rows: dict[str, np.ndarray], game) -> os_policy.TabularPolicy:
    tabular = os_policy.TabularPolicy(game)
    for key, index in tabular.state_lookup.items():
        tabular.action_probability_array[index] = rows[key]
    return tabular


def openspiel_exploitability(pol: np.ndarray) -> float:
    game = pyspiel.load_game("kuhn_poker")
    return os_exploitability.exploitability(game, to_openspiel(dict(zip(INFO_STATES, pol)), game))


@pytest.fixture(scope="module")
def frontiers():
    return {name: rn.frontier(pool, num=41, weights=w) for name, (pool, w) in POOLS.items()}


# ------------------------------------------------------------------------- sequence form

def test_realization_plans_satisfy_the_sequence_form_constraints():
    x, y = rn.realization_plans(random_policies(20, seed=1))
    assert np.allclose(x @ rn.SF.E0.T, rn.SF.e0) and np.allclose(y @ rn.SF.E1.T, rn.SF.e1)
    assert x.min() >= 0 and y.min() >= 0


def test_sequence_form_value_matches_kuhn_exact():
    seat0, seat1 = random_policies(50, seed=2), random_policies(50, seed=3)
    x, _ = rn.realization_plans(seat0)
    _, y = rn.realization_plans(seat1)
    values = np.einsum("ki,ij,kj->k", x, rn.SF.A, y)
    assert np.allclose(values, ke.expected_value(seat0, seat1), atol=1e-12)


def test_sequence_form_value_matches_openspiel_sequence_form():
    game = pyspiel.load_game("kuhn_poker")
    _, isa_to_seq, _, _, payoff, _ = sequence_form_utils.construct_vars(game)
    for seat0, seat1 in zip(random_policies(3, seed=4), random_policies(3, seed=5)):
        mixed = np.concatenate([seat0[ke.SEAT0_ROWS], seat1[ke.SEAT1_ROWS]])
        keys = [INFO_STATES[i] for i in np.concatenate([ke.SEAT0_ROWS, ke.SEAT1_ROWS])]
        theirs = sequence_form_utils.policy_to_sequence(
            game, to_openspiel(dict(zip(keys, mixed)), game), isa_to_seq
        )
        x, _ = rn.realization_plans(seat0)
        _, y = rn.realization_plans(seat1)
        assert theirs[0] @ payoff[0] @ theirs[1] == pytest.approx(x @ rn.SF.A @ y, abs=1e-12)


def test_behaviour_policy_round_trips_and_is_uniform_where_unreached():
    policies = random_policies(10, seed=6)
    for pol in policies:
        assert np.allclose(rn.behaviour_policy(*rn.realization_plans(pol)), pol, atol=1e-12)
    always_bet_king = policies[0].copy()
    always_bet_king[INFO_STATES.index("2")] = [0.0, 1.0]  # seat 0 never reaches "2pb"
    back = rn.behaviour_policy(*rn.realization_plans(always_bet_king))
    assert np.allclose(back[INFO_STATES.index("2pb")], [0.5, 0.5])
    assert ke.exploitability(back) == pytest.approx(ke.exploitability(always_bet_king), abs=1e-12)
    assert np.allclose(
        ke.head_to_head(back, policies), ke.head_to_head(always_bet_king, policies), atol=1e-12
    )


def test_pool_policy_is_equivalent_to_the_pool():
    agents = random_policies(30, seed=8)
    single = rn.pool_policy(RANDOM_POOL, RANDOM_WEIGHTS)
    assert np.allclose(
        ke.head_to_head(agents, single), pool_utilities(agents, RANDOM_POOL, RANDOM_WEIGHTS), atol=1e-12
    )


def test_bad_pool_weights_are_rejected():
    with pytest.raises(ValueError):
        rn.restricted_nash_response(RANDOM_POOL, 0.5, weights=[0.5, 0.5, 0.5, 0.5])


# ------------------------------------------------------------------- exploitability facts

def test_worst_case_utility_is_minus_exploitability():
    """min_σ u(π, σ) = -e(π): the game value cancels between the two seats."""
    for pol in random_policies(5, seed=9):
        worst = ke.head_to_head(pol, PURE).min()
        assert worst == pytest.approx(-ke.exploitability(pol), abs=1e-12)


# ------------------------------------------------------------------------- RNR and frontier

@pytest.mark.parametrize("name", POOLS)
def test_rnr_points_are_consistent_and_on_the_frontier(name, frontiers):
    pool, weights = POOLS[name]
    for point in frontiers[name].rnr:
        p = point.p
        # the LP's objective is reproduced by kuhn_exact's utility and exploitability of the policy
        assert point.value == pytest.approx(p * point.utility - (1 - p) * point.exploitability, abs=TOL)
        assert point.utility == pytest.approx(pool_utilities(point.policy, pool, weights), abs=1e-12)
        assert point.exploitability == pytest.approx(openspiel_exploitability(point.policy), abs=1e-9)
        if p > 0:  # p = 0 maximises -e only, so any Nash equilibrium is optimal
            assert rn.frontier_utility_at(pool, point.exploitability, weights) == pytest.approx(
                point.utility, abs=1e-7
            )


@pytest.mark.parametrize("name", POOLS)
@pytest.mark.parametrize("lam", LAMBDAS)
def test_penalised_objective_equals_rnr_with_p_one_over_one_plus_lambda(name, lam):
    """Spec §5: max u - λe has the maximisers of the RNR with p = 1/(1+λ), value scaled by 1/p."""
    pool, weights = POOLS[name]
    p = 1.0 / (1.0 + lam)
    rnr = rn.restricted_nash_response(pool, p, weights)
    penalised = rn.penalized_response(pool, lam, weights)
    assert penalised.value == pytest.approx(rnr.value / p, abs=TOL)
    # each LP's maximiser is optimal for the other objective
    assert rnr.utility - lam * rnr.exploitability == pytest.approx(penalised.value, abs=TOL)
    assert p * penalised.utility - (1 - p) * penalised.exploitability == pytest.approx(rnr.value, abs=TOL)
    for point in (rnr, penalised):
        assert rn.frontier_utility_at(pool, point.exploitability, weights) == pytest.approx(
            point.utility, abs=1e-7
        )
        assert rn.frontier_gap(point.policy, pool, weights) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("name", POOLS)
def test_frontier_is_concave_and_non_decreasing(name, frontiers):
    front = frontiers[name]
    assert np.all(np.diff(front.utilities) >= -TOL)
    assert np.all(np.diff(front.utilities, 2) <= TOL)  # equal grid spacing
    assert np.diff(front.utilities)[0] > 1e-6  # not trivially flat


@pytest.mark.parametrize("name", POOLS)
def test_frontier_policies_meet_their_exploitability_budget(name, frontiers):
    pool, weights = POOLS[name]
    front = frontiers[name]
    exploitabilities = ke.exploitability(front.policies)
    assert np.all(exploitabilities <= front.epsilons + 1e-9)
    assert np.allclose(pool_utilities(front.policies, pool, weights), front.utilities, atol=1e-9)
    for index in (0, len(front.epsilons) // 3, -1):
        assert openspiel_exploitability(front.policies[index]) == pytest.approx(
            exploitabilities[index], abs=1e-9
        )


@pytest.mark.parametrize("name", POOLS)
def test_frontier_at_zero_is_the_best_nash_equilibrium_against_the_pool(name, frontiers):
    """Kuhn's Nash set: seat 0 is nash_policy(α) for α in [0, 1/3], seat 1 is unique; the utility
    is linear in α, so the grid (endpoints included) attains the best."""
    pool, weights = POOLS[name]
    nash = np.stack([ke.nash_policy(a) for a in np.linspace(0, 1 / 3, 13)])
    nash_utilities = pool_utilities(nash, pool, weights)
    u0 = frontiers[name].utilities[0]
    assert np.all(u0 >= nash_utilities - TOL)
    assert u0 == pytest.approx(nash_utilities.max(), abs=TOL)
    assert ke.exploitability(frontiers[name].policies[0]) <= TOL


@pytest.mark.parametrize("name", POOLS)
def test_frontier_flattens_at_the_best_response_utility(name, frontiers):
    pool, weights = POOLS[name]
    front = frontiers[name]
    brute_force_best = pool_utilities(PURE, pool, weights).max()  # no LP, no sequence form
    assert front.best_response_utility == pytest.approx(brute_force_best, abs=TOL)
    assert front.utilities[-1] == pytest.approx(brute_force_best, abs=TOL)
    assert rn.frontier_utility_at(pool, 10.0, weights) == pytest.approx(brute_force_best, abs=TOL)
    assert front.flat_epsilon <= front.best_response_exploitability + TOL
    assert rn.frontier_utility_at(pool, front.flat_epsilon, weights) == pytest.approx(
        brute_force_best, abs=1e-7
    )
    pure_br = PURE[np.argmax(pool_utilities(PURE, pool, weights))]
    assert rn.frontier_gap(pure_br, pool, weights) >= -1e-9


def test_gap_is_non_negative_for_random_policies():
    pool = train_pool()
    gaps = [rn.frontier_gap(pol, pool) for pol in random_policies(10, seed=10)]
    assert min(gaps) >= -1e-9 and max(gaps) > 1e-3


def test_train_pool_frontier_numbers(frontiers):
    """Regression numbers for the paper's train pool (cross-checked by the tests above)."""
    front = frontiers["train"]
    print(f"\ntrain pool: u*(0) = {front.utilities[0]:.6f}, u*(max) = {front.best_response_utility:.6f} "
          f"at e = {front.flat_epsilon:.6f} (pure BR e = {front.best_response_exploitability:.6f})")
    points = {}
    for lam in LAMBDAS:
        point = rn.restricted_nash_response(train_pool(), 1 / (1 + lam))
        points[lam] = (point.exploitability, point.utility)
        print(f"  lambda = {lam}: p = {point.p:.4f}, e = {point.exploitability:.6f}, u = {point.utility:.6f}")
    assert front.utilities[0] == pytest.approx(1 / 27, abs=TOL)
    assert front.best_response_utility == pytest.approx(7 / 54, abs=TOL)
    assert front.best_response_exploitability == pytest.approx(1 / 4, abs=TOL)
    assert points[0.25] == pytest.approx((1 / 6, 1 / 9), abs=1e-7)
    assert points[0.4] == pytest.approx((1 / 9, 5 / 54), abs=1e-7)
    assert points[1.0] == pytest.approx((0.0, 1 / 27), abs=1e-7)
    assert points[4.0] == pytest.approx((0.0, 1 / 27), abs=1e-7)
