"""Which options a game takes, asked of its domain: the predicates the refusals use, read by the help
screen too, so that `sepo COMMAND --game G --help` leaves out what G would refuse.

No game is named here: cheap talk is the domain's `talk`, a collusion weight acts where
`collusion_acts` says (the refusals of `--lambda-c`), self-play and Advantage Alignment where the
domain's training environment offers them (`sepo.training.environment.offers`)."""
from __future__ import annotations

from sepo.errors import SepoError


def has_talk(game: str) -> bool:
    """Whether `game` has a cheap-talk channel (`--talk`, `--talk-injection`, `--pool injection`)."""
    from sepo.games import get_domain

    return bool(get_domain(game).talk)


def collusion_acts(the_game, name: str, protocol: str, train=None, collusive=None) -> bool:
    """Whether a collusion weight can act in `the_game` (domain `name`) under `protocol`: the checks
    of `sepo eval` and `sepo train` for a λc of 1, against the given pools (default: the domain's)."""
    from sepo.cli.options import collusion_applies
    from sepo.training.config import check_event_weights

    if train is None or collusive is None:
        from sepo.opponents.pools import default_pools

        pools = default_pools(name, protocol, the_game)
        train, collusive = pools.get("train", []), pools.get("collusive", [])
    try:
        collusion_applies(the_game, protocol, 1.0)
        check_event_weights(name, the_game, protocol, train, collusive, lambda_c=1.0)
    except SepoError:
        return False
    return True


def refused_options(game: str, args: list[str]) -> tuple[set[str], dict[str, set[str]]]:
    """(option names, {option name: choices}) that `game` refuses on this command line (its game
    parameters, --protocol and --policy as given); an option whose fate cannot be told before the
    command runs (a parameter that does not parse, an environment built by a function) is kept."""
    from sepo.cli.game_options import game_params_for
    from sepo.cli.layout import given_value
    from sepo.games import get_domain
    from sepo.training.environment import offers

    domain = get_domain(game)
    hidden, choices = set(), {}
    if not has_talk(game):
        hidden |= {"talk", "talk_injection", "pool"}
    hf = (given_value(args, "--policy") or "").startswith("hf:")
    environment = domain.llm_training if hf else domain.training
    if offers(domain.training, "self_play") is False or hf:
        hidden.add("self_play")
    if offers(environment, "joint_advantages") is False:
        choices["method"] = {"advantage-alignment"}
    protocol = given_value(args, "--protocol") or "rigorous"
    raw = {p.name: given_value(args, p.flag) for p in domain.params}
    try:
        params = game_params_for(game, {k: v for k, v in raw.items() if v is not None})
        the_game = domain.game(protocol, **params)
    except SepoError:
        return hidden, choices
    if not collusion_acts(the_game, domain.name, protocol):
        hidden.add("lambda_c")
    return hidden, choices
