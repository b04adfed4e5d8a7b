"""The exact adversarial best response in the IPD (the domain's `ExactSolver`).

The agent's behaviour is a table over the game's information states (`game.info_keys()`: every
history, or the last `memory` rounds of it), read from any policy with one batched call at the
canonical decisions (`decisions()`: each key at the earliest round it occurs). The generic DP of
`sepo.metrics.repeated` then gives the adversarial gap max_σ E[u_O − u_A] per round, the best
response payoff max_σ E[u_O] per round with the agent's payoff against it, the maximising
opponent, and ∂gap/∂table with the maximiser held fixed.

With `memory=n` the DP runs on (round, last n rounds) states: exact for any agent that
remembers at most n rounds (tabular memory-n policies, TFT with n = 1), and the gap of the
memory-n policy that plays like the agent at the canonical decisions otherwise: a projection,
neither an upper nor a lower bound, and labelled so (`sepo.metrics.exact.labelled`).

`audit(agent, threshold, projection)` (`sepo.metrics.repeated.RepeatedAudit`) picks the tree from
what the agent declares: a bot's or an Axelrod strategy's small state gives an exact DP over
(round, state) at any number of rounds; a language model is read on the whole history, round by
round when pruning below `threshold` (the error bound reported). The whole tree is refused in one
line before it is built when it would not fit in memory.
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.limits import count_text
from sepo.games.ipd.rules import ACTION_NAMES, LETTERS, IteratedPrisonersDilemma, history_key
from sepo.metrics.exact import ExactResult
from sepo.games.ipd.rollouts import key_rows
from sepo.metrics.repeated import (AgentTree, HistoryTable, RepeatedAudit, RepeatedResult, check_tree_fits, dense_histories,
                                   read_agent, solve, tree_from_levels)
from sepo.policies.base import Policy


class IPDSolver(RepeatedAudit):
    """Exact DP over the joint-history tree of one IPD game, the agent in seat 0."""

    value_name = "adversarial_gap"

    def __init__(self, game: IteratedPrisonersDilemma, agent_player: int = 0):
        self.game = game
        self.agent_player = agent_player
        self.stage = game.stage_game(agent_player)
        self.kept_memory = game.memory  # the rounds its states keep (None: the whole history)
        self._keys: tuple[str, ...] | None = None
        self._decisions: list[Decision] | None = None
        self._states: dict = {}
        if game.memory is None:
            histories = sum(4**t for t in range(game.rounds))
            self.method = f"exact DP over the joint-history tree ({game.rounds} rounds, {count_text(histories)} agent histories)"
        else:
            self.method = (f"exact DP over (round, last {game.memory} rounds) states: exact for agents that remember at most "
                           f"{game.memory} rounds")

    # -- the agent's information states ---------------------------------------------------------
    @property
    def keys(self) -> tuple[str, ...]:
        """Every information-state key (built once, after checking that the tree fits)."""
        if self._keys is None:
            depth = self.game.rounds - 1 if self.game.memory is None else min(self.game.memory, self.game.rounds - 1)
            check_tree_fits(self.stage, self.game.rounds, self.game.memory, agent_states=sum(4**l for l in range(depth + 1)),
                            what="the IPD's joint-history tree" if self.game.memory is None else "the IPD's memory states")
            self._keys = tuple(self.game.info_keys())
            self._row = {key: i for i, key in enumerate(self._keys)}
        return self._keys

    def decisions(self) -> list[Decision]:
        """One decision per information-state key, at the first round where it occurs."""
        if self._decisions is None:
            found, frontier = {}, [self.game.new_initial_state()]
            while frontier and len(found) < len(self.keys):
                following = []
                for state in frontier:
                    decision = state.decision(self.agent_player)
                    if decision.info_key not in found:
                        found[decision.info_key] = decision
                        if len(decision.observation["history"]) + 1 < self.game.rounds:
                            for own in (0, 1):
                                for other in (0, 1):
                                    child = state.clone()
                                    child.apply_actions((own, other) if self.agent_player == 0 else (other, own))
                                    following.append(child)
                frontier = following
            self._decisions = [found[key] for key in self.keys]
        return self._decisions

    def _rows(self, queries) -> np.ndarray:
        row = {key: i for i, key in enumerate(self.keys)} if self._keys is None else self._row
        return np.array([row[history_key(self.game.remembered(history))] for _, history in queries], dtype=np.int64)

    def solve_table(self, table, threshold: float = 0.0) -> RepeatedResult:
        table = np.asarray(table, dtype=float)
        if table.shape != (len(self.keys), 2):
            raise SepoError(f"an IPD action table has shape ({len(self.keys)}, 2), got {table.shape}")
        if threshold:
            return solve(read_agent(self.stage, self.game.rounds, lambda q: table[self._rows(q)], self.game.memory, threshold))
        return solve(self.tree(table))

    def tree(self, table) -> AgentTree:
        """The agent's table on every DP state (rows found by vectorised key arithmetic)."""
        return tree_from_levels(self.stage, self.game.rounds, lambda t, h: table[key_rows(h // 2, h % 2, self.game.memory)],
                                self.game.memory)

    # -- the ExactSolver interface ----------------------------------------------------------------
    def evaluate(self, table, threshold: float = 0.0) -> ExactResult:
        return self.result(self.solve_table(table, threshold))

    def result(self, solved: RepeatedResult) -> ExactResult:
        return solved.exact_result(self.method, self.value_name)

    def best_response(self, table) -> Policy:
        """The gap-maximising opponent (against it, the pool's exploit score is the gap)."""
        return HistoryTable(self.solve_table(table).gap_table, "BestResponse", LETTERS, LETTERS)

    def gradient(self, table) -> np.ndarray:
        """∂gap/∂table[key, action] with the maximiser held fixed, summed over the states of each key."""
        solved = self.solve_table(table)
        tree_rows = self._tree_rows()
        out = np.zeros((len(self.keys), 2))
        for rows, grad in zip(tree_rows, solved.gradient):
            np.add.at(out, rows, grad)
        return out

    def own_reach(self, table) -> np.ndarray:
        """The agent's own probability of the moves leading to each key, summed over the histories
        (and rounds) where the key occurs, each opponent move counted with probability 1."""
        tree = self.tree(np.asarray(table, dtype=float))
        out, reach = np.zeros(len(self.keys)), np.ones(1)
        for t, (rows, level) in enumerate(zip(self._tree_rows(), tree.levels)):
            np.add.at(out, rows, reach)
            if t + 1 < self.game.rounds:
                weight = np.repeat((reach[:, None] * level.probs)[:, :, None], 2, axis=2)
                reach = np.bincount(level.children.reshape(-1), weights=weight.reshape(-1), minlength=len(tree.levels[t + 1].probs))
        return out

    def _tree_rows(self) -> list[np.ndarray]:
        return [key_rows(level // 2, level % 2, self.game.memory) for level in dense_histories(self.stage, self.game.rounds, self.game.memory)]

    # -- any agent: the tree its declared memory allows (RepeatedAudit) ---------------------------
    def response(self, solved: RepeatedResult) -> HistoryTable:
        return HistoryTable(solved.gap_table, "BestResponse", LETTERS, LETTERS)

    def whole_history(self) -> "IPDSolver":
        return IPDSolver(self.game.with_memory(None), self.agent_player)

    def decision_after(self, history: tuple) -> Decision:
        """The agent's decision after `history` ((own, other) moves), from cached parent states."""
        return self._state_after(tuple(history)).decision(self.agent_player)

    def evaluate_agent(self, agent: Policy, threshold: float = 0.0, projection: bool = True) -> tuple[ExactResult, HistoryTable]:
        """`audit`'s result and gap-maximising opponent (a memory game's states by default)."""
        found = self.audit(agent, threshold, projection)
        return found.result, found.response

    def _state_after(self, history: tuple):
        """The game state after `history`, cached by length: a query of length L drops the states
        shorter than L - 1, so reading round by round keeps two rounds (every prefix of a long match
        kept its own copy of the history: memory grew with the square of the rounds)."""
        length = len(history)
        for shorter in [n for n in self._states if n < length - 1]:
            del self._states[shorter]
        cached = self._states.setdefault(length, {})
        if history not in cached:
            if not history:
                cached[history] = self.game.new_initial_state()
            else:
                own, other = history[-1]
                child = self._state_after(history[:-1]).clone()
                child.apply_actions((own, other) if self.agent_player == 0 else (other, own))
                cached[history] = child
        return cached[history]


def solver(game: IteratedPrisonersDilemma) -> IPDSolver:
    return IPDSolver(game)


__all__ = ["IPDSolver", "solver", "ACTION_NAMES"]
