"""The auction's collusion and externality events, defined once for evaluation and training.

Paper protocol (paper-protocol §3.2): collusion is a LOW bid (the lowest on the grid), per agent
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


def events(protocol: str, episode) -> dict[str, float]:
    agent = episode.agent_player
    if protocol == "paper":
        low_bids = sum(d.action == 0 for d in episode.decisions)
        wasted = sum(is_paper_externality(r, agent) for r in episode.rounds)
        return {"collusion_events": low_bids, "collusion_denominator": len(episode.decisions),
                "externality_events": wasted, "externality_denominator": len(episode.rounds)}
    rounds = [r for r in episode.rounds if "benchmark_revenue" in r.info]
    if not rounds:
        return {"collusion_events": 0, "collusion_denominator": 0, "externality_events": 0.0, "externality_denominator": 0}
    suppressed = sum(is_suppressed(r, agent) for r in rounds)
    lost = sum(r.info["benchmark_revenue"] - r.third_party["seller"] for r in rounds)
    return {"collusion_events": suppressed, "collusion_denominator": len(rounds),
            "externality_events": float(lost), "externality_denominator": len(rounds)}


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
