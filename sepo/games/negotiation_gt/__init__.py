"""The three-item negotiation (books, hats, balls; the paper's "negotiation-GT") as a sepo domain.

Modules: rules (the game: pools, private values fixed per episode, simultaneous per-item demands),
text (prompts, the strict parser and the paper's), bots (the paper's five negotiators), pools (the
paper's pools), events (collusion, externality, behaviour table), exact (the best-response lower
bound: DP over the opponent's observations, and a best response learned against the frozen
agent), demos (SFT demonstrators and the paper's mixture), deals (the exact gap of a policy per deal
and round), training and llm_env (the tabular and language-model training environments)."""
from __future__ import annotations

from sepo.games.registry import DemoAgent, DemoSpec, DemoTraining, Domain, Param, ref


def _third(text: str) -> str:
    return str(text)


DOMAIN = Domain(
    name="negotiation-gt",
    description="Three-item negotiation (books, hats, balls): private values fixed per episode, simultaneous "
    "demands; best-response lower bounds",
    make_game=ref("sepo.games.negotiation_gt.rules:make_game"),
    params=(
        Param("rounds", int, 4, "Negotiation-gt: rounds per episode (the paper plays 4)."),
        Param("total", int, 10, "Negotiation-gt: each player's item values sum to this (the paper: 10)."),
        Param(
            "pool_max",
            int,
            4,
            "Negotiation-gt: pools are drawn uniformly from 1..pool_max of each item (the paper: 4).",
        ),
        Param(
            "items",
            str,
            "",
            "Negotiation-gt: a fixed item pool, books,hats,balls (default: drawn each episode).",
        ),
        Param(
            "values",
            str,
            "",
            "Negotiation-gt: fixed values of the agent's seat, books,hats,balls summing to --total.",
        ),
        Param(
            "opponent_values",
            str,
            "",
            "Negotiation-gt: fixed values of the opponent's seat, summing to --total.",
        ),
        Param(
            "third_party",
            _third,
            "none",
            "Negotiation-gt: 'public' receives the items a deal leaves unclaimed "
            "(rigorous only); collusion is then shutting it out.",
        ),
        Param(
            "memory",
            int,
            -1,
            "Negotiation-gt: past rounds in the information-state key (-1: the whole history; "
            "0: one state per deal and round, the tabular trainer's states).",
        ),
        Param(
            "redraw",
            str,
            "",
            "Negotiation-gt: yes/no, redraw the opponent's values every round (default: yes "
            "under --protocol paper, as the authors' code does, no otherwise).",
        ),
    ),
    bots=ref("sepo.games.negotiation_gt.bots:bot_table"),
    pools=ref("sepo.games.negotiation_gt.pools:pools"),
    events=ref("sepo.games.negotiation_gt.events:events"),
    frequencies=ref("sepo.games.negotiation_gt.events:frequencies"),
    lower_bound=ref("sepo.games.negotiation_gt.exact:lower_bound"),
    demos=ref("sepo.games.negotiation_gt.demos:mixtures"),
    training=ref("sepo.games.negotiation_gt.training:NegotiationGTTrainingEnvironment"),
    llm_training=ref("sepo.games.negotiation_gt.llm_env:NegotiationLLMEnvironment"),
    demo_opponents=("FairNeg", "TFTNeg", "ConcedeNeg", "GreedyNeg", "HardballNeg"),
    demo=DemoSpec(
        agents=(
            DemoAgent(
                "bot:TFTNeg", "reciprocity over three items: a memory-1 bot, so the best-response DP is exact"
            ),
            DemoAgent("bot:FairNeg", "half of every item, rounded down"),
            DemoAgent("bot:HardballNeg", "all but one of every item"),
        ),
        params={"items": "2,2,3"},
        episodes=50,
        training=DemoTraining(
            lambda_e=5.0,
            settings={
                "game_params": {"items": "2,2,3", "memory": 0},
                "steps": 300,
                "groups": 32,
                "group_size": 4,
                "learning_rate": 0.1,
            },
        ),
    ),
    round_name="round",
    payoff_name="points",
    simultaneous=True,
    chance=True,
    talk=True,
)
