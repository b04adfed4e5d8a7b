"""A repeated pricing market (Calvano et al. 2020; Fish et al. 2024's environment for LLM agents)
as a sepo domain: firms set prices on a grid each period under logit demand, with institutions
against collusion (a price cap, sanctions with a detection probability, leniency) as game
parameters; the collusion index Δ as the collusion event, the consumers' surplus loss as the
externality; the exact adversarial best response for two firms.

Modules: market (logit demand, Nash and monopoly benchmarks by scipy), rules (the game and its
institutions), text (prompts and the strict parser), bots (competitive, monopoly, grim trigger,
tit-for-tat, undercutting, uniform), pools, events (collusion, externality, the market table),
exact (the exact solver over sepo.metrics.repeated), demos (SFT mixtures), training and llm_env
(the tabular and language-model training environments)."""
from __future__ import annotations

from sepo.games.registry import Domain, Param, ref


def _memory(text: str):
    try:
        return "full" if str(text).lower() in ("none", "full") else int(text)
    except ValueError:
        raise ValueError("expected an integer >= 0 or 'full'") from None


def _optional_number(text: str):
    return None if str(text).lower() in ("", "none", "off") else float(text)


DOMAIN = Domain(
    name="pricing",
    description="Repeated pricing with logit demand (Calvano et al. 2020) and institutions against "
                "collusion; exact adversarial best response",
    make_game=ref("sepo.games.pricing.rules:make_game"),
    params=(
        Param("firms", int, 2, "pricing: number of firms (exact values and training: 2)."),
        Param(
            "prices",
            int,
            15,
            "pricing: grid points from a bit below the Nash price to a bit above the monopoly price "
            "(Calvano et al.: 15).",
        ),
        Param(
            "grid",
            str,
            None,
            "pricing: explicit comma-separated price grid instead of --prices (not with it), e.g. "
            "1.5,1.6,1.7.",
        ),
        Param("rounds", int, 10, "Rounds per match (pricing: periods, 10 by default)."),
        Param(
            "memory",
            _memory,
            1,
            "Rounds an information state remembers (pricing: 1 by default, 'full' for the whole history).",
        ),
        Param(
            "quality",
            str,
            "2",
            "pricing: product quality a_i, one number or one per firm (Calvano et al.: 2).",
        ),
        Param("outside", float, 0.0, "pricing: the outside good's quality a_0 (Calvano et al.: 0)."),
        Param("mu", float, 0.25, "pricing: logit differentiation mu (Calvano et al.: 0.25)."),
        Param(
            "cost", str, "1", "pricing: marginal cost c_i, one number or one per firm (Calvano et al.: 1)."
        ),
        Param(
            "cap",
            _optional_number,
            None,
            "pricing institution: price cap (grid prices above it are not offered).",
        ),
        Param(
            "sanction_threshold",
            _optional_number,
            None,
            "pricing institution: prices above this are sanctioned.",
        ),
        Param(
            "fine",
            float,
            0.0,
            "pricing institution: the fine per period for a detected price above the threshold "
            "(needs --sanction-threshold).",
        ),
        Param(
            "detection",
            float,
            1.0,
            "pricing institution: probability that a price above the threshold is detected "
            "(needs --sanction-threshold and a --fine).",
        ),
        Param(
            "leniency",
            float,
            0.0,
            "pricing institution: leniency, the fine cut for the reporting firm (0: off; needs "
            "--sanction-threshold and a --fine; see docs/pricing.md).",
        ),
    ),
    bots=ref("sepo.games.pricing.bots:bot_table"),
    pools=ref("sepo.games.pricing.pools:pools"),
    events=ref("sepo.games.pricing.events:events"),
    frequencies=ref("sepo.games.pricing.events:frequencies"),
    solver=ref("sepo.games.pricing.exact:solver"),
    demos=ref("sepo.games.pricing.demos:mixtures"),
    demo_opponents=("Competitive", "TitForTat", "GrimTrigger", "Undercut"),
    training=ref("sepo.games.pricing.training:PricingTrainingEnvironment"),
    llm_training=ref("sepo.games.pricing.llm_env:PricingLLMEnvironment"),
    round_name="period",
    payoff_name="profit",
    simultaneous=True,
    third_parties=("consumers",),
)
