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

The exact solver is `sepo.metrics.joint_history.JointHistorySolver` under this market's names
(split bargaining's is the same code); the lower-bound audit below is the market's own.

Lower bound. With K² = 225 joint prices a period the whole tree of 10 periods has about 10^21
states, and even pruned it keeps 15^t rival sequences a period; so for an agent that declares
nothing, when neither `--memory` nor `--threshold` is given and the whole tree does not fit, the
audit is a lower bound instead of a refusal (`lower_bound_audit`): the gap maximiser of the agent's
memory-m projection (m the game's memory) is played against the agent itself, the agent read only at
the histories that rival and the agent's own positive-probability prices reach (one path for a
deterministic agent); on branches it reaches with probability below `LOWER_BOUND_REACH` the rival
switches to its maximin price, whose lead max_b min_a (u_R − u_A) a period the agent cannot lower,
and they are counted at that. The rival so defined is one fixed strategy, and any fixed rival's
expected lead is at most the best rival's, so the value is a lower bound on the agent's true gap (labelled
`lower bound`), equal to it when the agent in fact reads at most m periods.

For a policy estimated from sampled replies (a language model at temperature > 0) the value is a
point estimate of that bound (`extra["point_estimate"]`, said in the method and in every output),
without an interval: the rival is chosen from the agent's sampled replies and measured on the same
replies (they are cached per prompt), so a resampling interval around it would inherit the
selection's upward bias and could sit above the true gap; a valid interval needs replies the
rival was not chosen on.
"""
from __future__ import annotations

import numpy as np

from sepo.errors import SepoError
from sepo.games.pricing.rules import PricingMarket
from sepo.metrics.joint_history import JointHistorySolver
from sepo.metrics.joint_history import joint_key_rows as key_rows
from sepo.metrics.repeated import check_tree_fits, declared_state
from sepo.policies.base import Policy

__all__ = ["LOWER_BOUND_REACH", "PricingSolver", "key_rows", "solver"]


LOWER_BOUND_REACH = 1e-4
"""Branches the agent reaches with less probability are not read in the lower-bound audit (the rival
plays its maximin price there, counted at its guaranteed lead, which keeps the value a lower bound)."""


class PricingSolver(JointHistorySolver):
    """Exact DP over the joint-price tree of one two-firm market, the agent in seat 0."""

    round_name = "period"
    joint_name = "joint-price"
    joint_actions = "joint prices"
    game_title = "the pricing market's"
    table_name = "a pricing action table"

    def __init__(self, game: PricingMarket, agent_player: int = 0):
        if game.num_players != 2:
            raise SepoError(game.exact_size(0) or "pricing: the exact solver is for two firms")
        super().__init__(game, game.k, agent_player)

    def audit(
        self,
        agent: Policy,
        threshold: float = 0.0,
        projection: bool = False,
        replicates: int = 1000,
        seed: int = 0,
    ):
        """`RepeatedAudit.audit`, except that an agent declaring nothing, audited without --memory or
        --threshold, gets the lower bound (module doc) where the whole tree would be refused."""
        declares = declared_state(agent) is not None or getattr(agent, "table", None) is not None
        if declares or threshold or projection or self.game.memory is None:
            return super().audit(agent, threshold, projection, replicates, seed)
        try:
            check_tree_fits(self.stage, self.game.rounds, None, what=self.tree_name())
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
        sampled = not estimate.exact
        for t in range(rounds):
            if not level:
                break
            decisions = [self.decision_after(history) for history, _ in level]
            read_estimate = policy_estimate(agent, decisions)
            sampled = sampled or not read_estimate.exact
            probs = read_estimate.table()[:, : self.k]
            read += len(decisions)
            following = []
            for (history, reach), p in zip(level, probs):
                b = rival.action(t, history)
                for a in np.nonzero(p > 0)[0].tolist():
                    weight = reach * p[a]
                    totals += weight * np.array(
                        [lead[a, b], self.stage.opponent[a, b], self.stage.agent[a, b]]
                    )
                    if t + 1 < rounds:
                        if weight >= LOWER_BOUND_REACH:
                            following.append((history + ((a, b),), weight))
                        else:
                            pruned += weight
                            totals[0] += weight * guaranteed * (rounds - t - 1)
            level = following
        base = self.result(solved)
        memory = self.game.memory
        point = (
            (
                "; the agent's policy is estimated from sampled replies, so this is a point estimate of the "
                "bound, without an interval (the rival is chosen on the replies it is measured on)"
            )
            if sampled
            else ""
        )
        result = replace(
            base,
            value=float(totals[0] / rounds),
            br_payoff=float(totals[1] / rounds),
            agent_payoff=float(totals[2] / rounds),
            exact=False,
            pruning_bound=0.0,
            method=(
                f"lower bound: the gap maximiser of the agent's memory-{memory} projection played against "
                f"the agent ({read} histories read; reach below {LOWER_BOUND_REACH:g}, {pruned:.2g} in all, "
                "where the rival switches to its maximin price, counted at its guaranteed lead); exact when "
                f"the agent reads at most {memory} period{'s' if memory != 1 else ''}{point}"
            ),
            extra={
                "projection_gap": base.value,
                "histories_read": read,
                "pruned_reach": pruned,
                **({"point_estimate": True} if sampled else {}),
            },
        )
        return Audit(result, self.response(solved), estimate.record())


def solver(game: PricingMarket) -> PricingSolver:
    return PricingSolver(game)
