"""Equilibria of normal-form games: every Nash equilibrium of a two-player game, the zero-sum
value by linear programming, and correlated / coarse correlated equilibria of n-player games.

Why hand-written rather than nashpy: sepo needs explicit tolerance control (results are
certified by re-checking every incentive constraint, and reported with that residual), batched
linear algebra so larger supports stay fast, and the n-player correlated-equilibrium polytope,
which nashpy does not cover. nashpy is used only as an independent reference in tests and
benchmarks.

Support enumeration (two players, non-degenerate games). In a non-degenerate game every
equilibrium has supports I (row) and J (column) of equal size k, and is the unique solution of

    A[I, J] y_J = v 1,  sum(y_J) = 1      (the column mix makes every row of I equally good)
    x_I B[I, J] = w 1,  sum(x_I) = 1      (the row mix makes every column of J equally good)

with x, y >= 0 and no action outside a support doing better: (A y)_r <= v, (x B)_c <= w.
For each k all C(m, k) * C(n, k) systems are solved at once with batched numpy solves.

Correlated equilibrium (n players). A distribution p over joint actions is a CE when for every
player i and every pair of its actions (a, a'):

    sum_{a_-i} p(a, a_-i) [u_i(a', a_-i) - u_i(a, a_-i)] <= 0     (obeying a beats switching to a')

and a coarse CE when for every i and a': sum_a p(a) [u_i(a', a_-i) - u_i(a)] <= 0 (committing
to a' in advance does not pay). Both are polytopes; a linear objective (welfare, one player's
payoff) picks the extreme points, so max and min welfare bound what the polytope allows.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from sepo.analysis.errors import AnalysisInputError
from sepo.analysis.normal_form import NormalFormGame

_HIGHS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


@dataclass(frozen=True, eq=False)
class NashEnumeration:
    """All Nash equilibria found by support enumeration, and whether the game looked degenerate
    (then equilibria may form continua and only some of their points are listed)."""

    equilibria: list[tuple[np.ndarray, np.ndarray]]
    degenerate: bool


def nash_equilibria_2p(game: NormalFormGame, tol: float = 1e-9) -> NashEnumeration:
    """Every Nash equilibrium of a non-degenerate two-player game, by support enumeration.

    `tol` is relative to the largest absolute payoff; it bounds how much an action outside the
    support may beat the support, and how negative a probability may come out of a solve."""
    if game.num_players != 2:
        raise AnalysisInputError(
            game.source, "players", f"support enumeration needs two players, the game has {game.num_players}"
        )
    row_payoffs, column_payoffs = game.payoffs
    m, n = game.shape
    atol = tol * max(1.0, float(np.abs(game.payoffs).max()))
    equilibria: list[tuple[np.ndarray, np.ndarray]] = []
    degenerate = False
    for k in range(1, min(m, n) + 1):
        rows = np.array(list(itertools.combinations(range(m), k)))
        cols = np.array(list(itertools.combinations(range(n), k)))
        block = (rows[:, None, :, None], cols[None, :, None, :])
        y, v, y_ok = _indifferent_mix(row_payoffs[block])
        x, w, x_ok = _indifferent_mix(np.swapaxes(column_payoffs[block], -1, -2))
        candidates = y_ok & x_ok & np.all(y >= -atol, axis=-1) & np.all(x >= -atol, axis=-1)
        for r, c in zip(*np.nonzero(candidates)):
            x_full = np.zeros(m)
            y_full = np.zeros(n)
            x_full[rows[r]] = np.clip(x[r, c], 0.0, None)
            y_full[cols[c]] = np.clip(y[r, c], 0.0, None)
            x_full /= x_full.sum()
            y_full /= y_full.sum()
            row_values = row_payoffs @ y_full
            column_values = x_full @ column_payoffs
            if row_values.max() > v[r, c] + atol or column_values.max() > w[r, c] + atol:
                continue
            if any(
                np.allclose(x_full, ex, atol=1e-9) and np.allclose(y_full, ey, atol=1e-9)
                for ex, ey in equilibria
            ):
                degenerate = True
                continue
            too_many_best = (np.sum(row_values >= v[r, c] - atol) > k) or (
                np.sum(column_values >= w[r, c] - atol) > k
            )
            zero_weight = np.any(x[r, c] <= atol) or np.any(y[r, c] <= atol)
            degenerate = degenerate or bool(too_many_best or zero_weight)
            equilibria.append((x_full, y_full))
    return NashEnumeration(equilibria, degenerate)


def _indifferent_mix(blocks: np.ndarray):
    """For each k x k block M, the mix z (sum 1) with M z = value * 1: the opponent's mix that
    makes every action of the support equally good. Returns (z, value, solvable mask)."""
    *batch, k, _ = blocks.shape
    system = np.zeros((*batch, k + 1, k + 1))
    system[..., :k, :k] = blocks
    system[..., :k, k] = -1.0
    system[..., k, :k] = 1.0
    singular_values = np.linalg.svd(system, compute_uv=False)
    solvable = singular_values[..., -1] > 1e-12 * np.maximum(singular_values[..., 0], 1.0)
    safe = np.where(solvable[..., None, None], system, np.eye(k + 1))
    rhs = np.zeros((*batch, k + 1, 1))
    rhs[..., k, 0] = 1.0
    solution = np.linalg.solve(safe, rhs)[..., 0]
    return solution[..., :k], solution[..., k], solvable


@dataclass(frozen=True, eq=False)
class ZeroSumSolution:
    """Value of a two-player zero-sum (or constant-sum) game for the row player, and maximin
    strategies for both players."""

    value: float
    row_strategy: np.ndarray
    column_strategy: np.ndarray


def solve_zero_sum(game: NormalFormGame) -> ZeroSumSolution:
    """Maximin strategies by two linear programs:
    row: max v s.t. x A >= v 1; column: min w s.t. A y <= w 1 (x, y distributions)."""
    if game.num_players != 2:
        raise AnalysisInputError(game.source, "players", "the zero-sum LP needs two players")
    if game.constant_sum() is None:
        raise AnalysisInputError(
            game.source,
            "payoffs",
            "the game is not zero-sum (or constant-sum): payoffs do not sum to a constant in every cell",
        )
    row_payoffs = game.payoffs[0]
    x, value = _maximin(row_payoffs)
    y, _ = _maximin(-row_payoffs.T)
    return ZeroSumSolution(value, x, y)


def _maximin(payoffs: np.ndarray) -> tuple[np.ndarray, float]:
    """The row distribution x maximising min_c (x payoffs)_c, and that guaranteed value."""
    m, n = payoffs.shape
    objective = np.zeros(m + 1)
    objective[-1] = -1.0
    guarantee = np.hstack([-payoffs.T, np.ones((n, 1))])
    total = np.hstack([np.ones((1, m)), np.zeros((1, 1))])
    result = linprog(objective, A_ub=guarantee, b_ub=np.zeros(n), A_eq=total, b_eq=[1.0],
                     bounds=[(0, None)] * m + [(None, None)], method="highs", options=_HIGHS)
    if result.status != 0:
        raise RuntimeError(f"zero-sum LP failed: {result.message}")
    x = np.clip(result.x[:m], 0.0, None)
    x /= x.sum()
    return x, float((x @ payoffs).min())


def incentive_constraints(
    game: NormalFormGame, kind: str = "ce"
) -> tuple[np.ndarray, list[tuple[int, int | None, int]]]:
    """Rows g with g . p <= 0 for every incentive constraint of a CE (`kind="ce"`) or a coarse
    CE (`kind="cce"`), over the flattened joint distribution p. Labels are (player, recommended
    action or None for CCE, deviation)."""
    _check_kind(kind)
    rows, labels = [], []
    for i, size in enumerate(game.shape):
        own = game.payoffs[i]
        recommended = np.indices(game.shape)[i]
        for deviation in range(size):
            gain = np.take(own, [deviation], axis=i) - own
            if kind == "cce":
                rows.append(gain.ravel())
                labels.append((i, None, deviation))
                continue
            for action in range(size):
                if action != deviation:
                    rows.append((gain * (recommended == action)).ravel())
                    labels.append((i, action, deviation))
    return np.array(rows), labels


@dataclass(frozen=True, eq=False)
class CorrelatedEquilibrium:
    """A CE or CCE found by LP: the joint distribution (shape = game.shape), each player's
    expected payoff, the objective reached, and the largest incentive-constraint violation."""

    kind: str
    objective: str
    distribution: np.ndarray
    payoffs: np.ndarray
    objective_value: float
    max_violation: float

    def support(self, game: NormalFormGame, tol: float = 1e-12) -> list[tuple[tuple[str, ...], float]]:
        """Joint actions with positive probability, by name, most likely first."""
        items = [(tuple(game.actions[i][a] for i, a in enumerate(joint)), float(self.distribution[joint]))
                 for joint in zip(*np.nonzero(self.distribution > tol))]
        return sorted(items, key=lambda item: -item[1])


def correlated_equilibrium(
    game: NormalFormGame, kind: str = "ce", objective: str = "max-welfare"
) -> CorrelatedEquilibrium:
    """An extreme CE / CCE for `objective`: "max-welfare", "min-welfare", "max:PLAYER", "min:PLAYER".

    The LP vertex from HiGHS is polished by re-solving its active constraints exactly, so the
    returned distribution meets every incentive constraint to about 1e-12 of the payoff scale."""
    constraints, _ = incentive_constraints(game, kind)
    sense, weights = _objective_weights(game, objective)
    result = linprog(
        -sense * weights,
        A_ub=constraints,
        b_ub=np.zeros(len(constraints)),
        A_eq=np.ones((1, weights.size)),
        b_eq=[1.0],
        bounds=(0, None),
        method="highs-ds",
        options=_HIGHS,
    )
    if result.status != 0:
        raise RuntimeError(f"correlated-equilibrium LP failed: {result.message}")
    p = _polish(result.x, constraints)
    joint = p.reshape(game.shape)
    violation = float(max(0.0, (constraints @ p).max()))
    return CorrelatedEquilibrium(
        kind, objective, joint, game.joint_expected_payoffs(joint), float(weights @ p), violation
    )


def _objective_weights(game: NormalFormGame, objective: str) -> tuple[float, np.ndarray]:
    if objective in ("max-welfare", "min-welfare"):
        return (1.0 if objective.startswith("max") else -1.0), game.welfare().ravel()
    direction, _, player = objective.partition(":")
    if direction not in ("max", "min") or not player:
        raise AnalysisInputError(
            game.source,
            "objective",
            f"unknown objective {objective!r}; use max-welfare, min-welfare, max:PLAYER or min:PLAYER",
        )
    return (1.0 if direction == "max" else -1.0), game.payoffs[game.player_index(player)].ravel()


def _polish(p: np.ndarray, constraints: np.ndarray) -> np.ndarray:
    """Snap an LP vertex onto its defining equations: zero the variables at their bound, make the
    active constraints hold with equality, renormalise. Keeps whichever of the raw and polished
    points violates the constraints less."""
    raw = np.clip(p, 0.0, None)
    raw /= raw.sum()
    scale = max(1.0, float(np.abs(constraints).max()))
    free = raw > 1e-9
    active = constraints @ raw >= -1e-9 * scale
    system = np.vstack([constraints[active][:, free], np.ones((1, int(free.sum())))])
    rhs = np.zeros(len(system))
    rhs[-1] = 1.0
    solution, *_ = np.linalg.lstsq(system, rhs, rcond=None)
    polished = np.zeros_like(raw)
    polished[free] = np.clip(solution, 0.0, None)
    if polished.sum() <= 0:
        return raw
    polished /= polished.sum()
    return min((raw, polished), key=lambda q: float((constraints @ q).max()))


def _check_kind(kind: str) -> None:
    if kind not in ("ce", "cce"):
        raise AnalysisInputError("argument", "kind", f"unknown equilibrium kind {kind!r}; use ce or cce")


@dataclass(frozen=True, eq=False)
class CorrelationGaps:
    """How far a joint distribution is from CE / CCE: per player, the best swap-map gain (CE)
    and the best fixed-action gain (CCE), in payoff per round. Zero means the constraint set holds."""

    ce: np.ndarray
    cce: np.ndarray
    swap_maps: list[np.ndarray]

    @property
    def ce_gap(self) -> float:
        return float(self.ce.max())

    @property
    def cce_gap(self) -> float:
        return float(self.cce.max())


def correlation_gaps(game: NormalFormGame, joint: np.ndarray) -> CorrelationGaps:
    """CE and CCE gaps of a joint distribution, with each player's maximising swap map
    (swap_maps[i][a] = the action that should replace recommendation a)."""
    joint = np.asarray(joint, dtype=float)
    ce, cce, maps = [], [], []
    for i, size in enumerate(game.shape):
        weights = np.moveaxis(joint, i, 0).reshape(size, -1)
        payoffs = np.moveaxis(game.payoffs[i], i, 0).reshape(size, -1)
        value = weights @ payoffs.T  # value[a, a'] = sum p(a, a_-i) u_i(a', a_-i)
        obedient = np.diag(value)
        best = np.where(value.max(axis=1) > obedient, value.argmax(axis=1), np.arange(size))
        ce.append(float((value[np.arange(size), best] - obedient).sum()))
        cce.append(max(0.0, float(value.sum(axis=0).max() - obedient.sum())))
        maps.append(best)
    return CorrelationGaps(np.array(ce), np.array(cce), maps)


def product_distribution(profile) -> np.ndarray:
    """The joint distribution of independent mixed strategies."""
    joint = np.ones(())
    for strategy in profile:
        joint = np.multiply.outer(joint, strategy)
    return joint
