"""Any OpenSpiel game as a sepo domain: `--game openspiel:GAME[(params)]`, e.g.
`openspiel:leduc_poker` or `openspiel:goofspiel(num_cards=4)` (docs/openspiel.md).

The registry's family `openspiel` makes one `Domain` per game name (`domain_for`). Modules: rules
(the game through pyspiel), text (prompt and strict parser), tree (the game enumerated once, and
the batched sequence-form passes), exact (the solver), bound (the lower bound of more than two
players), bots (uniform, CFR and CFR+ average
policies), pools, events, demos (SFT demonstrators), training and llm_env (the trainers' environments)."""
from __future__ import annotations

from functools import partial

from sepo.games.registry import Domain, Param, ref


def domain_for(spec: str) -> Domain:
    """The domain `openspiel:SPEC` (SepoError in one line for a game OpenSpiel does not have)."""
    from sepo.games.openspiel.rules import canonical, load

    spec = canonical(spec)
    game = load(spec)
    kind = game.get_type()
    import pyspiel

    zero_sum = kind.utility == pyspiel.GameType.Utility.ZERO_SUM
    return Domain(
        name=f"openspiel:{spec}",
        description=f"OpenSpiel's {kind.long_name} ({game.num_players()} players"
        f"{', zero-sum' if zero_sum else ''}); exact solver for two players, a lower bound for more",
        make_game=partial(ref("sepo.games.openspiel.rules:make_game"), spec),
        params=(Param("rounds", int, 2, "openspiel: plays of the game per episode (players rotate seats)."),),
        bots=partial(ref("sepo.games.openspiel.bots:bot_table"), spec),
        pools=ref("sepo.games.openspiel.pools:pools"),
        events=ref("sepo.games.openspiel.events:events"),
        demos=partial(ref("sepo.games.openspiel.demos:mixtures"), spec) if game.num_players() == 2 else None,
        demo_opponents=("Uniform", "CFR") if game.num_players() == 2 else (),
        solver=ref("sepo.games.openspiel.exact:solver") if game.num_players() == 2 else None,
        lower_bound=ref("sepo.games.openspiel.bound:lower_bound") if game.num_players() > 2 else None,
        training=ref("sepo.games.openspiel.training:OpenSpielTrainingEnvironment")
        if game.num_players() == 2
        else None,
        llm_training=ref("sepo.games.openspiel.llm_env:OpenSpielLLMEnvironment")
        if game.num_players() == 2
        else None,
        round_name="play",
        payoff_name="return",
        chance=kind.chance_mode != pyspiel.GameType.ChanceMode.DETERMINISTIC,
        zero_sum=zero_sum,
    )
