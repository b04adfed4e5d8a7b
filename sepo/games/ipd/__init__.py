"""The iterated prisoner's dilemma as a sepo domain: `rounds` simultaneous rounds of COOPERATE or
DEFECT, the paper's payoffs CC 3/3, DC 5/0, CD 0/5, DD 1/1 by default, any prisoner's dilemma
matrix in the rigorous protocol, Axelrod strategies as opponents, and the exact adversarial best
response over the joint-history tree.

Modules: rules (the game), text (prompts, strict and paper parsers), bots (the paper's bots;
`axelrod:NAME` through axelrod_bots), pools (the paper's final pools), events (collusion,
externality, behaviour table), exact (the exact solver over sepo.metrics.repeated), demos (SFT
mixtures), rollouts and training (vectorised matches, the tabular training environment), llm_env
(language-model SEPO)."""
from __future__ import annotations

from sepo.games.registry import DemoAgent, DemoSpec, DemoTraining, Domain, Param, ref


def _memory(text: str):
    try:
        return None if str(text).lower() in ("", "none", "full") else int(text)
    except ValueError:
        raise ValueError("expected an integer >= 0 or 'full'") from None


DOMAIN = Domain(
    name="ipd",
    description="Iterated prisoner's dilemma: simultaneous COOPERATE/DEFECT rounds; Axelrod opponents; exact "
                "adversarial best response",
    make_game=ref("sepo.games.ipd.rules:make_game"),
    params=(
        Param("rounds", int, 8, "IPD: rounds per match (the paper plays 8)."),
        Param(
            "payoffs",
            str,
            None,
            "IPD: stage payoffs, R=3,S=0,T=5,P=1 (the paper's, default) or a 2x2x2 JSON matrix "
            "[row][column] -> [row payoff, column payoff]; a non-dilemma is played with a warning.",
        ),
        Param(
            "memory",
            _memory,
            None,
            "IPD: rounds an information state remembers (tabular memory-n policies and the exact "
            "solver's states); default: the whole history.",
        ),
    ),
    bots=ref("sepo.games.ipd.bots:bot_table"),
    make_bot=ref("sepo.games.ipd.bots:make_bot"),
    pools=ref("sepo.games.ipd.pools:pools"),
    events=ref("sepo.games.ipd.events:events"),
    frequencies=ref("sepo.games.ipd.events:frequencies"),
    solver=ref("sepo.games.ipd.exact:solver"),
    demos=ref("sepo.games.ipd.demos:mixtures"),
    training=ref("sepo.games.ipd.training:IPDTrainingEnvironment"),
    llm_training=ref("sepo.games.ipd.llm_env:IPDLLMEnvironment"),
    agents={"axelrod": ref("sepo.games.ipd.bots:axelrod_agent")},
    demo_opponents=("AlwaysCooperate", "AlwaysDefect", "TFT", "GenerousTFT", "GrimTrigger"),
    demo=DemoSpec(
        agents=(
            DemoAgent("bot:TFT", "the paper's exploiters take half of what the exact gap maximiser takes"),
            DemoAgent("bot:GrimTrigger", "unforgiving reciprocity, audited exactly"),
            DemoAgent("uniform", "coin flips"),
        ),
        training=DemoTraining(
            lambda_e=5.0,
            settings={
                "game_params": {"memory": 1},
                "steps": 300,
                "groups": 32,
                "group_size": 4,
                "learning_rate": 0.1,
            },
        ),
        featured=True,
    ),
    round_name="round",
    payoff_name="points",
    simultaneous=True,
)
