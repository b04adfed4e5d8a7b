"""The exact adversarial best response in the IPD (the domain's `ExactSolver`).

The agent's behaviour is a table over the game's information states (`game.info_keys()`: every
history, or the last `memory` rounds of it), read from any policy with one batched call at the
canonical decisions (`decisions()`: each key at the earliest round it occurs). The generic DP of
`sepo.metrics.repeated` then gives the adversarial gap max_σ E[u_O − u_A] per round, the best
response payoff max_σ E[u_O] per round with the agent's payoff against it, the maximising
opponent, and ∂gap/∂table with the maximiser held fixed.

With `memory=n` the DP runs on (round, last n rounds) states: exact for any agent that
remembers at most n rounds (tabular memory-n policies, TFT with n = 1), and the gap of the
memory-n policy that plays like the agent at the canonical decisions otherwise.

Language models and other costly agents can instead be read round by round with
`evaluate_agent(agent, threshold)`: branches the agent reaches with probability below the
threshold are not expanded, and the bound on the error this causes is reported.
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.base import Decision
from sepo.games.ipd.rules import ACTION_NAMES, LETTERS, IteratedPrisonersDilemma, history_key
from sepo.metrics.exact import ExactResult
from sepo.games.ipd.rollouts import key_rows
from sepo.metrics.repeated import AgentTree, HistoryTable, RepeatedResult, dense_histories, read_agent, solve, tree_from_levels
from sepo.policies.base import Policy


class IPDSolver:
    """Exact DP over the joint-history tree of one IPD game, the agent in seat 0."""

    value_name = "adversarial_gap"

    def __init__(self, game: IteratedPrisonersDilemma, agent_player: int = 0):
        self.game = game
        self.agent_player = agent_player
        self.stage = game.stage_game(agent_player)
        self.keys = tuple(game.info_keys())
        self._row = {key: i for i, key in enumerate(self.keys)}
        self._decisions: list[Decision] | None = None
        if game.memory is None:
            self.method = f"exact DP over the joint-history tree ({game.rounds} rounds, {len(self.keys)} agent histories)"
        else:
            self.method = (f"exact DP over (round, last {game.memory} rounds) states: exact for agents that remember at most "
                           f"{game.memory} rounds")

    # -- the agent's information states ---------------------------------------------------------
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
        return np.array([self._row[history_key(self.game.remembered(history))] for _, history in queries], dtype=np.int64)

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

    # -- costly agents, read round by round --------------------------------------------------------
    def evaluate_agent(self, agent: Policy, threshold: float = 0.0) -> tuple[ExactResult, HistoryTable]:
        """Read the policy `agent` plays (`policy_estimate`: exact, or estimated from its replies for
        a sampled text agent) on the tree, one batched call per round when pruning, else one call
        over all keys, and solve. Prompts that repeat (the same information-state key) are read once.
        Returns the result and the gap-maximising opponent."""
        from sepo.policies.text_policy import policy_estimate

        if threshold == 0.0 or self.game.memory is not None:
            if threshold and self.game.memory is not None:
                raise SepoError("--threshold needs the full history tree; drop --memory to prune")
            table = policy_estimate(agent, self.decisions()).table()
            return self._answer(self.solve_table(table))
        states = {(): self.game.new_initial_state()}

        def reader(queries):
            decisions = {}
            for _, history in queries:
                key = history_key(self.game.remembered(history))
                if key not in decisions:
                    decisions[key] = self._state_after(states, history).decision(self.agent_player)
            table = policy_estimate(agent, list(decisions.values())).table()
            rows = {key: i for i, key in enumerate(decisions)}
            return table[[rows[history_key(self.game.remembered(h))] for _, h in queries]]

        return self._answer(solve(read_agent(self.stage, self.game.rounds, reader, None, threshold)))

    def _answer(self, solved: RepeatedResult) -> tuple[ExactResult, HistoryTable]:
        return self.result(solved), HistoryTable(solved.gap_table, "BestResponse", LETTERS, LETTERS)

    def _state_after(self, states: dict, history: tuple):
        if history not in states:
            parent = self._state_after(states, history[:-1])
            own, other = history[-1]
            child = parent.clone()
            child.apply_actions((own, other) if self.agent_player == 0 else (other, own))
            states[history] = child
        return states[history]



def solver(game: IteratedPrisonersDilemma) -> IPDSolver:
    return IPDSolver(game)


__all__ = ["IPDSolver", "solver", "ACTION_NAMES"]
