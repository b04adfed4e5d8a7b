"""The exact adversarial best response in the pricing market, two firms (the domain's `ExactSolver`).

The agent's behaviour is a table over the game's information states (`game.info_keys()`: the last
`memory` periods of joint prices, 1 + K² = 226 keys for memory 1 and Calvano's 15 prices; or the
whole history), read from any policy with one batched call at the canonical decisions
(`decisions()`: each key at the earliest period it occurs). The generic repeated-game DP of
`sepo.metrics.repeated` then gives the adversarial gap max_σ E[u_R − u_A] per period (the most a
rival can earn over the agent, sanctions included), the best response payoff max_σ E[u_R] per
period with the agent's payoff against it, the maximising rival, and ∂gap/∂table with the
maximiser held fixed.

Labels. With `memory=m` the DP runs on (period, last m periods) states: exact for any agent that
remembers at most m periods (tabular memory-m strategies, the memory-1 bots), and for any other
agent the gap of its memory-m projection, neither an upper nor a lower bound, labelled so.
`audit(agent, threshold, projection)` (`RepeatedAudit`) solves a bot on (period, its declared
state) at any number of periods, exactly, and reads a language model on the whole history it
reads, round by round with pruning below `threshold` (the error bound reported), refusing in one
line a tree that would not fit.

Lower bound. With K² = 225 joint prices a period the whole tree of 10 periods has about 10^21
states, and even pruned it keeps 15^t rival sequences a period; so for an agent that declares
nothing, when neither `--memory` nor `--threshold` is given and the whole tree does not fit, the
audit is a lower bound instead of a refusal (`lower_bound_audit`): the gap maximiser of the agent's
memory-m projection (m the game's memory) is played against the agent itself, the agent read only at
the histories that rival and the agent's own positive-probability prices reach (one path for a
deterministic agent); on branches it reaches with probability below `LOWER_BOUND_REACH` the rival
switches to its maximin price, whose lead max_b min_a (u_R − u_A) a period the agent cannot lower,
and they are counted at that. The rival so defined is one fixed strategy, and any fixed rival's
expected lead is at most the best rival's, so the value is a lower bound on the agent's true gap (labelled `lower bound`), equal to it when the agent in fact
reads at most m periods.
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.games.pricing.rules import PricingMarket
from sepo.limits import count_text
from sepo.metrics.exact import ExactResult
from sepo.metrics.repeated import (AgentTree, HistoryTable, RepeatedAudit, RepeatedResult, check_tree_fits, declared_state,
                                   dense_histories, read_agent, solve, tree_from_levels)
from sepo.policies.base import Policy


LOWER_BOUND_REACH = 1e-4
"""Branches the agent reaches with less probability are not read in the lower-bound audit (the rival
plays its maximin price there, counted at its guaranteed lead, which keeps the value a lower bound)."""


def key_rows(own: np.ndarray, other: np.ndarray, memory: int | None, k: int) -> np.ndarray:
    """Row of each history's key in `game.info_keys()` order ("start", then every remembered
    history of length 1, 2, ... in base-k² order); `own`, `other`: [n, t] price actions."""
    t = own.shape[1]
    length = t if memory is None else min(t, memory)
    base = k * k
    offset = sum(base**l for l in range(length))
    joint = k * own[:, t - length:] + other[:, t - length:]
    code = np.zeros(own.shape[0], dtype=np.int64)
    for column in range(length):
        code = code * base + joint[:, column]
    return offset + code


class PricingSolver(RepeatedAudit):
    """Exact DP over the joint-price tree of one two-firm market, the agent in seat 0."""

    value_name = "adversarial_gap"

    def __init__(self, game: PricingMarket, agent_player: int = 0):
        if game.num_players != 2:
            raise SepoError(game.exact_size(0) or "pricing: the exact solver is for two firms")
        self.game = game
        self.agent_player = agent_player
        self.k = game.k
        self.stage = game.stage_game(agent_player)
        self.kept_memory = game.memory  # the periods its states keep (None: the whole history)
        self._keys: tuple[str, ...] | None = None
        self._decisions: list[Decision] | None = None
        self._solved: tuple[bytes, RepeatedResult] | None = None
        if game.memory is None:
            histories = sum((self.k ** 2) ** t for t in range(game.rounds))
            self.method = (f"exact DP over the joint-price tree ({game.rounds} periods, {self.k ** 2} joint prices a "
                           f"period, {count_text(histories)} agent histories)")
        else:
            self.method = (f"exact DP over (period, last {game.memory} periods) states: exact for agents that remember at "
                           f"most {game.memory} periods")

    @property
    def keys(self) -> tuple[str, ...]:
        """Every information-state key (built once, after checking that the tree fits)."""
        if self._keys is None:
            depth = self.game.rounds - 1 if self.game.memory is None else min(self.game.memory, self.game.rounds - 1)
            check_tree_fits(self.stage, self.game.rounds, self.game.memory,
                            agent_states=sum((self.k ** 2) ** l for l in range(depth + 1)),
                            what="the pricing market's joint-price tree" if self.game.memory is None else
                            "the pricing market's memory states")
            self._keys = tuple(self.game.info_keys())
            self._row = {key: i for i, key in enumerate(self._keys)}
        return self._keys

    def decisions(self) -> list[Decision]:
        """One decision per information-state key, at the first period where it occurs."""
        if self._decisions is None:
            keys = self.keys
            k, memory = self.k, self.game.memory
            depth = self.game.rounds - 1 if memory is None else min(memory, self.game.rounds - 1)
            decisions = [self.game.decision_after(tuple((j // k, j % k) for j in row), self.agent_player)
                         for level in dense_histories(self.stage, depth + 1, None) for row in level.tolist()]
            assert tuple(d.info_key for d in decisions) == keys
            self._decisions = decisions
        return self._decisions

    def _rows(self, queries) -> np.ndarray:
        row = {key: i for i, key in enumerate(self.keys)} if self._keys is None else self._row
        return np.array([row[self.game.history_key(self.game.remembered(history))] for _, history in queries], dtype=np.int64)

    def _check(self, table) -> np.ndarray:
        table = np.asarray(table, dtype=float)
        if table.shape != (len(self.keys), self.k):
            raise SepoError(f"a pricing action table has shape ({len(self.keys)}, {self.k}), got {table.shape}")
        return table

    def tree(self, table) -> AgentTree:
        """The agent's table on every DP state (rows found by vectorised key arithmetic)."""
        k, memory = self.k, self.game.memory
        return tree_from_levels(self.stage, self.game.rounds, lambda t, h: table[key_rows(h // k, h % k, memory, k)], memory)

    def solve_table(self, table, threshold: float = 0.0) -> RepeatedResult:
        """The DP's solution (the latest whole-tree one kept: a training step asks for it three times)."""
        table = self._check(table)
        if threshold:
            return solve(read_agent(self.stage, self.game.rounds, lambda q: table[self._rows(q)], self.game.memory, threshold))
        if self._solved is None or self._solved[0] != table.tobytes():
            self._solved = (table.tobytes(), solve(self.tree(table)))
        return self._solved[1]

    # -- the ExactSolver interface ----------------------------------------------------------------
    def evaluate(self, table, threshold: float = 0.0) -> ExactResult:
        return self.result(self.solve_table(table, threshold))

    def result(self, solved: RepeatedResult) -> ExactResult:
        return solved.exact_result(self.method, self.value_name)

    def best_response(self, table) -> Policy:
        """The gap-maximising rival (against it, the pool's exploit score is the gap)."""
        return self.response(self.solve_table(table))

    def response(self, solved: RepeatedResult) -> HistoryTable:
        names = self.game.action_names
        return HistoryTable(solved.gap_table, "BestResponse", [f"{name}-" for name in names], names)

    def gradient(self, table) -> np.ndarray:
        """∂gap/∂table[key, action] with the maximiser held fixed, summed over the states of each key."""
        solved = self.solve_table(table)
        out = np.zeros((len(self.keys), self.k))
        for rows, grad in zip(self._tree_rows(), solved.gradient):
            np.add.at(out, rows, grad)
        return out

    def own_reach(self, table) -> np.ndarray:
        """The agent's own probability of the prices leading to each key, summed over the histories
        (and periods) where the key occurs, each rival price counted with probability 1."""
        tree = self.tree(self._check(table))
        out, reach = np.zeros(len(self.keys)), np.ones(1)
        for t, (rows, level) in enumerate(zip(self._tree_rows(), tree.levels)):
            np.add.at(out, rows, reach)
            if t + 1 < self.game.rounds:
                weight = np.repeat((reach[:, None] * level.probs)[:, :, None], self.k, axis=2)
                reach = np.bincount(level.children.reshape(-1), weights=weight.reshape(-1), minlength=len(tree.levels[t + 1].probs))
        return out

    def _tree_rows(self) -> list[np.ndarray]:
        k, memory = self.k, self.game.memory
        return [key_rows(level // k, level % k, memory, k) for level in dense_histories(self.stage, self.game.rounds, memory)]

    # -- any agent: the tree its declared memory allows (RepeatedAudit) ---------------------------
    def whole_history(self) -> "PricingSolver":
        return PricingSolver(self.game.with_memory(None), self.agent_player)

    def decision_after(self, history: tuple) -> Decision:
        return self.game.decision_after(tuple(history), self.agent_player)

    def audit(self, agent: Policy, threshold: float = 0.0, projection: bool = False, replicates: int = 1000, seed: int = 0):
        """`RepeatedAudit.audit`, except that an agent declaring nothing, audited without --memory or
        --threshold, gets the lower bound (module doc) where the whole tree would be refused."""
        declares = declared_state(agent) is not None or getattr(agent, "table", None) is not None
        if declares or threshold or projection or self.game.memory is None:
            return super().audit(agent, threshold, projection, replicates, seed)
        try:
            check_tree_fits(self.stage, self.game.rounds, None, what="the pricing market's joint-price tree")
        except SepoError:
            return self.lower_bound_audit(agent)
        return super().audit(agent, threshold, projection, replicates, seed)

    def lower_bound_audit(self, agent: Policy):
        """The gap maximiser of the agent's memory-m projection, played against the agent (module doc)."""
        from dataclasses import replace

        from sepo.metrics.exact import Audit, no_action_probabilities
        from sepo.policies.text_policy import policy_estimate

        try:
            estimate = policy_estimate(agent, self.decisions())
        except NotImplementedError as error:
            raise no_action_probabilities(agent, error) from None
        solved = self.solve_table(estimate.table())
        rival = solved.gap_table
        lead = self.stage.opponent - self.stage.agent
        rounds, guaranteed = self.game.rounds, float(lead.min(0).max())  # the rival's maximin lead a period
        totals = np.zeros(3)  # lead, rival payoff, agent payoff
        level, read, pruned = [((), 1.0)], 0, 0.0
        for t in range(rounds):
            if not level:
                break
            decisions = [self.decision_after(history) for history, _ in level]
            probs = policy_estimate(agent, decisions).table()[:, : self.k]
            read += len(decisions)
            following = []
            for (history, reach), p in zip(level, probs):
                b = rival.action(t, history)
                for a in np.nonzero(p > 0)[0].tolist():
                    weight = reach * p[a]
                    totals += weight * np.array([lead[a, b], self.stage.opponent[a, b], self.stage.agent[a, b]])
                    if t + 1 < rounds:
                        if weight >= LOWER_BOUND_REACH:
                            following.append((history + ((a, b),), weight))
                        else:
                            pruned += weight
                            totals[0] += weight * guaranteed * (rounds - t - 1)
            level = following
        base = self.result(solved)
        memory = self.game.memory
        result = replace(base, value=float(totals[0] / rounds), br_payoff=float(totals[1] / rounds),
                         agent_payoff=float(totals[2] / rounds), exact=False, pruning_bound=0.0,
                         method=(f"lower bound: the gap maximiser of the agent's memory-{memory} projection played against "
                                 f"the agent ({read} histories read; reach below {LOWER_BOUND_REACH:g}, {pruned:.2g} in all, "
                                 "where the rival switches to its maximin price, counted at its guaranteed lead); exact when the agent reads at most "
                                 f"{memory} period{'s' if memory != 1 else ''}"),
                         extra={"projection_gap": base.value, "histories_read": read, "pruned_reach": pruned})
        return Audit(result, self.response(solved), estimate.record())


def solver(game: PricingMarket) -> PricingSolver:
    return PricingSolver(game)
