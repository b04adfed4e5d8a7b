"""Kuhn poker as a sepo domain: three cards, ante 1, one bet of 1, hands alternating seats.

Modules: rules (the game), text (prompts and parser), bots (scripted opponents), pools (the
paper's pools), events (collusion, externality, behaviour table), exact (batched closed forms and
the exact solver), demos (SFT demonstrators), rollouts and llm_env (vectorised hands for the
trainers), training (the tabular training environment), restricted_nash (the exact frontier).
`DOMAIN.demo` is what `sepo demo` shows of it."""
from __future__ import annotations

from sepo.games.registry import DemoAgent, DemoSpec, DemoTraining, Domain, Param, ref

DOMAIN = Domain(
    name="kuhn",
    description="Kuhn poker: J/Q/K, ante 1, one bet of 1; zero-sum; exact solver",
    make_game=ref("sepo.games.kuhn.rules:make_game"),
    params=(Param("hands", int, 6, "Kuhn: hands per episode (seats alternate; the paper plays 6)."),),
    bots=ref("sepo.games.kuhn.bots:bot_table"),
    pools=ref("sepo.games.kuhn.pools:pools"),
    events=ref("sepo.games.kuhn.events:events"),
    frequencies=ref("sepo.games.kuhn.events:frequencies"),
    solver=ref("sepo.games.kuhn.exact:KuhnSolver"),
    demos=ref("sepo.games.kuhn.demos:mixtures"),
    demo_opponents=("NashApprox", "TightPassive", "LooseAggressive", "AlwaysPass", "AlwaysBet"),
    agents={"nash": ref("sepo.games.kuhn.exact:nash_agent")},
    training=ref("sepo.games.kuhn.training:KuhnTrainingEnvironment"),
    llm_training=ref("sepo.games.kuhn.llm_env:KuhnLLMEnvironment"),
    frontier=ref("sepo.games.kuhn.restricted_nash:frontier_report"),
    demo=DemoSpec(
        agents=(
            DemoAgent(
                "bot:MaxExploiter",
                "the paper's exploit score misses its weakness; the exact best response finds it",
            ),
            DemoAgent("nash", "an equilibrium: exploitability 0"),
            DemoAgent("uniform", "uniform play"),
        ),
        episodes=200,
        training=DemoTraining(lambda_e=5.0, settings={"steps": 1500}, frontier_lambdas=(0.25, 1.0, 4.0)),
        featured=True,
    ),
    round_name="hand",
    payoff_name="chips",
    chance=True,
    zero_sum=True,
    paper_pooled_exploit=True,
)
