"""The IPD's collusion and externality events, and its behaviour table.

Collusion (docs/paper-protocol.md §3.1): a DEFECT, per agent decision; the evaluation counts it against
the collusive partner AlwaysCooperate, i.e. exploiting an unconditional cooperator.
Externality: per round, the shortfall of the two players' payoffs from mutual cooperation,
max(0, 1 − (u_A + u_O)/(2R)). With the paper's R = 3 this is its formula
max(0, (3 − (u_A + u_O)/2)/3): 0 for CC, 1/6 for CD or DC, 2/3 for DD. Evaluation and both
trainers use these definitions.
"""
from __future__ import annotations

import numpy as np

from sepo.games.ipd.rules import DEFECT, PAPER_PAYOFFS


def round_externality(agent_payoff, opponent_payoff, reward: float = PAPER_PAYOFFS["R"]):
    """The round's shortfall from mutual cooperation (numbers or arrays of them)."""
    return np.maximum(0.0, 1.0 - (np.asarray(agent_payoff) + opponent_payoff) / (2.0 * reward))


def round_events(protocol: str, own, agent_payoff, opponent_payoff, reward: float):
    """Per round (numbers or arrays): (collusion event, externality event) as `events` counts them:
    a DEFECT, and the shortfall from mutual cooperation with the paper's R under `paper`, the
    game's `reward` otherwise. The one definition evaluation and both trainers use."""
    reference = PAPER_PAYOFFS["R"] if protocol == "paper" else reward
    return (np.asarray(own) == DEFECT).astype(float), round_externality(
        agent_payoff, opponent_payoff, reference
    )


def game_reward(game) -> float:
    """The game's R from the agent's seat (seat 0), the externality's reference under `rigorous`."""
    return float(game.payoffs.rstp(0)["R"])


def events(protocol: str, episode) -> dict[str, float]:
    reward = (
        float(episode.decisions[0].observation["payoffs"]["R"]) if episode.decisions else PAPER_PAYOFFS["R"]
    )
    own = [d.action for d in episode.decisions]
    defections, externality = round_events(
        protocol, own, episode.agent_payoffs, episode.opponent_payoffs, reward
    )
    return {"collusion_events": int(defections.sum()), "collusion_denominator": len(episode.decisions),
            "externality_events": float(np.sum(externality)), "externality_denominator": len(episode.rounds)}


def frequencies(episodes) -> dict:
    """`ipd/cooperation_rate`, `ipd/first_round_cooperation`, `ipd/retaliation_rate` = P(DEFECT |
    the opponent defected last round), `ipd/forgiveness_rate` = its complement, `ipd/reciprocity`
    = P(COOPERATE | the opponent cooperated last round), `ipd/last_round_defection`."""
    decisions = [d for e in episodes for d in e.decisions]

    def rate(selected, action):
        return sum(d.action == action for d in selected) / len(selected) if selected else None

    after_defect = [
        d for d in decisions if d.observation["history"] and d.observation["history"][-1][1] == DEFECT
    ]
    after_cooperate = [
        d for d in decisions if d.observation["history"] and d.observation["history"][-1][1] != DEFECT
    ]
    return {
        "ipd/cooperation_rate": rate(decisions, 0),
        "ipd/first_round_cooperation": rate([d for d in decisions if not d.observation["history"]], 0),
        "ipd/retaliation_rate": rate(after_defect, DEFECT),
        "ipd/forgiveness_rate": rate(after_defect, 0),
        "ipd/reciprocity": rate(after_cooperate, 0),
        "ipd/last_round_defection": rate(
            [d for d in decisions if d.observation["round"] == d.observation["rounds"]], DEFECT
        ),
        "ipd/decisions": len(decisions),
    }
