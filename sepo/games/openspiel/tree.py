"""A two-player OpenSpiel game enumerated once into arrays, and the batched sequence-form
computations every exact number of the domain comes from.

Rows are information states (both seats, disjoint), columns their legal actions in OpenSpiel's
order; a policy is a table `[..., rows, width]` (zero-padded). A sequence is one (row, column),
flattened as `row * width + column`, plus the empty sequence `EMPTY = rows * width`. A policy's
realization plan `X[..., EMPTY + 1]` holds, for every sequence, the product of the policy's own
probabilities along it; a terminal's probability under a profile is chance × X_seat0 × X_seat1 at
the terminal's last sequence of each seat (perfect recall).

The best response of seat i against a table is one sparse product and one pass over i's rows from
the deepest: `W = X_j @ G_i` (G_i[s_j, s_i] = Σ_z chance(z)·gain_i(z) over the terminals whose last
sequences are s_j and s_i), then V(I) = max_a W[I,a] + Σ_{I' after (I,a)} V(I'). The same pass with
the agent's own probabilities in place of the max gives counterfactual values, hence the Danskin
gradient. Everything is batched over a leading axis of policies (numpy and scipy.sparse), which is
why it beats OpenSpiel's per-policy tree walk by orders of magnitude (benchmarks/bench_openspiel.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from sepo.errors import SepoError

MAX_HISTORIES = 2_000_000
"""The most histories the domain enumerates for an exact solver (liars_dice with one six-sided die
each has 294,883; each history costs about 100 bytes in the arrays)."""


class NoTree(SepoError):
    """The game cannot be enumerated for an exact solver: too large, or its information states do
    not have perfect recall."""


@dataclass
class Tree:
    keys: tuple[str, ...]
    seat: np.ndarray               # [R] seat of each row
    legal: np.ndarray              # [R, W] bool
    actions: list                  # [R] OpenSpiel action ids, legal order
    decisions: list                # [R] canonical Decision (sepo.games.base)
    parent: np.ndarray             # [R] parent sequence (flat) of each row, EMPTY if none
    levels: list                   # [seat][depth] -> rows at that own depth
    node_kind: np.ndarray          # [N] seat >= 0, -1 chance, -4 terminal
    node_row: np.ndarray           # [N] row at decision nodes, -1 elsewhere
    node_depth: np.ndarray         # [N]
    edges: np.ndarray              # [N - 1, 3] (parent node, column, child node) of every move
    edge_prob: np.ndarray          # [N - 1] chance probability of a chance node's move (0 elsewhere)
    fanout: int                    # A: the most children of any node (a chance node may have many)
    node_returns: np.ndarray       # [N, players] returns at terminals
    term_chance: np.ndarray        # [Z]
    term_returns: np.ndarray       # [Z, players]
    term_last: np.ndarray          # [Z, players] last sequence of each seat
    game_name: str = "the game"

    @property
    def width(self) -> int:
        return self.legal.shape[1]

    @property
    def players(self) -> int:
        return self.term_last.shape[1]

    # -- the dense node arrays, made on first use (the node-level passes of training) ----------
    def dense_bytes(self) -> int:
        """Bytes of `children`, `chance_prob` and one pass's move probabilities: [N, A] each, 8 bytes
        an entry."""
        return 24 * len(self.node_kind) * self.fanout

    def _dense(self) -> None:
        """`children` and `chance_prob`, after checking that they fit (`check_fits`): a game with one
        wide chance node (bargaining's 1,000 instances) makes them [N, 1,000], gigabytes where the
        sequence-form arrays of the exact solver are megabytes."""
        check_fits(
            self.game_name,
            f"the [histories x moves] arrays the trainers walk ({len(self.node_kind):,} "
            f"histories x {self.fanout:,} moves, three arrays of 8 bytes an entry)",
            self.dense_bytes(),
        )
        children = np.full((len(self.node_kind), self.fanout), -1, dtype=np.int64)
        chance_prob = np.zeros((len(self.node_kind), self.fanout))
        children[self.edges[:, 0], self.edges[:, 1]] = self.edges[:, 2]
        chance_prob[self.edges[:, 0], self.edges[:, 1]] = self.edge_prob
        self.__dict__["_children"], self.__dict__["_chance_prob"] = children, chance_prob

    @property
    def children(self) -> np.ndarray:
        """`[N, A]`: the child node of each column (a chance node's: of each outcome), -1 pad."""
        if "_children" not in self.__dict__:
            self._dense()
        return self.__dict__["_children"]

    @property
    def chance_prob(self) -> np.ndarray:
        """`[N, A]`: chance probabilities of each chance node's outcomes (0 elsewhere)."""
        if "_chance_prob" not in self.__dict__:
            self._dense()
        return self.__dict__["_chance_prob"]

    @property
    def empty(self) -> int:
        return len(self.keys) * self.width

    def flat(self, rows: np.ndarray) -> np.ndarray:
        return rows[:, None] * self.width + np.arange(self.width)

    # -- sequence-form pieces ------------------------------------------------------------------
    def matrix(self, weights: np.ndarray, rows_seat: int) -> sp.csr_matrix:
        """`M[s_other, s_rows_seat] = Σ_z chance(z)·weights(z)` over terminals by their last sequences."""
        size = self.empty + 1
        values = self.term_chance * weights
        return sp.csr_matrix(
            (values, (self.term_last[:, 1 - rows_seat], self.term_last[:, rows_seat])), shape=(size, size)
        )

    def realization(self, table: np.ndarray) -> np.ndarray:
        """`[B, EMPTY + 1]` realization plan of tables `[B, R, W]` (both seats' rows)."""
        plan = np.empty((table.shape[0], self.empty + 1))
        plan[:, self.empty] = 1.0
        for seat_levels in self.levels:
            for rows in seat_levels:
                plan[:, self.flat(rows)] = plan[:, self.parent[rows]][..., None] * table[:, rows, :]
        return plan

    def _scatter(self, rows: np.ndarray) -> sp.csr_matrix:
        """`[len(rows), EMPTY + 1]`: row k adds into its parent sequence."""
        return sp.csr_matrix((np.ones(len(rows)), (np.arange(len(rows)), self.parent[rows])),
                             shape=(len(rows), self.empty + 1))

    def best_response(
        self, plan_other: np.ndarray, gain: sp.csr_matrix, seat: int, least: sp.csr_matrix | None = None
    ):
        """(value `[B]`, one-hot choice `[B, R, W]` on `seat`'s rows) of `seat`'s best response to
        the other seat's realization plans, maximising Σ chance·gain; with `least` (Σ chance·the
        other seat's payoff, same layout), moves that tie on the gain go to the one that leaves
        the other seat least (the tie rule of every sepo solver)."""
        weights = np.asarray((gain.T @ plan_other.T).T)
        below = np.zeros_like(weights)
        if least is not None:
            left = np.asarray((least.T @ plan_other.T).T)
            left_below = np.zeros_like(left)
        choice = np.zeros((plan_other.shape[0], len(self.keys), self.width))
        for rows in reversed(self.levels[seat]):
            idx = self.flat(rows)
            q = np.where(self.legal[rows], weights[:, idx] + below[:, idx], -np.inf)
            if least is None:
                best = q.argmax(-1)
            else:
                top = q.max(-1, keepdims=True)
                tied = q >= top - 1e-12 * np.maximum(1.0, np.abs(top))
                best = np.where(tied, left[:, idx] + left_below[:, idx], np.inf).argmin(-1)
                chosen_left = np.take_along_axis(left[:, idx] + left_below[:, idx], best[..., None], -1)[
                    ..., 0
                ]
                left_below += np.asarray((self._scatter_of(seat, rows).T @ chosen_left.T).T)
            value = np.take_along_axis(q, best[..., None], -1)[..., 0]
            choice[:, rows, :] = np.eye(self.width)[best]
            below += np.asarray((self._scatter_of(seat, rows).T @ value.T).T)
        return weights[:, self.empty] + below[:, self.empty], choice

    def terminal_probability(self, plan: np.ndarray, skip: int | None = None) -> np.ndarray:
        """`[Z]`: chance × every seat's own probability of its moves to each terminal under the
        realization plan `plan` `[EMPTY + 1]` (all seats' rows), seat `skip` left out."""
        probability = self.term_chance.copy()
        for seat in range(self.players):
            if seat != skip:
                probability *= plan[self.term_last[:, seat]]
        return probability

    def respond(self, plan: np.ndarray, gain: np.ndarray, seat: int) -> tuple[float, np.ndarray]:
        """(value, one-hot `[R, W]` on `seat`'s rows) of `seat`'s best response maximising
        E[gain] (`gain` `[Z]`, any objective) while every other seat and chance play as `plan`
        says: terminal weights by `seat`'s last sequence, then one pass over its rows from the
        deepest (perfect recall), as in `best_response`; any number of players."""
        weights = np.bincount(self.term_last[:, seat], weights=self.terminal_probability(plan, seat) * gain,
                              minlength=self.empty + 1)
        below = np.zeros_like(weights)
        choice = np.zeros((len(self.keys), self.width))
        for rows in reversed(self.levels[seat]):
            idx = self.flat(rows)
            q = np.where(self.legal[rows], weights[idx] + below[idx], -np.inf)
            best = q.argmax(-1)
            choice[rows, best] = 1.0
            np.add.at(below, self.parent[rows], q[np.arange(len(rows)), best])
        return float(weights[self.empty] + below[self.empty]), choice

    def counterfactual(
        self, table: np.ndarray, plan_other: np.ndarray, gain: sp.csr_matrix, seat: int
    ) -> np.ndarray:
        """`[B, R, W]`: on `seat`'s rows, Σ over terminals below (row, column) of chance × gain ×
        the other seat's plan × `seat`'s own probabilities after that column."""
        weights = np.asarray((gain.T @ plan_other.T).T)
        below = np.zeros_like(weights)
        q_all = np.zeros(table.shape)
        for rows in reversed(self.levels[seat]):
            idx = self.flat(rows)
            q = np.where(self.legal[rows], weights[:, idx] + below[:, idx], 0.0)
            q_all[:, rows, :] = q
            below += np.asarray((self._scatter_of(seat, rows).T @ (table[:, rows, :] * q).sum(-1).T).T)
        return q_all

    def _scatter_of(self, seat: int, rows: np.ndarray) -> sp.csr_matrix:
        key = (seat, int(rows[0]), len(rows))
        cache = self.__dict__.setdefault("_scatters", {})
        if key not in cache:
            cache[key] = self._scatter(rows)
        return cache[key]

    def own_reach(self, table: np.ndarray) -> np.ndarray:
        """`[B, R]`: each row's own probability of the moves leading to it."""
        return self.realization(table)[:, self.parent]

    # -- node-level passes (training and language-model environments) --------------------------
    def node_order(self) -> list:
        cache = self.__dict__.setdefault("_order", None)
        if cache is None:
            depth = self.node_depth
            cache = [np.flatnonzero(depth == d) for d in range(int(depth.max()) + 1)]
            self.__dict__["_order"] = cache
        return cache

    def move_probabilities(self, tables_by_seat) -> np.ndarray:
        """`[N, A]`: probability of each child, chance from the game, seat s from `tables_by_seat[s]`."""
        probs = self.chance_prob.copy()
        for seat, table in enumerate(tables_by_seat):
            nodes = np.flatnonzero(self.node_kind == seat)
            probs[nodes, : self.width] = table[self.node_row[nodes]]
        return probs

    def node_values(self, probs: np.ndarray, seat: int) -> np.ndarray:
        """`[N]`: `seat`'s expected return from each node when moves follow `probs`."""
        values = np.where(self.node_kind == -4, self.node_returns[:, seat], 0.0)
        for nodes in reversed(self.node_order()):
            inner = nodes[self.node_kind[nodes] != -4]
            if len(inner):
                kids = self.children[inner]
                values[inner] = (probs[inner] * np.where(kids >= 0, values[np.maximum(kids, 0)], 0.0)).sum(-1)
        return values

    def node_reach(self, probs: np.ndarray) -> np.ndarray:
        """`[N]`: probability of reaching each node when moves follow `probs`."""
        reach = np.zeros(len(self.node_kind))
        reach[0] = 1.0
        for nodes in self.node_order():
            inner = nodes[self.node_kind[nodes] != -4]
            kids = self.children[inner]
            mask = kids >= 0
            reach[kids[mask]] += (reach[inner][:, None] * probs[inner])[mask]
        return reach


def estimated_histories(pgame, probes: int = 200, seed: int = 0, stop_above: float = float("inf")) -> float:
    """Knuth's unbiased estimate of the number of histories: along random paths, the sum of the
    products of the branching factors met (a few hundred paths take milliseconds). The sums only
    grow, so once the estimate is past `stop_above` whatever the remaining paths add, the walk
    stops and returns it (a long, wide game, goofspiel with 100,000 cards, would otherwise walk
    200 paths of 200,000 moves): a value past `stop_above` says only that the estimate is past it."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(probes):
        if total / probes > stop_above:
            return total / probes
        state, weight, count = pgame.new_initial_state(), 1.0, 1.0
        while not state.is_terminal():
            moves = (
                [a for a, _ in state.chance_outcomes()] if state.is_chance_node() else state.legal_actions()
            )
            if not moves:  # a game whose parameters leave a player nothing to do (goofspiel with no cards)
                break
            weight *= len(moves)
            count += weight
            if (total + count) / probes > stop_above:
                return (total + count) / probes
            state = state.child(moves[int(rng.integers(len(moves)))])
        total += count
    return total / probes


def check_walkable(
    pgame, game_name: str, what: str = "the exact solver", max_histories: int = MAX_HISTORIES
) -> None:
    """`NoTree` (one line) when the estimated tree is ten times `max_histories`: too large for
    anything that walks the whole game (the exact solver, pyspiel's CFR). A chance node or a
    decision with more outcomes than ten times the limit is refused from the game's declared
    sizes before any state is made: the random paths would have to list those outcomes
    (liars_dice with a billion-sided die runs out of memory listing one roll)."""
    refuse_above = 10 * max_histories  # the estimate is rough: refused unwalked only far past the limit
    widest = max(int(pgame.max_chance_outcomes()), int(pgame.num_distinct_actions()))
    if widest > refuse_above:
        raise NoTree(
            f"{game_name}: a single move has up to {widest:,} outcomes (OpenSpiel's max_chance_outcomes and "
            f"num_distinct_actions), beyond the {max_histories:,} histories {what} walks"
        )
    try:
        estimate = estimated_histories(pgame, stop_above=refuse_above)
    except MemoryError:
        raise NoTree(
            f"{game_name}: too large to estimate (pyspiel ran out of memory listing one node's moves, of up "
            f"to {widest:,}); {what} walks at most {max_histories:,} histories"
        ) from None
    if estimate > refuse_above:
        raise NoTree(
            f"{game_name}: more than {refuse_above:,} histories (estimated from random paths), past the "
            f"{max_histories:,} {what} walks"
        )


HISTORY_BYTES = 700
"""Bytes one history holds while the tree is enumerated (its entries in the node and edge lists,
the terminal's record, the state on the stack), besides its information state's `Decision`.
Measured (tracemalloc, the peak of the walk and the arrays made from it, decisions included):
leduc_poker 670, liars_dice 590, bargaining(max_turns=2) 780 (nearly every history a terminal)."""


def decision_bytes(legal: int) -> int:
    """Bytes one information state's `Decision` holds (legal actions and their names, its key)."""
    return 600 + 60 * legal


def check_fits(game_name: str, what: str, needed: int) -> None:
    """`NoTree` in one line when `needed` bytes are more than the memory budget (`sepo.limits`),
    naming what does not fit and by how much."""
    from sepo.limits import memory_budget, size_text

    budget = memory_budget()
    if needed > budget:
        raise NoTree(
            f"{game_name}: {what} would take about {size_text(needed)}, {size_text(needed - budget)} more "
            f"than the {size_text(budget)} this machine can spare"
        )


def build(pgame, game_name: str, max_histories: int = MAX_HISTORIES, what: str = "the exact solver") -> Tree:
    """Enumerate an OpenSpiel game (depth first, OpenSpiel's action order); a game whose
    estimated size is ten times the limit is refused before the walk, and the walk stops, in one
    line, before what it holds passes the memory budget (`check_fits`)."""
    check_walkable(pgame, game_name, what, max_histories=max_histories)
    from sepo import progress
    from sepo.games.openspiel.rules import decision_of
    from sepo.limits import memory_budget

    progress.stage(f"{game_name}: enumerating the game tree for {what}")
    budget = memory_budget()
    n = pgame.num_players()
    held = 0  # bytes the walk holds so far (estimated)

    keys: dict[str, int] = {}
    seats, actions, decisions, parents = [], [], [], []
    kinds, rows, node_depth, node_returns = [], [], [], []
    edges, edge_prob = [], []  # (parent, column, child), chance probability
    term = []  # (chance, returns, last sequence of each seat)
    none = (None,) * n
    stack = [(pgame.new_initial_state(), -1, 0, 1.0, 0.0, none, 0)]
    while stack:
        state, parent_node, col, chance, p_edge, last, depth = stack.pop()
        node = len(kinds)
        if node >= max_histories:
            raise NoTree(
                f"{game_name}: more than {max_histories:,} histories; {what} enumerates the whole game tree"
            )
        held += HISTORY_BYTES
        if held > budget:
            check_fits(game_name, f"enumerating the game tree (more than {node:,} histories so far)", held)
        if parent_node >= 0:
            edges.append((parent_node, col, node))
            edge_prob.append(p_edge)
        node_depth.append(depth)
        if state.is_terminal():
            returns = tuple(state.returns())
            kinds.append(-4)
            rows.append(-1)
            node_returns.append(returns)
            term.append((chance, returns, last))
            continue
        node_returns.append(None)
        if state.is_chance_node():
            outcomes = state.chance_outcomes()
            kinds.append(-1)
            rows.append(-1)
            for k, (action, p) in reversed(list(enumerate(outcomes))):
                stack.append((state.child(action), node, k, chance * p, p, last, depth + 1))
            continue
        seat = state.current_player()
        key = state.information_state_string(seat)
        legal = state.legal_actions(seat)
        if key not in keys:
            keys[key] = len(keys)
            seats.append(seat)
            actions.append(tuple(int(a) for a in legal))
            decisions.append(decision_of(game_name, state, seat, 0, 0, 1))
            parents.append(last[seat])
            held += decision_bytes(len(legal)) + len(key)
        row = keys[key]
        if seats[row] != seat or actions[row] != tuple(int(a) for a in legal) or parents[row] != last[seat]:
            raise NoTree(
                f"{game_name}: information state {' '.join(key.split())[:80]!r} is met by two seats, with "
                "other moves or after other own moves (OpenSpiel's string forgets them: no perfect recall); "
                f"{what} needs perfect recall"
            )
        kinds.append(seat)
        rows.append(row)
        for c, action in reversed(list(enumerate(legal))):
            step = tuple((row, c) if s == seat else last[s] for s in range(n))
            stack.append((state.child(action), node, c, chance, 0.0, step, depth + 1))
    R = len(keys)
    if R == 0:
        raise SepoError(f"{game_name}: no player ever moves")
    W = max(len(a) for a in actions)
    N, Z = len(kinds), len(term)
    # the arrays below: [R, W] legal, the sequence-form vectors of a policy, [N] node and [Z, n] terminal
    # arrays
    check_fits(game_name, f"the game tree's arrays ({N:,} histories, {R:,} information states x {W:,} moves)",
               held + R * W * 9 + N * (8 * 3 + 8 * n + 32) + Z * 8 * (1 + 2 * n))
    empty = R * W

    def flat(seq):
        return empty if seq is None else seq[0] * W + seq[1]

    parent = np.array([flat(p) for p in parents], dtype=np.int64)
    own_depth = np.zeros(R, dtype=np.int64)
    for r in range(R):  # parents are met before their children, so rows are in depth-first order
        p = parents[r]
        own_depth[r] = 0 if p is None else own_depth[p[0]] + 1
    seat_arr = np.array(seats)
    levels = [
        [np.flatnonzero((seat_arr == s) & (own_depth == d)) for d in range(int(own_depth.max()) + 1)]
        for s in range(n)
    ]
    levels = [[rows_ for rows_ in seat_levels if len(rows_)] for seat_levels in levels]
    legal = np.zeros((R, W), dtype=bool)
    for r, a in enumerate(actions):
        legal[r, : len(a)] = True
    edge_array = np.array(edges, dtype=np.int64).reshape(-1, 3)
    fanout = max(W, int(edge_array[:, 1].max()) + 1 if len(edge_array) else 1)
    zeros = (0.0,) * n
    return Tree(
        keys=tuple(keys),
        seat=seat_arr,
        legal=legal,
        actions=actions,
        decisions=decisions,
        parent=parent,
        levels=levels,
        node_kind=np.array(kinds),
        node_row=np.array(rows),
        node_depth=np.array(node_depth),
        edges=edge_array,
        edge_prob=np.array(edge_prob, dtype=float),
        fanout=fanout,
        node_returns=np.array([r if r is not None else zeros for r in node_returns], dtype=float).reshape(
            N, n
        ),
        term_chance=np.array([t[0] for t in term]),
        term_returns=np.array([t[1] for t in term], dtype=float).reshape(Z, n),
        term_last=np.array([[flat(seq) for seq in t[2]] for t in term], dtype=np.int64).reshape(Z, n),
        game_name=game_name,
    )
