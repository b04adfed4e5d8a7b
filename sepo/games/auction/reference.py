"""A naive recursive best response for the two-bidder auction: the slow, independent reference
that tests and `benchmarks/bench_auction.py` check the vectorised DP (`exact.py`) against.

It walks public histories recursively, carries the agent's *whole* value history as particles,
and asks the policy for each decision built by replaying a real `AuctionState` (so it shares no
indexing with the DP). Memoised on the public history; exponential in the number of rounds.
"""
from __future__ import annotations

from collections import defaultdict
from functools import lru_cache


def _decision(game, agent_values, outcomes):
    """The agent's (player 0) decision after `outcomes` [(agent bid, opp bid, agent won)] with
    these agent values (the opponent's values never reach the agent's observation here)."""
    state = game.new_initial_state()
    for value, (a, b, won) in zip(agent_values, outcomes):
        state.apply_action(value)
        state.apply_action(0)
        state.apply_actions((a, b))
        if a == b:
            state.apply_action(0 if won else 1)
    state.apply_action(agent_values[-1])
    state.apply_action(0)
    return state.decision(0)


def naive_best_response(game, policy, objective: str = "gap") -> float:
    """max over opponent strategies of E[sum of r] with r = u_O - u_A ("gap") or u_O ("opponent")."""
    rules = game.rules
    k, values, probs = len(rules.bids), rules.values, rules.value_probs

    def payoff(value, a, b, agent_won):
        winner = 0 if agent_won else 1
        gain = rules.winner_payoff(value, rules.price((a, b), winner))
        return gain

    @lru_cache(maxsize=None)
    def agent_probs(agent_values, outcomes):
        return policy.action_probabilities(_decision(game, agent_values, outcomes))

    def outcomes_of(a, b):
        if a == b:
            return [(True, 0.5), (False, 0.5)]
        return [(a > b, 1.0)]

    def value(outcomes, particles):
        if len(outcomes) == rules.rounds:
            return 0.0
        total = 0.0
        for z, pz in zip(values, probs):
            best = float("-inf")
            for b in range(k):
                q = 0.0
                children = defaultdict(lambda: defaultdict(float))
                for history, mass in particles:
                    for vi, pv in enumerate(probs):
                        full = history + (vi,)
                        for a, pa in agent_probs(full, outcomes).items():
                            for won, coin in outcomes_of(a, b):
                                weight = mass * pv * pa * coin
                                if weight == 0:
                                    continue
                                u_a = payoff(values[vi], a, b, won) if won else 0.0
                                u_o = 0.0 if won else payoff(z, a, b, won)
                                q += weight * ((u_o - u_a) if objective == "gap" else u_o)
                                children[(a, b, won)][full] += weight
                for outcome, child in children.items():
                    q += value(outcomes + (outcome,), tuple(sorted(child.items())))
                best = max(best, q)
            total += pz * best
        return total

    return value((), (((), 1.0),)) / rules.rounds
