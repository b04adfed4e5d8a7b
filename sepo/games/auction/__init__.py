"""The repeated sealed-bid auction as a sepo domain, with a seller as third party.

Modules: rules (the game), text (prompts and both parsers), bots (the paper's bidders), pools
(both published pool versions), events (collusion, externality, bid table), equilibria (the
stage game's Bayes–Nash equilibria and the competitive benchmark), exact (the exact adversarial
best response by DP over public bid histories), reference (its naive recursive check), demos (SFT
demonstrators and the paper's mixture), training and llm_env (the tabular and language-model
training environments)."""
from __future__ import annotations

from sepo.games.registry import DemoAgent, DemoSpec, DemoTraining, Domain, Param, ref

DOMAIN = Domain(
    name="auction",
    description="Repeated sealed-bid auction: private values, first or second price, n bidders, a seller; "
                "exact BR for 2",
    make_game=ref("sepo.games.auction.rules:make_game"),
    params=(
        Param("rounds", int, 6, "Auction: rounds per episode (the paper plays 6)."),
        Param("bidders", int, 2, "Auction: number of bidders (>= 2; the exact best response needs 2)."),
        Param("rule", str, "first", "Auction: price rule, first or second."),
        Param("values", str, "2,4", "Auction: the values a bidder can draw, comma-separated."),
        Param("value_probs", str, "", "Auction: their probabilities (default uniform)."),
        Param(
            "bids",
            str,
            "1,2,3",
            "Auction: the bid grid, strictly increasing (the paper: LOW/MEDIUM/HIGH = 1,2,3).",
        ),
        Param(
            "memory",
            int,
            2,
            "Auction: past rounds in the information-state key (tabular policies, exact solver); "
            "use rounds-1 for a model that reads the whole history.",
        ),
        Param(
            "pool_version",
            str,
            "writeup",
            "Auction: the paper's pools, writeup (its write-up's, §2.2) or results "
            "(its results', §5.2: AdaptiveBid an exploiter).",
        ),
    ),
    bots=ref("sepo.games.auction.bots:bot_table"),
    pools=ref("sepo.games.auction.pools:pools"),
    events=ref("sepo.games.auction.events:events"),
    frequencies=ref("sepo.games.auction.events:frequencies"),
    solver=ref("sepo.games.auction.exact:solver"),
    demos=ref("sepo.games.auction.demos:mixtures"),
    demo_opponents=("AggressiveBid", "TruthfulBid", "ConservativeBid"),
    training=ref("sepo.games.auction.training:AuctionTrainingEnvironment"),
    llm_training=ref("sepo.games.auction.llm_env:AuctionLLMEnvironment"),
    demo=DemoSpec(
        agents=(
            DemoAgent(
                "bot:TruthfulBid",
                "bidding its value: the paper's exploiters find less than the exact best response",
            ),
            DemoAgent("bot:AdaptiveBid", "one step above the highest other bid of the last round"),
            DemoAgent("uniform", "random bids"),
        ),
        training=DemoTraining(
            lambda_e=5.0,
            settings={
                "game_params": {"rounds": 4, "memory": 1},
                "steps": 100,
                "groups": 16,
                "group_size": 8,
                "learning_rate": 0.2,
            },
        ),
    ),
    round_name="round",
    payoff_name="points",
    simultaneous=True,
    chance=True,
    third_parties=("seller",),
)
