"""Split bargaining (the paper's "Negotiation v1") as a sepo domain: rounds of simultaneous
integer demands over a pie (1-9 over 10, 4 rounds in the paper); a deal if they fit, else a
breakdown. Both of the paper's versions under `--protocol paper` (`--paper-version writeup`,
the default, or `code`); any pie, demand range, number of rounds and breakdown cost in the
rigorous protocol; the exact adversarial best response over the joint demand history.

Modules: rules (the game), text (prompts, strict and paper parsers), bots (the paper's bots and
SFT demonstrators), pools (both paper versions), events (collusion, externality, bargaining
metrics), exact (the exact solver over sepo.metrics.repeated), demos (SFT mixtures), rollouts
and training (vectorised matches, the tabular training environment), llm_env (language-model
SEPO)."""
from __future__ import annotations

from sepo.games.registry import DemoAgent, DemoSpec, DemoTraining, Domain, Param, ref


def _memory(text: str):
    try:
        return "full" if str(text).lower() in ("none", "full") else int(text)
    except ValueError:
        raise ValueError("expected an integer >= 0 or 'full'") from None


DOMAIN = Domain(
    name="negotiation",
    description="Split bargaining: simultaneous demands over a pie each round, a deal if they fit; exact "
                "adversarial best response",
    make_game=ref("sepo.games.negotiation.rules:make_game"),
    params=(
        Param("pie", int, 10, "negotiation: points to split each round (the paper: 10)."),
        Param("min_demand", int, 1, "negotiation: smallest demand (the paper: 1)."),
        Param("max_demand", int, 9, "negotiation: largest demand, at most the pie (the paper: 9)."),
        Param("rounds", int, 4, "Rounds per match (negotiation: the paper plays 4)."),
        Param(
            "breakdown_cost",
            float,
            0.0,
            "negotiation: points each side loses when the demands do not fit (the paper: 0).",
        ),
        Param(
            "memory",
            _memory,
            1,
            "Rounds an information state remembers (tabular memory-n policies and the exact "
            "solver's states; negotiation: 1 by default, 'full' for the whole history).",
        ),
        Param(
            "paper_version",
            str,
            "writeup",
            "negotiation, --protocol paper only: writeup (the write-up's pools, breakdown-rate "
            "externality, s = 0.6) or code (the reachable code's pools and metrics, s = 1).",
        ),
    ),
    bots=ref("sepo.games.negotiation.bots:bot_table"),
    pools=ref("sepo.games.negotiation.pools:pools"),
    events=ref("sepo.games.negotiation.events:events"),
    frequencies=ref("sepo.games.negotiation.events:frequencies"),
    solver=ref("sepo.games.negotiation.exact:solver"),
    demos=ref("sepo.games.negotiation.demos:mixtures"),
    demo_opponents=("Selfish", "Fair", "Balanced"),
    training=ref("sepo.games.negotiation.training:NegotiationTrainingEnvironment"),
    llm_training=ref("sepo.games.negotiation.llm_env:NegotiationLLMEnvironment"),
    demo=DemoSpec(
        agents=(
            DemoAgent(
                "bot:ConcedeStep",
                "demands 6, one less after each breakdown: the paper's exploiters find half its gap",
            ),
            DemoAgent("bot:Fair", "always half the pie: nothing to exploit"),
            DemoAgent("bot:Complement", "asks what the other's last demand left"),
        ),
        training=DemoTraining(
            lambda_e=5.0, settings={"steps": 300, "groups": 32, "group_size": 4, "learning_rate": 0.1}
        ),
    ),
    round_name="round",
    payoff_name="points",
    simultaneous=True,
    talk=True,
)
