"""Exact values of two-player OpenSpiel games, batched over policies (`tree.py` does the work).

A table plays both seats; the agent holds each seat with probability 1/2 (the episode rotates
seats). Zero-sum: `exploitability` = NashConv / 2 = the mean over seats of what a best response
to the agent's other seat earns, OpenSpiel's own definition (`tests/games/openspiel` checks it
against `pyspiel.exploitability` to 1e-9). General-sum: the `adversarial_gap`, the most an
opponent can lead the agent by, E[u_O − u_A] per play, maximised exactly by the same tabular
best response on the payoff difference; among maximisers that tie, the one that leaves the agent
least (the rule of every sepo solver), which sets `br_payoff` and `agent_payoff`. Games of more
than two players have no exact solver here (`NoExactSolver`); their audits are the lower bound of
`bound.py`.
"""
from __future__ import annotations

import functools

import numpy as np

from sepo.games.openspiel.tree import NoTree, Tree, build
from sepo.metrics.exact import ExactResult, NoExactSolver
from sepo.policies.tabular import TabularPolicy

METHOD = "exact tabular best response over the information states (sepo's batched sequence-form solver)"
BLOCK = 512
"""The most policies per block in batched calls: the realization plans are [block, sequences] arrays
(`block_size` takes fewer where a block of 512 would not fit the memory budget)."""
ARRAYS_PER_POLICY = 8
"""[sequences] float arrays a policy holds in a best-response pass (its plan, the weights and the
values below for the gain and for the tie rule, the one-hot choice, temporaries)."""


def block_size(tree: Tree) -> int:
    """Policies per block: at most `BLOCK`, within the memory budget; one line (`NoExactSolver`)
    when not even one policy's arrays fit."""
    from sepo.games.openspiel.tree import check_fits
    from sepo.limits import memory_budget

    per_policy = ARRAYS_PER_POLICY * 8 * (tree.empty + 1)
    try:
        check_fits(
            tree.game_name, f"one policy's sequence-form arrays ({tree.empty + 1:,} sequences)", per_policy
        )
    except NoTree as error:
        raise NoExactSolver(str(error)) from None
    return int(max(1, min(BLOCK, memory_budget() // per_policy)))


@functools.lru_cache(maxsize=8)
def tree_of(spec: str, what: str = "the exact solver") -> Tree:
    """The enumerated tree of OpenSpiel game `spec` (cached: building it walks every history);
    `NoExactSolver` in one line when it cannot be built for `what`."""
    from sepo.games.openspiel.rules import load

    try:
        return build(load(spec), f"openspiel:{spec}", what=what)
    except NoTree as error:
        raise NoExactSolver(str(error)) from None


class OpenSpielSolver:
    """The exact-solver interface (`sepo.metrics.exact`) for a two-player OpenSpiel game."""

    method = METHOD

    def __init__(self, game):
        if game.num_players != 2:
            raise NoExactSolver(
                f"{game.name} has {game.num_players} players; sepo's exact best response is for two "
                "(`sepo.games.openspiel.bound` gives a lower bound)"
            )
        self.game = game
        self.tree = tree_of(game.spec)
        self.zero_sum = game.zero_sum
        self.value_name = "exploitability" if self.zero_sum else "adversarial_gap"
        t = self.tree
        returns = t.term_returns
        self.payoff = [t.matrix(returns[:, s], s) for s in range(2)]          # u_s at [s_other, s]
        gains = [returns[:, s] if self.zero_sum else returns[:, s] - returns[:, 1 - s] for s in range(2)]
        self.gain = [t.matrix(gains[s], s) for s in range(2)]                # responder s's gain
        # general-sum: among tied maximisers, the one that leaves the agent (the other seat) least
        self.least = [None, None] if self.zero_sum else [t.matrix(returns[:, 1 - s], s) for s in range(2)]

    @property
    def keys(self) -> tuple[str, ...]:
        return self.tree.keys

    def decisions(self):
        return list(self.tree.decisions)

    def as_tables(self, tables) -> np.ndarray:
        array = np.asarray(tables, dtype=float)
        return array[None] if array.ndim == 2 else array

    # -- values --------------------------------------------------------------------------------
    def best_responses(self, tables):
        """(`[B, 2]` best-response values by responder seat, `[B, R, W]` the responses' tables)."""
        tables = self.as_tables(tables)
        values, choices = [], []
        step = block_size(self.tree)
        for start in range(0, len(tables), step):
            block = tables[start:start + step]
            plan = self.tree.realization(block)
            both, choice = [], np.zeros(block.shape)
            for seat in range(2):
                value, chosen = self.tree.best_response(plan, self.gain[seat], seat, self.least[seat])
                both.append(value)
                choice += chosen
            values.append(np.stack(both, -1))
            choices.append(choice)
        return np.concatenate(values), np.concatenate(choices)

    def values(self, tables) -> np.ndarray:
        """`[B]`: exploitability (zero-sum) or adversarial gap of each table."""
        return self.best_responses(tables)[0].mean(-1)

    def expected_returns(self, seat0, seat1) -> np.ndarray:
        """`[B, 2]`: each seat's expected return when `seat0` tables play seat 0 and `seat1` seat 1
        (in blocks that fit the memory budget)."""
        seat0, seat1 = np.broadcast_arrays(self.as_tables(seat0), self.as_tables(seat1))
        out, step = [], block_size(self.tree)
        for start in range(0, len(seat0), step):
            plan0 = self.tree.realization(seat0[start:start + step])
            plan1 = self.tree.realization(seat1[start:start + step])
            out.append(np.stack([((self.payoff[0].T @ plan1.T).T * plan0).sum(-1),
                                 ((self.payoff[1].T @ plan0.T).T * plan1).sum(-1)], -1))
        return np.concatenate(out)

    def head_to_head(self, table, opponents) -> np.ndarray:
        """The agent's expected return per play against each opponent table, seats equally likely.
        `table` and `opponents` broadcast against each other over their leading axes (a population's
        `[k, 1, R, W]` against `[1, k, R, W]` gives `[k, k]`)."""
        agent, opponents = np.broadcast_arrays(
            np.asarray(table, dtype=float), np.asarray(opponents, dtype=float)
        )
        shape = agent.shape[:-2]
        agent, opponents = agent.reshape(-1, *agent.shape[-2:]), opponents.reshape(-1, *opponents.shape[-2:])
        as0 = self.expected_returns(agent, opponents)[:, 0]
        as1 = self.expected_returns(opponents, agent)[:, 1]
        return (0.5 * (as0 + as1)).reshape(shape)

    def evaluate(self, table) -> ExactResult:
        values, response = self.best_responses(table)
        value = float(values[0].mean())
        agent = self.as_tables(table)
        as0 = self.expected_returns(agent, response)[0]   # agent seat 0, responder seat 1
        as1 = self.expected_returns(response, agent)[0]   # responder seat 0, agent seat 1
        agent_payoff = float(0.5 * (as0[0] + as1[1]))
        br_payoff = float(0.5 * (as0[1] + as1[0]))
        extra = {"nash_conv": 2 * value} if self.zero_sum else {}
        return ExactResult(
            value=value,
            value_name=self.value_name,
            br_payoff=br_payoff,
            agent_payoff=agent_payoff,
            method=METHOD,
            extra=extra,
        )

    def best_response(self, table) -> TabularPolicy:
        return TabularPolicy(self.best_responses(table)[1][0], self.keys, name="BestResponse")

    def gradient(self, table) -> np.ndarray:
        """d value / d table with the best responses held fixed (Danskin): on a row of seat j, half
        the row's own reach times the responder's counterfactual gain of each action."""
        single = np.asarray(table).ndim == 2
        tables = self.as_tables(table)
        _, response = self.best_responses(tables)
        plan_agent = self.tree.realization(tables)
        plan_response = self.tree.realization(response)
        gradient = np.zeros(tables.shape)
        for seat in range(2):  # the agent in `seat`, the responder in the other
            responder = 1 - seat
            q = self.tree.counterfactual(tables, plan_response, self.gain[responder].T.tocsr(), seat)
            rows = self.tree.seat == seat
            gradient[:, rows, :] = 0.5 * plan_agent[:, self.tree.parent[rows]][..., None] * q[:, rows, :]
        return gradient[0] if single else gradient

    def own_reach(self, table) -> np.ndarray:
        single = np.asarray(table).ndim == 2
        reach = self.tree.own_reach(self.as_tables(table))
        return reach[0] if single else reach


def solver(game) -> OpenSpielSolver:
    return OpenSpielSolver(game)


def to_pyspiel_policy(solver: OpenSpielSolver, table):
    """A table as OpenSpiel's Python `TabularPolicy` (for cross-checks against `exploitability`)."""
    from open_spiel.python import policy as os_policy

    pgame = solver.game.pyspiel_game
    policy = os_policy.TabularPolicy(pgame)
    table = np.asarray(table, dtype=float)
    for row, key in enumerate(solver.keys):
        index = policy.state_lookup[key]
        policy.action_probability_array[index] = 0.0
        for col, action in enumerate(solver.tree.actions[row]):
            policy.action_probability_array[index, action] = table[row, col]
    return policy


def from_pyspiel_policy(solver: OpenSpielSolver, policy) -> np.ndarray:
    """A pyspiel (C++) or OpenSpiel Python policy read at every information state, as a table."""
    table = np.zeros(solver.tree.legal.shape)
    for row, decision in enumerate(solver.tree.decisions):
        probs = policy_at(policy, decision.info_key)
        for col, action in enumerate(solver.tree.actions[row]):
            table[row, col] = probs.get(action, 0.0)
    return table


def policy_at(policy, key: str) -> dict:
    """{action: probability} of a pyspiel policy table (C++ `policy_table()` or Python tabular)."""
    if hasattr(policy, "policy_table"):
        return dict(policy.policy_table()[key])
    index = policy.state_lookup[key]
    return {a: float(p) for a, p in enumerate(policy.action_probability_array[index])}
