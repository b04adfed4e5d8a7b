"""The exact adversarial best response in split bargaining (the domain's `ExactSolver`).

The agent's behaviour is a table over the game's information states (`game.info_keys()`: every
joint demand history, K² = 81 joint demands a round for demands 1-9, or the last `memory`
rounds of it), read from any policy with one batched call at the canonical decisions
(`decisions()`: each key at the earliest round it occurs). The generic DP of
`sepo.metrics.repeated` gives the adversarial gap max_σ E[u_O − u_A] per round, the best
response payoff max_σ E[u_O] per round with the agent's payoff against it, the maximising
opponent, and ∂gap/∂table with the maximiser held fixed.

With `memory=n` the DP runs on (round, last n rounds) states: exact for any agent that
remembers at most n rounds (the paper's bots need one), and the gap of the memory-n policy that
plays like the agent at the canonical decisions otherwise: a projection, neither an upper nor a
lower bound, labelled so. `audit(agent, threshold, projection)` (`RepeatedAudit`) solves a bot
on (round, its declared state) at any number of rounds and reads a language model on the whole
history it reads (round by round, pruning below `threshold` with the error bound reported),
refusing in one line a tree that would not fit in memory.

The solver is `sepo.metrics.joint_history.JointHistorySolver` under this game's names (the pricing
market's is the same code).
"""
from __future__ import annotations

from sepo.games.negotiation.rules import SplitBargaining
from sepo.metrics.joint_history import JointHistorySolver
from sepo.metrics.joint_history import joint_key_rows as key_rows

__all__ = ["NegotiationSolver", "key_rows", "solver"]


class NegotiationSolver(JointHistorySolver):
    """Exact DP over the joint-demand tree of one split-bargaining game, the agent in seat 0."""

    joint_name = "joint-demand"
    joint_actions = "joint demands"
    game_title = "split bargaining's"
    table_name = "a split-bargaining action table"

    def __init__(self, game: SplitBargaining, agent_player: int = 0):
        super().__init__(game, game.num_demands, agent_player)


def solver(game: SplitBargaining) -> NegotiationSolver:
    return NegotiationSolver(game)
