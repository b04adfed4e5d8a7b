"""Game options from the registry: the CLI names no game.

`with_game_params` gives a command one `--PARAM` option per parameter of any registered domain
(`Domain.params`); the command receives the ones given as `game_params`, and `game_params_for`
converts them with the chosen domain's types, refusing a parameter the domain does not take.
The options are hidden: a help screen shows the ones of the game named with `--game`
(`sepo.cli.layout`), and `sepo games NAME` lists them.
"""
from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Optional

import typer

from sepo.errors import SepoError, brief
from sepo.games import default_game, domain_names, family_names, get_domain

DEFAULT_GAME = default_game()
GAME_PARAM_PREFIX = "game_param_"
"""The prefix of a game option's parameter name in a command's signature."""
_GAME_CHOICES = [*domain_names(), *(f"{family}:GAME[(params)]" for family in family_names())]
GAME_HELP = f"Game to play: {', '.join(_GAME_CHOICES)}."


def _registered_params() -> dict:
    """{param name: [(domain, Param), ...]} over every registered domain (a family's members take
    `--rounds`, which the repeated games also declare)."""
    found: dict = {}
    for name in domain_names():
        for param in get_domain(name).params:
            found.setdefault(param.name, []).append((name, param))
    return found


def _help(owners: list) -> str:
    """One option's help: each domain's own wording and default (they differ, e.g. `--rounds`)."""
    wordings: dict = {}
    for domain, param in owners:
        text = param.help
        if text.lower().startswith(f"{domain}: "):
            text = text[len(domain) + 2:]
        default = "" if param.default in (None, "") else f"; default {param.default}"
        wordings.setdefault(text[:1].upper() + text[1:].rstrip(".") + default, []).append(domain)
    return " | ".join(f"{', '.join(domains)}: {text}" for text, domains in wordings.items())


def with_game_params(command):
    """Add the registered domains' `--PARAM` options to `command`, passed on as `game_params`."""
    signature = inspect.signature(command)
    kept = [p for name, p in signature.parameters.items() if name != "game_params"]
    extra = []
    for name, owners in _registered_params().items():
        extra.append(inspect.Parameter(
            f"{GAME_PARAM_PREFIX}{name}", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
            default=typer.Option(None, owners[0][1].flag, help=_help(owners), hidden=True)))

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        given = {
            key[len(GAME_PARAM_PREFIX) :]: kwargs.pop(key)
            for key in list(kwargs)
            if key.startswith(GAME_PARAM_PREFIX)
        }
        if isinstance(kwargs.get("game"), str):
            kwargs["game"] = canonical_game(kwargs["game"])
        return command(*args, game_params={k: v for k, v in given.items() if v is not None}, **kwargs)

    wrapper.__signature__ = signature.replace(parameters=kept + extra)
    return wrapper


def canonical_game(name: str) -> str:
    """A family member's one name (`FAMILY:GAME` for `FAMILY:GAME()` and `FAMILY:GAME(players=2)`
    where 2 is the default), so that runs record, and later compare, one spelling."""
    prefix, colon, _ = name.partition(":")
    return get_domain(name).name if colon and prefix in family_names() else name


def game_params_for(game: str, raw: dict) -> dict:
    """The given `--PARAM` strings converted by domain `game`'s parameter types."""
    domain = get_domain(game)
    params = {p.name: p for p in domain.params}
    out = {}
    for name, text in raw.items():
        if name not in params:
            allowed = ", ".join(p.flag for p in domain.params) or "none"
            raise SepoError(
                f"--{name.replace('_', '-')} does not apply to game {game!r}; its parameters: {allowed}"
            )
        flag = params[name].flag
        if not text.strip():
            raise SepoError(f"{flag} is empty; leave it out for the default ({params[name].default!r})")
        # int() reads other scripts' digits ('５' is 5): a typo should not pass as a number
        if not text.isascii():
            raise SepoError(f"{flag} {brief(text)}: use ASCII characters")
        try:
            value = params[name].type(text)
        except (TypeError, ValueError) as error:
            expected = {int: "an integer", float: "a number"}.get(params[name].type)
            raise SepoError(
                f"{flag} {text!r}: " + (f"expected {expected}" if expected else str(error))
            ) from None
        # a default said out loud is the same game (and the same run to resume)
        if value != params[name].default:
            out[name] = value
    return out


def agent_help() -> str:
    """The agent-spec help, with the kinds each registered domain adds."""
    own = [f"{kind}[:ARG] ({name})" for name in domain_names() for kind in get_domain(name).agents]
    return " | ".join(
        ["uniform", "bot:NAME", "tabular:FILE.json", "run:DIR", "hf:PATH", "openai:MODEL@URL", *own]
    )


def audit_game_params(
    game: str, raw: dict, agent: str, protocol: str = "rigorous", projection: bool = False
) -> dict:
    """The game parameters of an audit of `agent`: the given `--PARAM`s, with a `run:DIR` agent's
    own (its config's `game_params`: rounds, memory, ...) as the defaults, so a run is audited in
    the game it was trained in; a given option that contradicts the run is refused in one line,
    except, with `projection` (`sepo exploit`), a `--memory M` below the run's memory (or with a
    run of the whole history): the memory-M projection, labelled so by the audit as it is for a
    bot. A `tabular:FILE` table whose keys are exactly the states of a memory-M game declares memory M."""
    given = game_params_for(game, raw)
    kind, _, arg = agent.partition(":")
    if kind == "tabular" and "memory" not in given:
        memory = _table_memory(Path(arg), game, given, protocol)
        return given if memory is None else {**given, "memory": memory}
    trained = _run_game_params(Path(arg), game) if kind == "run" else None
    if trained is None:
        return given
    domain = get_domain(game)
    out = dict(given)
    for param in domain.params:
        if param.name not in trained and param.name not in given:
            continue
        was = trained.get(param.name, param.default)
        now = given.get(param.name, param.default)
        if projection and param.name == "memory" and param.name in raw and _smaller_memory(now, was):
            continue  # the given memory stays: a projection of the run (exact_label "projection")
        if param.name in raw and now != was:
            raise SepoError(f"{agent} was trained with {param.flag} {was}; got {param.flag} {now}")
        if param.name in trained:
            out[param.name] = was
    return out


def _smaller_memory(given, trained) -> bool:
    """Whether `given` keeps fewer past rounds than `trained` (None: the whole history)."""
    def rounds(memory):
        return None if memory is None or (isinstance(memory, int) and memory < 0) else memory

    given, trained = rounds(given), rounds(trained)
    return isinstance(given, int) and (trained is None or (isinstance(trained, int) and given < trained))


def _run_game_params(run_dir: Path, game: str) -> dict | None:
    """A run's recorded game parameters, or None when it records none (or is a run of another game,
    refused with its own message when the agent is loaded)."""
    import json

    try:
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("game", game) != game:
        return None
    params = config.get("game_params")
    return params if isinstance(params, dict) else None


def _table_memory(path: Path, game: str, given: dict, protocol: str) -> int | None:
    """The memory M whose game's information states are exactly the table's keys (searched from 0
    while the states are no more than the keys), or None: not a memory game, not the whole history's
    keys either, or an unreadable file (refused with its own message when the agent is loaded)."""
    from sepo.games import load_game
    from sepo.metrics.exact import keys_of, solver_for
    from sepo.policies.tabular import read_policy_file

    if "memory" not in {p.name for p in get_domain(game).params}:
        return None
    try:
        keys = set(read_policy_file(path)[0])
        base = load_game(game, protocol, **given)
    except (SepoError, ValueError, TypeError, RecursionError):
        return None
    if not hasattr(base, "with_memory") or getattr(base, "memory", None) is not None:
        return None
    # memory rounds-1 is the whole history: no declaration
    for memory in range(getattr(base, "rounds", 0) - 1):
        try:
            solver = solver_for(base.with_memory(memory))
        except SepoError:
            return None
        if solver is None:
            return None
        states = set(keys_of(solver.decisions()))
        if states == keys:
            return memory
        if len(states) > len(keys):
            return None
    return None
