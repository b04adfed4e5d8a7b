"""Restricted Nash responses and the utility-vs-exploitability frontier of one hand of Kuhn poker.

The agent plays both seats (as in `sepo.games.kuhn.exact`) and is scored against a pool of
fixed opponents `[K, 12, 2]`:

    u(π, pool) = Σ_k w_k · head_to_head(π, σ_k)      e(π) = NashConv(π) / 2.

On the sequence form (Koller, Megiddo & von Stengel 1994) a seat-0 strategy is a realization
plan x ≥ 0 with E0 x = e0, a seat-1 strategy is y ≥ 0 with E1 y = e1, and seat 0 wins x·A y.
Then u is linear in the agent's plans (x, y), and each half of e is a best-response value,

    BR0(y) = max_{x'} x'·A y = min {e0·v : E0ᵀ v ≥ A y}
    BR1(x) = max_{y'} -x·A y' = min {e1·w : E1ᵀ w ≥ -Aᵀ x},

so with the dual variables (v, w) as extra LP variables, e(π) ≤ ½(e0·v + e1·w) holds with
equality at the optimum and everything below is a single small linear programme:

- the restricted Nash response (Johanson, Zinkevich & Bowling 2007) for p ∈ [0, 1]:
  max p·u(π, pool) + (1-p)·min_σ u(π, σ), and min_σ u(π, σ) = -e(π) exactly (the game value
  cancels because the agent holds both seats);
- the frontier u*(ε) = max {u(π, pool) : e(π) ≤ ε};
- the penalised objective max u(π, pool) - λ·e(π) of the SEPO spec (§5), kept as its own LP so
  that its claimed equivalence with the RNR at p = 1/(1+λ) is tested rather than assumed.

Hand-written because OpenSpiel's Python side has no sequence-form LP or RNR solver (its
`lp_solver` covers matrix games via cvxopt, and `sequence_form_lp` solves only the Nash
equilibrium, not a restricted response against a pool or an exploitability-constrained one).
Kuhn is tiny (13 sequences per seat), so each LP takes milliseconds with HiGHS.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from sepo.errors import SepoError
from sepo.games.kuhn import exact as kuhn_exact
from sepo.games.kuhn.rules import DEALS, INFO_STATES, PASS, seat0_payoff

# ---------------------------------------------------------------- sequence form of Kuhn poker

SEAT_INFO_STATES = (
    tuple(INFO_STATES[i] for i in kuhn_exact.SEAT0_ROWS),  # "c", "cpb"
    tuple(INFO_STATES[i] for i in kuhn_exact.SEAT1_ROWS),  # "cp", "cb"
)
"""Per seat, its six information states; sequence (I, a) of a seat has index 1 + 2·k + a where
k is I's position here. Index 0 is the empty sequence."""
NUM_SEQUENCES = 13


def sequence_index(seat: int, info_state: str, action: int) -> int:
    return 1 + 2 * SEAT_INFO_STATES[seat].index(info_state) + action


def parent_sequence(seat: int, info_state: str) -> int:
    """The seat's own last sequence before `info_state`: seat 0 reaches "cpb" by passing at "c";
    every other information state follows the empty sequence."""
    if seat == 0 and info_state.endswith("pb"):
        return sequence_index(0, info_state[0], PASS)
    return 0


@dataclass(frozen=True)
class SequenceForm:
    """Realization-plan constraints E_s z = e_s (z ≥ 0) for each seat and the payoff matrix A:
    seat 0 wins x·A y, chance (1/6 per deal) folded into A."""

    E0: np.ndarray  # [7, 13]
    e0: np.ndarray  # [7]
    E1: np.ndarray  # [7, 13]
    e1: np.ndarray  # [7]
    A: np.ndarray  # [13, 13]


def _constraints(seat: int) -> tuple[np.ndarray, np.ndarray]:
    E = np.zeros((1 + len(SEAT_INFO_STATES[seat]), NUM_SEQUENCES))
    e = np.zeros(len(E))
    E[0, 0], e[0] = 1.0, 1.0  # the empty sequence has realization weight 1
    for k, key in enumerate(SEAT_INFO_STATES[seat]):  # children sum to the parent's weight
        E[1 + k, parent_sequence(seat, key)] = -1.0
        E[1 + k, sequence_index(seat, key, 0)] += 1.0
        E[1 + k, sequence_index(seat, key, 1)] += 1.0
    return E, e


def _payoff_matrix() -> np.ndarray:
    A = np.zeros((NUM_SEQUENCES, NUM_SEQUENCES))
    for cards in DEALS:
        for history in ("pp", "bp", "bb", "pbp", "pbb"):
            last = [0, 0]  # each seat's last sequence on the path to this terminal history
            for t, move in enumerate(history):
                seat = t % 2
                last[seat] = sequence_index(seat, f"{cards[seat]}{history[:t]}", "pb".index(move))
            A[last[0], last[1]] += seat0_payoff(history, *cards) / len(DEALS)
    return A


def sequence_form() -> SequenceForm:
    E0, e0 = _constraints(0)
    E1, e1 = _constraints(1)
    return SequenceForm(E0=E0, e0=e0, E1=E1, e1=e1, A=_payoff_matrix())


SF = sequence_form()


def realization_plans(policy) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): the realization plans `[..., 13]` of a behaviour policy `[..., 12, 2]` in seat 0
    and in seat 1 (the probability of the seat's own moves along each sequence)."""
    policy = kuhn_exact.as_policy(policy)
    plans = []
    for seat in (0, 1):
        z = np.zeros(policy.shape[:-2] + (NUM_SEQUENCES,))
        z[..., 0] = 1.0
        for key in SEAT_INFO_STATES[seat]:  # parents ("c") come before children ("cpb")
            row = INFO_STATES.index(key)
            for a in (0, 1):
                z[..., sequence_index(seat, key, a)] = (
                    z[..., parent_sequence(seat, key)] * policy[..., row, a]
                )
        plans.append(z)
    return plans[0], plans[1]


def behaviour_policy(x: np.ndarray, y: np.ndarray, reach_tol: float = 1e-12) -> np.ndarray:
    """The behaviour policy `[12, 2]` whose seat-0 part realises x and seat-1 part realises y.
    An information state the seat's own plan never reaches (parent weight ≤ reach_tol) gets the
    uniform policy: nothing there affects any value or exploitability."""
    policy = np.full((12, 2), 0.5)
    for seat, z in ((0, np.asarray(x, float)), (1, np.asarray(y, float))):
        for key in SEAT_INFO_STATES[seat]:
            children = np.clip([z[sequence_index(seat, key, a)] for a in (0, 1)], 0.0, None)
            if z[parent_sequence(seat, key)] > reach_tol and children.sum() > 0:
                policy[INFO_STATES.index(key)] = children / children.sum()
    return policy


# ------------------------------------------------------------------------------ the pool

def _pool_weights(opponents: np.ndarray, weights) -> np.ndarray:
    if weights is None:
        return np.full(len(opponents), 1.0 / len(opponents))
    weights = np.asarray(weights, dtype=float)
    if weights.shape != (len(opponents),) or np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
        raise ValueError(
            f"pool weights must be {len(opponents)} non-negative numbers summing to 1; got {weights}"
        )
    return weights


def _pool_plans(opponents, weights=None) -> tuple[np.ndarray, np.ndarray]:
    """The pool's mixed realization plans (x̄, ȳ): u(π, pool) is linear in them."""
    opponents = kuhn_exact.as_policy(opponents)
    if opponents.ndim != 3:
        raise ValueError(f"opponents must be an array [K, 12, 2]; got shape {opponents.shape}")
    w = _pool_weights(opponents, weights)
    x, y = realization_plans(opponents)
    return w @ x, w @ y


def pool_policy(opponents, weights=None) -> np.ndarray:
    """A single policy `[12, 2]` equivalent to the pool (Kuhn's theorem, per seat): every agent
    scores the same against it as on average against the pool."""
    return behaviour_policy(*_pool_plans(opponents, weights))


def pool_utility(policy, opponents, weights=None) -> float:
    """u(π, pool): the agent's expected chips per hand, averaged over seats and the pool."""
    opponents = kuhn_exact.as_policy(opponents)
    return float(_pool_weights(opponents, weights) @ kuhn_exact.head_to_head(policy, opponents))


# ------------------------------------------------------------------------- the LP itself
# Variables z = [x (13), y (13), v (7), w (7)]: the agent's seat-0 and seat-1 realization plans
# and the duals of the two best-response LPs.

_NX, _NV = NUM_SEQUENCES, len(SF.e0)
_X, _Y = slice(0, _NX), slice(_NX, 2 * _NX)
_V, _W = slice(2 * _NX, 2 * _NX + _NV), slice(2 * _NX + _NV, 2 * _NX + 2 * _NV)
_NZ = 2 * _NX + 2 * _NV
_HIGHS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def _utility_row(opponents, weights) -> np.ndarray:
    """c_u with c_u·z = u(π, pool) = ½(x·A ȳ - x̄·A y)."""
    x_bar, y_bar = _pool_plans(opponents, weights)
    c = np.zeros(_NZ)
    c[_X] = 0.5 * SF.A @ y_bar
    c[_Y] = -0.5 * SF.A.T @ x_bar
    return c


def _exploitability_row() -> np.ndarray:
    """c_e with c_e·z = ½(e0·v + e1·w) ≥ e(π), with equality at the best duals."""
    c = np.zeros(_NZ)
    c[_V] = 0.5 * SF.e0
    c[_W] = 0.5 * SF.e1
    return c


def _realization_and_dual_constraints():
    A_eq = np.zeros((2 * _NV, _NZ))
    A_eq[:_NV, _X] = SF.E0
    A_eq[_NV:, _Y] = SF.E1
    b_eq = np.concatenate([SF.e0, SF.e1])
    A_ub = np.zeros((2 * _NX, _NZ))
    A_ub[:_NX, _Y], A_ub[:_NX, _V] = SF.A, -SF.E0.T  # E0ᵀ v ≥ A y
    A_ub[_NX:, _X], A_ub[_NX:, _W] = -SF.A.T, -SF.E1.T  # E1ᵀ w ≥ -Aᵀ x
    bounds = [(0, None)] * (2 * _NX) + [(None, None)] * (2 * _NV)
    return A_eq, b_eq, A_ub, np.zeros(2 * _NX), bounds


def _maximise(objective: np.ndarray, extra_ub=()) -> tuple[float, np.ndarray]:
    """max objective·z over strategies and duals, with extra rows (a, b) meaning a·z ≤ b."""
    A_eq, b_eq, A_ub, b_ub, bounds = _realization_and_dual_constraints()
    if extra_ub:
        A_ub = np.vstack([A_ub] + [a[None] for a, _ in extra_ub])
        b_ub = np.concatenate([b_ub, [b for _, b in extra_ub]])
    result = linprog(-objective, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds,
                     method="highs", options=_HIGHS)
    if result.status != 0:
        raise RuntimeError(f"restricted_nash: the LP failed: {result.message}")
    return -result.fun, result.x


# ------------------------------------------------------------------------------ results

@dataclass(frozen=True)
class RNRPoint:
    """An optimal agent policy with its utility vs the pool and its exploitability (both
    recomputed exactly by `kuhn_exact` from the policy), the weight p on the pool (None for a
    frontier point) and the LP's optimal objective value."""

    p: float | None
    policy: np.ndarray
    utility: float
    exploitability: float
    value: float


def _point(p, z, value, opponents, weights) -> RNRPoint:
    policy = behaviour_policy(z[_X], z[_Y])
    return RNRPoint(p=p, policy=policy, utility=pool_utility(policy, opponents, weights),
                    exploitability=float(kuhn_exact.exploitability(policy)), value=float(value))


def restricted_nash_response(opponents, p: float, weights=None) -> RNRPoint:
    """The RNR counter-strategy: max over π of p·u(π, pool) + (1-p)·min_σ u(π, σ), where
    min_σ u(π, σ) = -e(π). `value` is that optimum."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1]; got {p}")
    value, z = _maximise(p * _utility_row(opponents, weights) - (1 - p) * _exploitability_row())
    return _point(p, z, value, opponents, weights)


def penalized_response(opponents, lam: float, weights=None) -> RNRPoint:
    """max over π of u(π, pool) - lam·e(π) (the SEPO §5 objective); `value` is that optimum."""
    if lam < 0:
        raise ValueError(f"lam must be non-negative; got {lam}")
    value, z = _maximise(_utility_row(opponents, weights) - lam * _exploitability_row())
    return _point(None, z, value, opponents, weights)


def frontier_point(opponents, epsilon: float, weights=None) -> RNRPoint:
    """The best policy against the pool among those with exploitability ≤ epsilon."""
    if epsilon < 0:
        raise ValueError(f"epsilon must be non-negative; got {epsilon}")
    value, z = _maximise(_utility_row(opponents, weights), extra_ub=[(_exploitability_row(), epsilon)])
    return _point(None, z, value, opponents, weights)


def frontier_utility_at(opponents, epsilon: float, weights=None) -> float:
    """u*(ε) = max {u(π, pool) : e(π) ≤ ε}."""
    return frontier_point(opponents, epsilon, weights).value


def frontier_gap(policy, opponents, weights=None) -> float:
    """How far `policy` lies below the frontier: u*(e(π)) - u(π, pool) ≥ 0."""
    epsilon = float(kuhn_exact.exploitability(policy))
    return frontier_utility_at(opponents, epsilon, weights) - pool_utility(policy, opponents, weights)


@dataclass(frozen=True)
class Frontier:
    """u*(ε) on a grid of ε from 0 to the exploitability of the pure best response to the pool,
    the RNR points for a list of p, and where the frontier flattens: `flat_epsilon` is the least
    exploitability of any policy reaching the best-response utility `best_response_utility`
    (found with a 1e-9 slack on that utility, so it may read a few 1e-9 low)."""

    epsilons: np.ndarray  # [num]
    utilities: np.ndarray  # [num] u*(ε)
    policies: np.ndarray  # [num, 12, 2] the maximisers
    rnr: tuple[RNRPoint, ...]
    best_response_utility: float
    best_response_exploitability: float  # of kuhn_exact's pure best response to the pool
    flat_epsilon: float


DEFAULT_PS = (0.0, 0.1, 0.2, 0.5, 0.8, 0.9, 1.0)


def frontier(opponents, num: int = 41, ps=DEFAULT_PS, weights=None) -> Frontier:
    """The utility-vs-exploitability frontier against the pool (one LP per ε and per p)."""
    pure_br = kuhn_exact.best_response(pool_policy(opponents, weights))
    br_utility, _ = _maximise(_utility_row(opponents, weights))
    _, z = _maximise(
        -_exploitability_row(), extra_ub=[(-_utility_row(opponents, weights), -(br_utility - 1e-9))]
    )
    flat_epsilon = float(kuhn_exact.exploitability(behaviour_policy(z[_X], z[_Y])))
    br_exploitability = float(kuhn_exact.exploitability(pure_br))
    epsilons = np.linspace(0.0, br_exploitability, num)
    points = [frontier_point(opponents, eps, weights) for eps in epsilons]
    return Frontier(
        epsilons=epsilons,
        utilities=np.array([pt.value for pt in points]),
        policies=np.stack([pt.policy for pt in points]),
        rnr=tuple(restricted_nash_response(opponents, p, weights) for p in ps),
        best_response_utility=float(br_utility),
        best_response_exploitability=br_exploitability,
        flat_epsilon=flat_epsilon,
    )


def frontier_report(train_specs, lambda_values: list[float], runs) -> tuple[dict, "Frontier"]:
    """The domain's `frontier` hook: the exact frontier against the train pool, the RNR points
    at each λe (p = 1/(1+λe)), and each run directory's policy placed against it."""
    from sepo.policies.tabular import TabularPolicy
    from sepo.training.tabular import load_run_policy

    opponents = np.stack([spec.build().table for spec in train_specs])
    result_frontier = frontier(opponents, ps=[1 / (1 + v) for v in lambda_values])
    result = {
        "game": "kuhn",
        "pool": [s.label for s in train_specs],
        "epsilons": list(map(float, result_frontier.epsilons)),
        "utilities": list(map(float, result_frontier.utilities)),
        "utility_at_zero": float(result_frontier.utilities[0]),
        "best_response_utility": float(result_frontier.best_response_utility),
        "best_response_exploitability": float(result_frontier.best_response_exploitability),
        "rnr": [
            {
                "lambda_e": lam,
                "p": float(point.p),
                "exploitability": float(point.exploitability),
                "utility": float(point.utility),
                "policy": TabularPolicy(point.policy, INFO_STATES).to_json(),
            }
            for lam, point in zip(lambda_values, result_frontier.rnr)
        ],
        "runs": [],
    }
    for run_dir in runs:
        policy = load_run_policy(run_dir, "kuhn")
        if tuple(policy.keys) != tuple(INFO_STATES) or np.shape(policy.table) != (len(INFO_STATES), 2):
            raise SepoError(
                f"{run_dir}: its policy is not a Kuhn poker table ({len(INFO_STATES)} information states, 2 "
                "actions)"
            )
        table = policy.table
        e = float(kuhn_exact.exploitability(table))
        u = float(kuhn_exact.head_to_head(table, opponents).mean())
        best = frontier_utility_at(opponents, e)
        result["runs"].append(
            {
                "run": str(run_dir),
                "exploitability": e,
                "utility": u,
                "frontier_utility": best,
                "gap": best - u,
            }
        )
    return result, result_frontier
