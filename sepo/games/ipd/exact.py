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

The solver is `sepo.metrics.joint_history.JointHistorySolver` (the repeated games' shared DP over
joint-action histories) under the IPD's names, with K = 2; it reads decisions from played game
states (kept two rounds at a time) and names the maximiser's moves by their letters.
"""
from __future__ import annotations

from sepo.games.base import Decision
from sepo.games.ipd.rules import ACTION_NAMES, LETTERS, IteratedPrisonersDilemma
from sepo.metrics.joint_history import JointHistorySolver
from sepo.metrics.repeated import HistoryTable, RepeatedResult


class IPDSolver(JointHistorySolver):
    """Exact DP over the joint-history tree of one IPD game, the agent in seat 0."""

    joint_name = "joint-history"
    joint_actions = "joint moves"
    game_title = "the IPD's"
    table_name = "an IPD action table"

    def __init__(self, game: IteratedPrisonersDilemma, agent_player: int = 0):
        super().__init__(game, 2, agent_player)
        self._states: dict = {}

    def response(self, solved: RepeatedResult) -> HistoryTable:
        """The gap maximiser as a table over its moves' letters (C, D)."""
        return HistoryTable(solved.gap_table, "BestResponse", LETTERS, LETTERS)

    def decision_after(self, history: tuple) -> Decision:
        """The agent's decision after `history` ((own, other) moves), from cached parent states."""
        return self._state_after(tuple(history)).decision(self.agent_player)

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
