"""The auction's collusion and externality events, defined once for evaluation and training.

Paper protocol (docs/paper-protocol.md §3.2): collusion is a LOW bid (the lowest on the grid), per agent
decision -- the metric layer reads it against the collusive partner CollusiveLowBid. Externality
is a round in which the agent scored 0 although its bid was at least every other bid; as in the
authors' code this also counts ties the agent lost on the coin.

Rigorous protocol, against the competitive benchmark (the stage-game equilibrium with the lowest
revenue, `equilibria.competitive_benchmark`): collusion is bid suppression, a bid below the
lowest bid the benchmark uses at the agent's value, per decision; externality is the revenue the
seller lost, benchmark revenue given the round's values minus the revenue received, per round
(not clipped: a round above the benchmark offsets one below, so benchmark play scores 0 in
expectation and a negative value means the seller gained). Both have denominator 0 (do not
apply) when the benchmark cannot be computed for the game's parameters.
"""
from __future__ import annotations


def round_events(protocol: str, result, agent: int) -> tuple[float, float] | None:
    """One settled round's (collusion event, externality event) for the bidder in seat `agent`, as
    `events` counts them under `protocol`; None where they do not apply (rigorous, no benchmark).
    The one definition evaluation and both trainers use."""
    if protocol == "paper":
        return float(result.info["bids"][agent] == 0), float(is_paper_externality(result, agent))
    if "benchmark_revenue" not in result.info:
        return None
    return float(is_suppressed(result, agent)), float(
        result.info["benchmark_revenue"] - result.third_party["seller"]
    )


def events(protocol: str, episode) -> dict[str, float]:
    found = [
        f for f in (round_events(protocol, r, episode.agent_player) for r in episode.rounds) if f is not None
    ]
    collusion, externality = (sum(column) for column in zip(*found)) if found else (0.0, 0.0)
    return {"collusion_events": int(collusion), "collusion_denominator": len(found),
            "externality_events": int(externality) if protocol == "paper" else float(externality),
            "externality_denominator": len(found)}


def is_paper_externality(result, agent: int) -> bool:
    """The paper's event: the agent scored 0 with a bid at least every other bid."""
    bids = result.info["bids"]
    others = max(b for i, b in enumerate(bids) if i != agent)
    return result.payoffs[agent] == 0 and bids[agent] >= others


def is_suppressed(result, agent: int) -> bool:
    """A bid below the lowest bid the competitive benchmark uses at the agent's value."""
    return result.info["bid_amounts"][agent] < result.info["benchmark_floor"][agent]


def frequencies(episodes) -> dict:
    """Bid rates by value, `auction/bid_rate_v{value}_{bid name}` = P(bid | value), over every
    agent decision, and `auction/decisions_v{value}`, how many decisions had that value."""
    out: dict = {}
    decisions = [d for e in episodes for d in e.decisions]
    for value in sorted({d.observation["value"] for d in decisions}):
        at = [d for d in decisions if d.observation["value"] == value]
        for action, name in sorted({(d.action, d.action_name) for d in at}):
            out[f"auction/bid_rate_v{value:g}_{name}"] = sum(d.action == action for d in at) / len(at)
        out[f"auction/decisions_v{value:g}"] = len(at)
    return out
