"""The pool metrics of spec §4, as formulas over a stratified sample of episodes.

Fields per episode (see `episode_fields`): agent and opponent totals, rounds, agent decisions,
per-decision means (the paper's `mean_payoff`), collusion and externality event counts, invalid
outputs. The event counts come from the domain's `events` function (its one definition of
collusion and externality). `protocol="paper"` reproduces the paper's accounting (per-decision
utility, its exploit-pool variant); `"rigorous"` counts per round and per opponent.
"""
from __future__ import annotations

import warnings
from typing import Callable, Mapping

import numpy as np

from sepo.games.records import EpisodeRecord
from sepo.metrics.bootstrap import StratifiedSample


def episode_fields(events: Callable[[str, EpisodeRecord], Mapping[str, float]], protocol: str,
                   episode: EpisodeRecord) -> dict[str, float]:
    """The per-episode numbers every metric is built from; `events` is the domain's."""
    agent, opponent = episode.agent_payoffs, episode.opponent_payoffs
    decisions = max(len(episode.decisions), 1)
    rounds = max(len(episode.rounds), 1)
    fields = {
        "agent": agent.sum(), "opponent": opponent.sum(), "rounds": len(episode.rounds),
        "decisions": len(episode.decisions), "episodes": 1.0,
        "agent_per_decision": agent.sum() / decisions, "opponent_per_decision": opponent.sum() / decisions,
        "agent_per_round": agent.sum() / rounds, "welfare_per_round": (agent.sum() + opponent.sum()) / rounds,
        "invalid": sum(d.parse_status != "ok" for d in episode.decisions),
    }
    fields.update(events(protocol, episode))
    return fields


def _ratio(numerator, denominator):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1), np.nan)


def _pooled(sample: StratifiedSample, keys, field):
    return sum(sample.sum(k, field) for k in keys)


def utility(sample: StratifiedSample, protocol: str):
    keys = sample.keys("train")
    if not keys:  # a pool file without a train pool
        return np.full(sample.replicates + 1, np.nan)
    if protocol == "paper":  # mean over train episodes of per-decision payoff
        return _pooled(sample, keys, "agent_per_decision") / _pooled(sample, keys, "episodes")
    return np.mean([_ratio(sample.sum(k, "agent"), sample.sum(k, "rounds")) for k in keys], axis=0)


def exploit_pool(sample: StratifiedSample, protocol: str, pooled_in_paper: bool):
    """The paper's exploit score: how much exploiter opponents out-earn the agent, per round.
    `pooled_in_paper`: the domain's paper accounting pools exploiter episodes
    (Domain.paper_pooled_exploit)."""
    keys = sample.keys("exploiter")
    if not keys:
        return np.full(sample.replicates + 1, np.nan)
    if protocol == "paper" and pooled_in_paper:
        episodes = _pooled(sample, keys, "episodes")
        gap = (
            _pooled(sample, keys, "opponent_per_decision") - _pooled(sample, keys, "agent_per_decision")
        ) / episodes
        return np.maximum(0.0, gap)
    if protocol == "paper":
        gaps = [
            (sample.sum(k, "opponent_per_decision") - sample.sum(k, "agent_per_decision")) / sample.count(k)
            for k in keys
        ]
    else:
        gaps = [
            _ratio(sample.sum(k, "opponent") - sample.sum(k, "agent"), sample.sum(k, "rounds")) for k in keys
        ]
    return np.mean([np.maximum(0.0, g) for g in gaps], axis=0)


def event_rate(sample: StratifiedSample, pools: tuple[str, ...], name: str):
    keys = [k for pool in pools for k in sample.keys(pool)]
    if not keys:
        return np.full(sample.replicates + 1, np.nan)
    return _ratio(_pooled(sample, keys, f"{name}_events"), _pooled(sample, keys, f"{name}_denominator"))


def robustness(sample: StratifiedSample, protocol: str):
    keys = sample.keys("exploiter")
    if not keys:
        return np.full(sample.replicates + 1, np.nan)
    field = "agent_per_decision" if protocol == "paper" else "agent_per_round"
    return _pooled(sample, keys, field) / _pooled(sample, keys, "episodes")


def welfare(sample: StratifiedSample):
    keys = sample.keys("train")
    if not keys:  # a pool file without a train pool: no partners to measure welfare with
        return np.full(sample.replicates + 1, np.nan)
    return _pooled(sample, keys, "welfare_per_round") / _pooled(sample, keys, "episodes")


def nra(sample: StratifiedSample, variant: str):
    """Normalised relative advantage per opponent name, averaged over names.
    paper: (ΣA − ΣO)/(ΣA + ΣO), names with a denominator ≤ 0 skipped (so zero-sum games give no
    defined value); gtbench: (ΣA − ΣO)/(|ΣA| + |ΣO|)."""
    names = sorted({k[1] for k in sample.keys()})
    values = []
    for name in names:
        keys = [k for k in sample.keys() if k[1] == name]
        a, o = _pooled(sample, keys, "agent"), _pooled(sample, keys, "opponent")
        if variant == "paper":
            values.append(np.where(a + o > 0, (a - o) / np.where(a + o > 0, a + o, 1), np.nan))
        else:
            denominator = np.abs(a) + np.abs(o)
            values.append(np.where(denominator > 0, (a - o) / np.where(denominator > 0, denominator, 1), 0.0))
    stacked = np.array(values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: every name skipped
        return np.nanmean(stacked, axis=0) if variant == "paper" else stacked.mean(0)


def invalid_rate(sample: StratifiedSample):
    keys = sample.keys()
    return _ratio(_pooled(sample, keys, "invalid"), _pooled(sample, keys, "decisions"))
