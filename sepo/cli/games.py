"""`sepo games [NAME]`: the registered games, and one game's own parameters with their types and defaults."""
from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from sepo.cli.common import console, print_json, user_errors
from sepo.errors import SepoError
from sepo.games import domain_names, family_names, get_domain

_KINDS = {int: "int", float: "float", str: "str", bool: "bool"}
_WORDS = ("full", "none", "off")
"""Words a parameter's converter may take besides a number (a memory of the whole history, no cap)."""


def param_kind(param) -> str:
    """A game parameter's type as help shows it: its converter's type (`int`), or, for a converter
    that also takes a word, both (`int|full`); a Param may name its own (`metavar`)."""
    declared = getattr(param, "metavar", None) or getattr(param.type, "metavar", None)
    if declared:
        return declared
    if param.type in _KINDS:
        return _KINDS[param.type]
    try:
        number = param.type("1")
    except (TypeError, ValueError):
        return "str"
    kind = _KINDS.get(type(number), "str")
    for word in _WORDS:
        try:
            param.type(word)
        except (TypeError, ValueError):
            continue
        return f"{kind}|{word}" if kind != "str" else kind
    return kind


def param_default(param) -> str | None:
    """A parameter's default as help shows it, or None where the game computes it (an empty or unset
    default: the help text says what it means)."""
    if param.default is None or param.default == "":
        return None
    return str(param.default)


def param_help(domain_name: str, param) -> str:
    """The parameter's help without the `GAME: ` (or `FAMILY: `) prefix the domains write for the
    listing of every game's options."""
    text = param.help
    for prefix in (domain_name, domain_name.partition(":")[0]):
        if text.lower().startswith(f"{prefix.lower()}: "):
            text = text[len(prefix) + 2:]
            break
    return text[:1].upper() + text[1:]


def capabilities(domain) -> list[str]:
    """What sepo can do with the game, in the words of its commands."""
    found = []
    if domain.solver is not None:
        found.append("exact audit (sepo exploit)")
    elif domain.lower_bound is not None:
        found.append("best-response lower bound (sepo exploit)")
    if domain.training is not None:
        found.append("tabular training")
    if domain.llm_training is not None:
        found.append("language-model training")
    if domain.demos is not None:
        found.append("SFT demonstrations (sepo data sft)")
    if domain.frontier is not None:
        found.append("exact frontier (sepo frontier)")
    if domain.talk:
        found.append("cheap talk (--talk)")
    return found


def game_record(name: str) -> dict:
    """One game as `sepo games NAME --json` prints it."""
    domain = get_domain(name)
    return {"game": domain.name, "description": domain.description, "capabilities": capabilities(domain),
            "parameters": [{"option": p.flag, "type": param_kind(p), "default": param_default(p),
                            "help": param_help(domain.name, p)} for p in domain.params]}


@user_errors
def games_command(
    name: Optional[str] = typer.Argument(None, help="A game (or FAMILY:GAME) whose parameters to list; "
                                         "without it, every registered game."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """List the games, or one game's own parameters (option, type, default, meaning)."""
    if name is not None:
        _one_game(name, as_json)
        return
    games = [game_record(game) for game in domain_names()]
    families = [{"family": family, "spelling": f"{family}:GAME[(params)]"} for family in family_names()]
    if as_json:
        print_json({"games": games, "families": families})
        return
    table = Table(title="games")
    for column in ("game", "parameters", "description"):
        table.add_column(column)
    for game in games:
        table.add_row(Text(game["game"]), Text(" ".join(p["option"] for p in game["parameters"]) or "-"),
                      Text(game["description"]))
    for family in families:
        table.add_row(Text(family["spelling"]), Text(f"sepo games {family['family']}:NAME"),
                      Text("a family: any of its games by its own name, its parameters in brackets"))
    console.print(table)
    console.print("`sepo games NAME` lists a game's parameters with their types and defaults; "
                  "`sepo eval --game NAME --help` (and train, exploit, data sft) shows them with the "
                  "command's options.", highlight=False)


def _one_game(name: str, as_json: bool) -> None:
    if name in family_names():
        raise SepoError(f"{name} is a family of games: name one as {name}:GAME (its own name, parameters in "
                        f"brackets), e.g. `sepo games {name}:NAME`")
    try:
        record = game_record(name)
    except SepoError:
        raise
    except Exception as error:  # a family member whose library is missing or refuses the name
        raise SepoError(f"game {name!r} could not be loaded: {error}") from None
    if as_json:
        print_json(record)
        return
    console.print(f"{record['game']}: {record['description']}", highlight=False, markup=False)
    if record["capabilities"]:
        console.print("supports: " + ", ".join(record["capabilities"]), highlight=False, markup=False)
    if not record["parameters"]:
        console.print("no parameters", highlight=False)
        return
    table = Table(title=f"parameters of {record['game']}")
    for column in ("option", "type", "default", "meaning"):
        table.add_column(column)
    for param in record["parameters"]:
        table.add_row(*map(Text, (param["option"], param["type"], param["default"] or "-", param["help"])))
    console.print(table)
