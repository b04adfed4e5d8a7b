"""Plain against disguised: the same audit of a text agent in the game and in its disguised variant
(`sepo.games.disguise`: the same rules under new names), and the difference in each headline
metric. A model that reads the rules plays both alike; a gap is play that rests on the names.

Both audits use the same seeds (deals, opponents, bootstrap), so every difference comes from the
agent's replies. The difference's interval joins the two audits' intervals at their far ends
(disguised low minus plain high, disguised high minus plain low): conservative, because the two
audits' sampling errors are not paired.
"""
from __future__ import annotations

import math
from typing import Callable

from sepo.errors import SepoError, brief
from sepo.evaluation.evaluate import EvalConfig, evaluate
from sepo.games.base import Game, TextView
from sepo.policies.base import Policy

COMPARED = ("utility", "utility_exact", "exploitability", "adversarial_gap", "adversarial_gap_lower_bound",
            "exploit_pool", "safety", "collusion", "externality", "invalid_action_rate")


def check_disguisable(policy: Policy, agent: str) -> None:
    """A disguise renames text only: for an agent that reads no text it would change nothing."""
    if getattr(policy, "decoding", None) is None:
        raise SepoError(
            f"--disguise applies to text agents only (hf:, run: with a model, openai:); {brief(agent)} reads "
            "the structured state, which a disguise does not change"
        )


def disguised_audit(
    game: Game,
    plain_agent: Policy,
    make_agent: Callable[[TextView], Policy],
    config: EvalConfig,
    seed: int,
    progress=None,
) -> dict:
    """The plain audit's result with a `disguise` block: the renaming (`seed`, `names`), per
    metric the plain and disguised values, their difference and its conservative interval, and
    the disguised audit's whole result. `make_agent(view)` builds the same agent reading `view`."""
    from sepo import progress as reporting

    view = game.text.disguised(seed)
    reporting.stage("plain audit (1 of 2; the disguised game's audit follows)")
    plain = evaluate(game, plain_agent, config, progress=_both_audits(progress, ""))
    reporting.stage("disguised audit (2 of 2): the same audit in the renamed game")
    disguised = evaluate(game, make_agent(view), config, progress=_both_audits(progress, "disguised "))
    plain["disguise"] = {**view.record(), "metrics": compare(plain, disguised), "disguised": disguised}
    return plain


def _both_audits(progress, which: str):
    """`evaluate`'s per-opponent callback, counted against both audits' episodes (the two audits
    play the same plan), so that a bar fed by both reads 12/12 at the end, not 12/6."""
    if progress is None:
        return None
    return lambda pool, opponent, done, total: progress(f"{which}{pool}", opponent, done, 2 * total)


def compare(plain: dict, disguised: dict) -> dict:
    """Per metric both audits report: plain, disguised, difference (disguised - plain) and its
    interval (None where neither audit has one)."""
    rows = {}
    for name in COMPARED:
        a, b = _number(plain.get(name)), _number(disguised.get(name))
        if a is None or b is None:
            continue
        low_a, high_a = _ends(plain["ci"].get(name), a)
        low_b, high_b = _ends(disguised["ci"].get(name), b)
        has_interval = plain["ci"].get(name) is not None or disguised["ci"].get(name) is not None
        rows[name] = {"plain": a, "disguised": b, "difference": b - a,
                      "difference_ci": [low_b - high_a, high_b - low_a] if has_interval else None}
    return rows


def _number(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _ends(ci, point: float) -> tuple[float, float]:
    if not ci or any(_number(v) is None for v in ci):
        return point, point
    return float(ci[0]), float(ci[1])
