"""Bayes–Nash equilibria of the auction's stage game on the bid grid, all of them, exactly.

The stage game is a Bayesian game: each bidder's type is its value; a strategy gives, per value,
a distribution over the bid grid. Two bidders: the equilibria are found in these behaviour
strategies by enumerating the extreme points of both best-response polyhedra (the sequence form
of von Stengel's enumeration; Avis, Rosenberg, Savani & von Stengel 2010):

    P = {(x, w): x >= 0, sum_b x[v, b] = 1 for every value v, U2[v', b'](x) <= w[v'] for all v', b'}

where U2[v', b'](x) is bidder 2's expected payoff of bid b' at value v' against x, and Q
likewise for y. A vertex pair is an equilibrium when every (value, bid) of each bidder is unused
or a best response ("completely labelled"). Every equilibrium is a convex combination inside a
maximal set of mutually compatible extreme equilibria (a maximal biclique), and revenue is
bilinear in (x, y), so its minimum and maximum over *all* equilibria are attained at extreme ones.

Why not the plan-form game with `sepo.analysis.equilibria.nash_equilibria_2p` or nashpy: over
type-contingent plans the game is degenerate by construction (mixed plans with the same per-value
marginals are payoff-equivalent, so equilibria form continua), which support enumeration assumes
away. Tests cross-check against both on the plan form. Vertices are enumerated by brute force
over bases (C(2VK, VK) small linear solves, batched): enough for small grids, refused beyond.

Three or more bidders: every pure Bayes–Nash equilibrium, by checking all pure profiles of
type-contingent bids; mixed equilibria are not enumerated there (a stated limitation).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from sepo.errors import SepoError

_TOL = 1e-9
MAX_BASES = 2_000_000


def stage_payoff(rules, value: float, own: int, other: int) -> float:
    """Expected payoff of a 2-bidder round to a bidder of `value` bidding grid index `own`
    against `other` (a tie is won with probability 1/2)."""
    if own < other:
        return 0.0
    price = rules.price((own, other), 0)
    gain = rules.winner_payoff(value, price)
    return gain if own > other else 0.5 * gain


def payoff_tensor(rules) -> np.ndarray:
    """u[v, b, b'] for one bidder: value index v, own bid b, other's bid b' (2 bidders)."""
    k = len(rules.bids)
    return np.array(
        [[[stage_payoff(rules, v, b, o) for o in range(k)] for b in range(k)] for v in rules.values]
    )


def revenue_matrix(rules) -> np.ndarray:
    """Seller revenue for the bid pair (b, b'): the higher bid (first price) or the lower (second)."""
    k = len(rules.bids)
    return np.array([[rules.price((b, o), 0 if b >= o else 1) for o in range(k)] for b in range(k)])


@dataclass(frozen=True, eq=False)
class Equilibrium:
    """One (extreme) Bayes–Nash equilibrium: per bidder a [values, bids] behaviour strategy."""

    strategies: tuple[np.ndarray, ...]
    revenue: float
    payoffs: tuple[float, ...]
    component: int = 0
    """The first maximal component holding it (`components`: all of them)."""
    components: tuple[int, ...] = (0,)
    """Every maximal biclique it belongs to: an extreme equilibrium can be in several."""

    @property
    def symmetric(self) -> bool:
        return all(np.allclose(s, self.strategies[0], atol=1e-9) for s in self.strategies)

    @property
    def pure(self) -> bool:
        return all(np.allclose(s, np.round(s), atol=1e-9) for s in self.strategies)

    def describe(self, rules) -> str:
        parts = []
        for strategy in self.strategies:
            per_value = []
            for v, row in zip(rules.values, strategy):
                mix = " ".join(f"{rules.bids[b]:g}" + ("" if p > 1 - 1e-9 else f"@{p:.3g}")
                               for b, p in enumerate(row) if p > 1e-9)
                per_value.append(f"v{v:g}->{mix}")
            parts.append("(" + ", ".join(per_value) + ")")
        return " vs ".join(parts)


@dataclass(frozen=True, eq=False)
class EquilibriumSet:
    """All equilibria of the stage game: the extreme ones, grouped into maximal components."""

    rules: object
    equilibria: list[Equilibrium]
    components: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    complete: bool = True
    method: str = ""

    @property
    def revenue_range(self) -> tuple[float, float]:
        revenues = [e.revenue for e in self.equilibria]
        return min(revenues), max(revenues)


def _check_size(rules) -> None:
    width = len(rules.values) * len(rules.bids)
    bases = _binomial(2 * width, width)
    if bases > MAX_BASES:
        raise SepoError(
            f"stage-game equilibria: {len(rules.values)} values x {len(rules.bids)} bids needs {bases:,} "
            f"vertex bases (limit {MAX_BASES:,}); use a coarser grid"
        )


def _binomial(n: int, k: int) -> int:
    from math import comb

    return comb(n, k)


def _vertices(rules, opponent_payoff: np.ndarray):
    """Vertices of {(x, w): x >= 0, rows of x sum to 1, U(x) <= w}, where the opponent's payoff
    of bid b' at value v' against x is sum_b xbar[b] opponent_payoff[v', b', b] and xbar is
    x's bid distribution averaged over values. Returns x [n, V, K], labels [n, 2VK] (bool:
    x = 0 for the first VK, opponent's (v', b') tight for the last VK)."""
    probs = np.asarray(rules.value_probs)
    nv, k = len(rules.values), len(rules.bids)
    width = nv * k
    dim = width + nv
    # Inequalities G z <= h over z = (x flattened, w).
    nonneg = np.hstack([-np.eye(width), np.zeros((width, nv))])
    best = np.zeros((width, dim))
    for v2 in range(nv):
        for b2 in range(k):
            row = v2 * k + b2
            for v in range(nv):
                best[row, v * k:(v + 1) * k] = probs[v] * opponent_payoff[v2, b2, :]
            best[row, width + v2] = -1.0
    g = np.vstack([nonneg, best])
    h = np.zeros(2 * width)
    eq = np.zeros((nv, dim))
    for v in range(nv):
        eq[v, v * k:(v + 1) * k] = 1.0
    subsets = np.array(list(itertools.combinations(range(2 * width), width)))
    systems = np.concatenate([np.broadcast_to(eq, (len(subsets), nv, dim)), g[subsets]], axis=1)
    rhs = np.concatenate([np.ones(nv), np.zeros(width)])
    singular = np.linalg.svd(systems, compute_uv=False)
    ok = singular[:, -1] > 1e-10 * singular[:, 0]
    z = np.linalg.solve(systems[ok], np.broadcast_to(rhs, (ok.sum(), dim))[..., None])[..., 0]
    scale = 1.0 + np.abs(g).max()
    feasible = np.all(z @ g.T <= h + _TOL * scale, axis=1)
    z = z[feasible]
    z[:, :width] = np.where(np.abs(z[:, :width]) < _TOL, 0.0, z[:, :width])
    unique = []
    for point in z:
        if not any(np.allclose(point, u, atol=1e-8) for u in unique):
            unique.append(point)
    z = np.array(unique)
    labels = np.abs(z @ g.T - h) <= 1e-8 * scale
    return z[:, :width].reshape(-1, nv, k), labels


def enumerate_equilibria(rules) -> EquilibriumSet:
    """All Bayes–Nash equilibria of the stage game (see the module docstring)."""
    if rules.bidders != 2:
        return _pure_equilibria(rules)
    _check_size(rules)
    u = payoff_tensor(rules)  # the game is symmetric: both bidders' payoffs are u
    x_points, x_labels = _vertices(rules, u)
    width = x_labels.shape[1] // 2
    # Q is P with the roles swapped; its labels are (own zero, opponent tight) the same way.
    compatible = (x_labels[:, None, :width] | x_labels[None, :, width:]) & (
        x_labels[:, None, width:] | x_labels[None, :, :width]
    )
    pairs = np.argwhere(compatible.all(axis=2))
    revenue = revenue_matrix(rules)
    probs = np.asarray(rules.value_probs)
    equilibria, index = [], {}
    for i, j in pairs:
        x, y = x_points[i], x_points[j]
        xbar, ybar = probs @ x, probs @ y
        payoffs = (
            float(probs @ np.einsum("vbo,vb,o->v", u, x, ybar)),
            float(probs @ np.einsum("vbo,vb,o->v", u, y, xbar)),
        )
        index[(i, j)] = len(equilibria)
        equilibria.append(Equilibrium((x, y), float(xbar @ revenue @ ybar), payoffs))
    components = _maximal_bicliques([tuple(p) for p in pairs])
    component_of: dict = {}
    for c, (rows, cols) in enumerate(components):
        for i in rows:
            for j in cols:
                component_of.setdefault((i, j), []).append(c)
    equilibria = [
        Equilibrium(
            e.strategies, e.revenue, e.payoffs, component_of[tuple(p)][0], tuple(component_of[tuple(p)])
        )
        for e, p in zip(equilibria, pairs)
    ]
    members = [tuple(index[(i, j)] for i in rows for j in cols) for rows, cols in components]
    return EquilibriumSet(
        rules,
        equilibria,
        members,
        True,
        "extreme equilibria by vertex enumeration of the behaviour-strategy best-response polyhedra",
    )


def _maximal_bicliques(pairs):
    """Maximal sets (rows, cols) with every (row, col) an equilibrium pair (closure of rows)."""
    neighbours: dict[int, frozenset] = {}
    for i, j in pairs:
        neighbours[i] = neighbours.get(i, frozenset()) | {j}
    closed = set()
    frontier = set(neighbours.values())
    while frontier:
        closed |= frontier
        frontier = {a & b for a in closed for b in closed if a & b} - closed
    found = []
    for cols in closed:
        rows = frozenset(i for i, n in neighbours.items() if cols <= n)
        found.append((rows, cols))
    maximal = [
        (r, c) for r, c in found if not any((r <= r2 and c <= c2) and (r, c) != (r2, c2) for r2, c2 in found)
    ]
    return sorted((tuple(sorted(r)), tuple(sorted(c))) for r, c in maximal)


def _pure_equilibria(rules) -> EquilibriumSet:
    """All pure Bayes–Nash equilibria for n >= 3 bidders, by checking every profile of plans."""
    n, nv, k = rules.bidders, len(rules.values), len(rules.bids)
    plans = list(itertools.product(range(k), repeat=nv))
    if len(plans) ** n > 200_000:
        raise SepoError(
            f"stage-game equilibria for {n} bidders: {len(plans) ** n:,} pure profiles exceed the limit "
            "200,000"
        )
    probs = np.asarray(rules.value_probs)
    others_values = list(itertools.product(range(nv), repeat=n - 1))
    others_probs = [float(np.prod([probs[v] for v in vs])) for vs in others_values]

    def bid_payoffs(value, other_plans):
        """Expected payoff of each own bid at `value` against the others' plans; and revenue."""
        out = np.zeros(k)
        for vs, weight in zip(others_values, others_probs):
            bids = [plan[v] for plan, v in zip(other_plans, vs)]
            for own in range(k):
                full = [own, *bids]
                tied = rules.highest(full)
                if 0 in tied:
                    out[own] += weight * rules.winner_payoff(value, rules.price(full, 0)) / len(tied)
        return out

    equilibria = []
    for profile in itertools.product(plans, repeat=n):
        stable, payoffs = True, []
        for i in range(n):
            others = profile[:i] + profile[i + 1:]
            expected = 0.0
            for v in range(nv):
                gains = bid_payoffs(rules.values[v], others)
                if gains[profile[i][v]] < gains.max() - _TOL:
                    stable = False
                    break
                expected += probs[v] * gains[profile[i][v]]
            if not stable:
                break
            payoffs.append(expected)
        if stable:
            revenue = 0.0
            for vs in itertools.product(range(nv), repeat=n):
                bids = [plan[v] for plan, v in zip(profile, vs)]
                weight = float(np.prod([probs[v] for v in vs]))
                revenue += weight * rules.price(bids, rules.highest(bids)[0])
            strategies = tuple(np.eye(k)[list(plan)] for plan in profile)
            equilibria.append(Equilibrium(strategies, revenue, tuple(payoffs)))
    if not equilibria:
        raise SepoError(
            f"no pure Bayes–Nash equilibrium of the {n}-bidder stage game on this grid; mixed equilibria "
            "are enumerated for 2 bidders only"
        )
    return EquilibriumSet(
        rules,
        equilibria,
        [(i,) for i in range(len(equilibria))],
        False,
        f"pure equilibria only, by checking all {len(plans) ** n:,} profiles of type-contingent bids",
    )


def undominated_bids(rules) -> np.ndarray:
    """[values, bids]: whether a bid is not weakly dominated at a value by another bid (one that
    pays at least as much against every profile of the others' bids and more against one). In a
    second-price auction on the grid, bidding one's value dominates every other bid; in first
    price, bidding above one's value and the lowest bid at a high value are dominated."""
    n, k = rules.bidders, len(rules.bids)
    profiles = list(itertools.product(range(k), repeat=n - 1))
    keep = np.ones((len(rules.values), k), dtype=bool)
    for v, value in enumerate(rules.values):
        pay = np.zeros((k, len(profiles)))
        for b in range(k):
            for j, others in enumerate(profiles):
                bids = [b, *others]
                tied = rules.highest(bids)
                if 0 in tied:
                    pay[b, j] = rules.winner_payoff(value, rules.price(bids, 0)) / len(tied)
        for b in range(k):
            keep[v, b] = not any(
                np.all(pay[c] >= pay[b] - _TOL) and np.any(pay[c] > pay[b] + _TOL) for c in range(k) if c != b
            )
    return keep


@dataclass(frozen=True, eq=False)
class Benchmark:
    """The competitive benchmark: the lowest-revenue stage-game equilibrium in undominated bids.

    Why the lowest: every equilibrium is competitive play, so revenue is "lost" to the seller
    only when it falls below what *every* equilibrium would bring; measuring against a higher
    one would count equilibrium behaviour as harm. Why undominated: a profile that needs a weakly
    dominated bid can itself be collusion. At second price on bids 1-4 the lowest-revenue
    equilibrium is the textbook collusive one (one bidder always bids 1, the other always 4,
    revenue 1.0), against which collusion could never be flagged; bidding one's value dominates
    both of those bids. Where no equilibrium uses undominated bids only, the lowest of all is
    taken and `selection` says so."""

    equilibrium: Equilibrium
    rules: object
    all_equilibria: EquilibriumSet
    selection: str = "the lowest-revenue equilibrium in undominated bids"

    @property
    def revenue(self) -> float:
        return self.equilibrium.revenue

    def revenue_given(self, values) -> float:
        """Expected benchmark revenue given the round's values (averaged over which bidder plays
        which equilibrium strategy, so it is symmetric; its mean over values is `revenue`)."""
        rules = self.rules
        strategies = self.equilibrium.strategies
        n = len(values)
        index = [rules.values.index(v) for v in values]
        orders = list(itertools.permutations(range(n))) if n <= 4 else [tuple(range(n))]
        total = 0.0
        for order in orders:
            mixes = [strategies[order[i]][index[i]] for i in range(n)]
            for bids in itertools.product(range(len(rules.bids)), repeat=n):
                weight = float(np.prod([m[b] for m, b in zip(mixes, bids)]))
                if weight:
                    total += weight * rules.price(bids, rules.highest(bids)[0])
        return total / len(orders)

    def floor_bid(self, value: float) -> float:
        """The lowest bid amount any bidder uses at `value` in the benchmark equilibrium."""
        v = self.rules.values.index(value)
        used = [b for s in self.equilibrium.strategies for b in range(len(self.rules.bids)) if s[v, b] > 1e-9]
        return float(self.rules.bids[min(used)])


def competitive_benchmark(rules) -> Benchmark:
    """The lowest-revenue equilibrium whose bids are all undominated (ties in revenue go to a
    symmetric one); the lowest of all where none is."""
    found = enumerate_equilibria(rules)
    keep = undominated_bids(rules)
    allowed = [e for e in found.equilibria if all(not np.any((s > _TOL) & ~keep) for s in e.strategies)]
    order = lambda e: (round(e.revenue, 12), not e.symmetric)  # noqa: E731
    if allowed:
        return Benchmark(min(allowed, key=order), rules, found)
    return Benchmark(min(found.equilibria, key=order), rules, found,
                     "the lowest-revenue equilibrium (none uses undominated bids only)")


def plan_form(rules):
    """The stage game over type-contingent plans (a bid per value) as a two-player
    `NormalFormGame`, and the plans: the textbook normal form of the Bayesian game."""
    from sepo.analysis.normal_form import NormalFormGame

    if rules.bidders != 2:
        raise SepoError("the plan form is built for 2 bidders")
    u = payoff_tensor(rules)
    probs = np.asarray(rules.value_probs)
    plans = list(itertools.product(range(len(rules.bids)), repeat=len(rules.values)))
    row = np.array(
        [
            [
                sum(
                    probs[v] * probs[w] * u[v, p[v], q[w]]
                    for v in range(len(probs))
                    for w in range(len(probs))
                )
                for q in plans
            ]
            for p in plans
        ]
    )
    names = tuple("/".join(f"{rules.bids[b]:g}" for b in plan) for plan in plans)
    return NormalFormGame.from_bimatrix(row, row.T, actions=(names, names), name="auction stage game"), plans


def behaviour_of(mix, plans, rules) -> np.ndarray:
    """Per-value bid distributions [values, bids] of a mixture over plans."""
    out = np.zeros((len(rules.values), len(rules.bids)))
    for weight, plan in zip(mix, plans):
        for v, b in enumerate(plan):
            out[v, b] += weight
    return out


def is_equilibrium(rules, x, y, tol: float = 1e-9) -> bool:
    """Whether behaviour strategies (x, y) [values, bids] are a Bayes–Nash equilibrium."""
    u = payoff_tensor(rules)
    probs = np.asarray(rules.value_probs)
    for own, other in ((x, y), (y, x)):
        gains = np.einsum("vbo,o->vb", u, probs @ other)
        if np.any((own > tol) & (gains < gains.max(1, keepdims=True) - tol)):
            return False
    return True


def report(values="2,4", bids="1,2,3", value_probs=None) -> str:
    """A text table of every extreme equilibrium under first and second price, clipped and not,
    with seller revenue and bidders' payoffs, and which one the benchmark uses."""
    from sepo.games.auction.rules import AuctionRules, parse_numbers

    values = parse_numbers(values, "values")
    probs = (
        parse_numbers(value_probs, "value-probs") if value_probs else tuple([1.0 / len(values)] * len(values))
    )
    lines = []
    for rule in ("first", "second"):
        for clip in (False, True):
            rules = AuctionRules(
                values=values, value_probs=probs, bids=parse_numbers(bids, "bids"), rule=rule, clip=clip
            )
            bench = competitive_benchmark(rules)
            found = bench.all_equilibria
            low, high = found.revenue_range
            lines.append(
                f"{rule} price, {'clipped (paper)' if clip else 'unclipped'}: {len(found.equilibria)} "
                f"extreme equilibria in {len(found.components)} component(s) (tagged with every component "
                f"that holds them); revenue {low:g} .. {high:g}; benchmark: {bench.selection}"
            )
            for e in sorted(found.equilibria, key=lambda e: (e.components, -e.revenue)):
                mark = "  <- benchmark" if e is bench.equilibrium else ""
                lines.append(
                    f"  [{','.join(map(str, e.components))}] {e.describe(rules)}: revenue {e.revenue:.4g}, "
                    f"payoffs {e.payoffs[0]:.4g}/{e.payoffs[1]:.4g}{mark}"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(report(*sys.argv[1:]))
