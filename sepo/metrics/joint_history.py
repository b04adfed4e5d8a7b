"""The exact solver of a two-player repeated game whose information states are joint-action histories.

Both seats choose among the same K actions each round; the agent's information states are
`game.info_keys()`: "start", then every remembered history (the whole history, or the last
`memory` rounds) of length 1, 2, ... in base-K² order, a joint action being own·K + other. On
those keys the generic DP of `sepo.metrics.repeated` gives the adversarial gap, the best-response
payoff with the agent's payoff against it, the maximising opponent, ∂gap/∂table with the
maximiser held fixed, and the agent's own reach of each key. A domain's subclass names only its
units (for the method text and the messages) and its K.

The game provides `rounds`, `memory`, `stage_game(seat)`, `info_keys()`, `history_key`,
`remembered`, `action_names`, `with_memory(memory)` and `decision_after(history, seat)` (or the
subclass overrides the solver's `decision_after`, and `response` for other move names).
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.limits import count_text
from sepo.metrics.exact import ExactResult
from sepo.metrics.repeated import (
    AgentTree,
    HistoryTable,
    RepeatedAudit,
    RepeatedResult,
    check_tree_fits,
    dense_histories,
    read_agent,
    solve,
    tree_from_levels,
    tree_states,
)
from sepo.policies.base import Policy


def joint_key_rows(own: np.ndarray, other: np.ndarray, memory: int | None, k: int) -> np.ndarray:
    """Row of each history's key in `game.info_keys()` order ("start", then every remembered
    history of length 1, 2, ... in base-k² order); `own`, `other`: [n, t] action indices."""
    t = own.shape[1]
    length = t if memory is None else min(t, memory)
    base = k * k
    offset = sum(base**past for past in range(length))
    joint = k * own[:, t - length:] + other[:, t - length:]
    code = np.zeros(own.shape[0], dtype=np.int64)
    for column in range(length):
        code = code * base + joint[:, column]
    return offset + code


class JointHistorySolver(RepeatedAudit):
    """Exact DP over the joint-action tree of one game, the agent in seat 0 (module doc)."""

    value_name = "adversarial_gap"
    round_name = "round"
    """The unit of play in the method text (a domain may say "period")."""
    joint_name = "joint-action"
    """The tree's name in the method text and the size check ("joint-demand")."""
    joint_actions = "joint actions"
    """The joint actions of one round in the method text ("joint demands")."""
    game_title = "the game's"
    """Whose tree a refused size names (a domain's name, possessive)."""
    table_name = "an action table"
    """What a table of the wrong shape is called in its error (the domain's own words)."""

    def __init__(self, game, k: int, agent_player: int = 0):
        self.game = game
        self.agent_player = agent_player
        self.k = k
        self.stage = game.stage_game(agent_player)
        self.kept_memory = game.memory  # the rounds its states keep (None: the whole history)
        self._keys: tuple[str, ...] | None = None
        self._decisions: list[Decision] | None = None
        self._solved: tuple[bytes, RepeatedResult] | None = None
        unit = self.round_name
        if game.memory is None:
            # closed form (a long game's sum has millions of digits)
            histories = tree_states(self.stage, game.rounds)
            self.method = (
                f"exact DP over the {self.joint_name} tree ({game.rounds} {unit}s, {k**2} "
                f"{self.joint_actions} a {unit}, {count_text(histories)} agent histories)"
            )
        else:
            self.method = (
                f"exact DP over ({unit}, last {game.memory} {unit}s) states: exact for agents that remember "
                f"at most {game.memory} {unit}s"
            )

    def tree_name(self) -> str:
        """The whole tree's name in a refusal."""
        return f"{self.game_title} {self.joint_name} tree"

    # -- the agent's information states ---------------------------------------------------------
    @property
    def keys(self) -> tuple[str, ...]:
        """Every information-state key (built once, after checking that the tree fits)."""
        if self._keys is None:
            depth = (
                self.game.rounds - 1
                if self.game.memory is None
                else min(self.game.memory, self.game.rounds - 1)
            )
            check_tree_fits(
                self.stage,
                self.game.rounds,
                self.game.memory,
                agent_states=sum((self.k**2) ** past for past in range(depth + 1)),
                what=self.tree_name() if self.game.memory is None else f"{self.game_title} memory states",
            )
            self._keys = tuple(self.game.info_keys())
            self._row = {key: i for i, key in enumerate(self._keys)}
        return self._keys

    def decisions(self) -> list[Decision]:
        """One decision per information-state key, at the first round where it occurs."""
        if self._decisions is None:
            keys = self.keys  # refuses a tree that would not fit before building it
            k, memory = self.k, self.game.memory
            depth = self.game.rounds - 1 if memory is None else min(memory, self.game.rounds - 1)
            decisions = [self.decision_after(tuple((j // k, j % k) for j in row))
                         for level in dense_histories(self.stage, depth + 1, None) for row in level.tolist()]
            assert tuple(d.info_key for d in decisions) == keys
            self._decisions = decisions
        return self._decisions

    def _rows(self, queries) -> np.ndarray:
        row = {key: i for i, key in enumerate(self.keys)} if self._keys is None else self._row
        return np.array(
            [row[self.game.history_key(self.game.remembered(history))] for _, history in queries],
            dtype=np.int64,
        )

    def _check(self, table) -> np.ndarray:
        table = np.asarray(table, dtype=float)
        if table.shape != (len(self.keys), self.k):
            raise SepoError(f"{self.table_name} has shape ({len(self.keys)}, {self.k}), got {table.shape}")
        return table

    def tree(self, table) -> AgentTree:
        """The agent's table on every DP state (rows found by vectorised key arithmetic)."""
        k, memory = self.k, self.game.memory
        return tree_from_levels(
            self.stage, self.game.rounds, lambda t, h: table[joint_key_rows(h // k, h % k, memory, k)], memory
        )

    def solve_table(self, table, threshold: float = 0.0) -> RepeatedResult:
        """The DP's solution (the latest whole-tree one kept: a training step asks for it three times)."""
        table = self._check(table)
        if threshold:
            return solve(
                read_agent(
                    self.stage, self.game.rounds, lambda q: table[self._rows(q)], self.game.memory, threshold
                )
            )
        if self._solved is None or self._solved[0] != table.tobytes():
            self._solved = (table.tobytes(), solve(self.tree(table)))
        return self._solved[1]

    # -- the ExactSolver interface ----------------------------------------------------------------
    def evaluate(self, table, threshold: float = 0.0) -> ExactResult:
        return self.result(self.solve_table(table, threshold))

    def result(self, solved: RepeatedResult) -> ExactResult:
        return solved.exact_result(self.method, self.value_name)

    def best_response(self, table) -> Policy:
        """The gap-maximising opponent (against it, the pool's exploit score is the gap)."""
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
        """The agent's own probability of the actions leading to each key, summed over the histories
        (and rounds) where the key occurs, each opponent action counted with probability 1."""
        tree = self.tree(self._check(table))
        out, reach = np.zeros(len(self.keys)), np.ones(1)
        for t, (rows, level) in enumerate(zip(self._tree_rows(), tree.levels)):
            np.add.at(out, rows, reach)
            if t + 1 < self.game.rounds:
                weight = np.repeat((reach[:, None] * level.probs)[:, :, None], self.k, axis=2)
                reach = np.bincount(
                    level.children.reshape(-1),
                    weights=weight.reshape(-1),
                    minlength=len(tree.levels[t + 1].probs),
                )
        return out

    def _tree_rows(self) -> list[np.ndarray]:
        k, memory = self.k, self.game.memory
        return [
            joint_key_rows(level // k, level % k, memory, k)
            for level in dense_histories(self.stage, self.game.rounds, memory)
        ]

    # -- any agent: the tree its declared memory allows (RepeatedAudit) ---------------------------
    def whole_history(self) -> "JointHistorySolver":
        return type(self)(self.game.with_memory(None), self.agent_player)

    def decision_after(self, history: tuple) -> Decision:
        return self.game.decision_after(tuple(history), self.agent_player)

    def evaluate_agent(
        self, agent: Policy, threshold: float = 0.0, projection: bool = True
    ) -> tuple[ExactResult, HistoryTable]:
        """`audit`'s result and gap-maximising opponent (the game's memory states by default)."""
        found = self.audit(agent, threshold, projection)
        return found.result, found.response
