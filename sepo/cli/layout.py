"""How `sepo`'s help screens read: commands in workflow order, options in panels, flags shown as
flags, and a game's own parameters shown only for the game named on the command line.

Every game's parameters are options of the commands that take a game (`with_game_params`), so any
of them parses; they are hidden, and `SepoCommand` shows the ones of the game given with `--game`
(typed, with their defaults) when it builds the help screen. Options that belong to one choice of
another option (`SHOWN_WITH`) are shown the same way.
"""
from __future__ import annotations

import copy

from rich.markup import escape
from typer.core import TyperCommand

from sepo.cli.common import SepoGroup
from sepo.cli.game_options import DEFAULT_GAME, GAME_PARAM_PREFIX

COMMAND_ORDER = ("demo", "games", "eval", "exploit", "frontier", "train", "plot", "model", "data", "sft",
                 "serve", "experiment", "report", "analyze")
"""The top-level commands as a newcomer meets them: try, look, audit, train, models, studies, analysis."""

GAME, AGENT, AUDIT, SAFETY, METHOD, TRAINING, MODEL, DECODING, OUTPUT = (
    "Game", "Agent", "Audit", "Safety weights", "Method", "Training", "Language model (--policy hf:MODEL)",
    "Decoding", "Output")
_COMMON_PANELS = {"game": GAME, "protocol": GAME, "talk": GAME, "agent": AGENT, "lambda_e": SAFETY,
                  "lambda_c": SAFETY, "lambda_x": SAFETY, "as_json": OUTPUT, "quiet": OUTPUT, "out": OUTPUT,
                  "overwrite": OUTPUT}
PANELS = {
    "eval": {**_COMMON_PANELS, "episodes": AUDIT, "seed": AUDIT, "pools": AUDIT, "pool": AUDIT,
             "threshold": AUDIT, "disguise": AUDIT},
    "exploit": {**_COMMON_PANELS, "seed": AUDIT, "threshold": AUDIT},
    "train": {**_COMMON_PANELS, "talk_injection": GAME, "policy": AGENT, "method": METHOD, "penalty": METHOD,
              "aa_beta": METHOD, "aa_gamma": METHOD, "self_play": METHOD, "steps": TRAINING, "seed": TRAINING,
              "groups": TRAINING, "group_size": TRAINING, "learning_rate": TRAINING,
              "scale_rewards": TRAINING,
              "lora": MODEL, "beta": MODEL, "gpu": MODEL, "report_to": MODEL, "final_samples": MODEL,
              "answer_rest": MODEL, "vllm": MODEL, "vllm_server": MODEL},
    "data sft": {**_COMMON_PANELS, "mixture": GAME, "episodes": GAME, "seed": GAME, "answer_only": GAME},
}
"""Each option's help panel, by command path (the decoding options go to Decoding, a game's own
parameters to a panel of their own)."""

PANEL_ORDER = (GAME, "parameters", AGENT, METHOD, TRAINING, AUDIT, SAFETY, MODEL, DECODING, "Options", OUTPUT)
"""Panels from what the command is about to how it reports (a game's own parameters follow Game)."""

SHOWN_WITH = {"aa_beta": ("--method", "advantage-alignment"), "aa_gamma": ("--method", "advantage-alignment"),
              "vllm_server": ("--vllm", "server")}
"""Options hidden unless the command line gives another option this value (their help says so)."""


def given_value(args: list[str], flag: str) -> str | None:
    """The last value of `flag` on a command line (`--flag VALUE` or `--flag=VALUE`), or None."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == flag and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(flag + "="):
            found = arg[len(flag) + 1:]
    return found


def game_help_note(game: str | None) -> str:
    """What the --game option adds to its help when no game is named: where a game's parameters are."""
    return (f" Each game has its own parameters: `sepo games NAME` lists them, and this help shows them with "
            f"--game NAME (the default game's: --game {DEFAULT_GAME}).") if game is None else ""


class SepoCommand(TyperCommand):
    """A command whose help is built for its command line: the named game's parameters (typed, with
    defaults) in the Game panel, options in panels, flags without a value type."""

    def parse_args(self, ctx, args):
        ctx.meta["sepo.args"] = list(args)
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter) -> None:
        ctx.meta["sepo.help"] = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            ctx.meta["sepo.help"] = False

    def get_params(self, ctx):
        params = super().get_params(ctx)
        if not ctx.meta.get("sepo.help"):
            return params
        return self.shown_params(ctx, params)

    def shown_params(self, ctx, params) -> list:
        """The options as the help screen shows them (copies: the parsed command is unchanged)."""
        args = ctx.meta.get("sepo.args", [])
        game = given_value(args, "--game")
        own, problem = _game_params(game)
        refused, refused_choices = _refused(game, args) if problem is None else (set(), {})
        panels = PANELS.get(" ".join(ctx.command_path.split()[1:]), {})
        shown, left_out = [], []
        for param in params:
            name = param.name or ""
            if name.startswith(GAME_PARAM_PREFIX):
                spec = own.get(name[len(GAME_PARAM_PREFIX):])
                if spec is not None:
                    shown.append(_game_param_shown(param, *spec))
                continue
            param = copy.copy(param)
            if name in SHOWN_WITH:
                flag, value = SHOWN_WITH[name]
                param.hidden = given_value(args, flag) != value
            if name in refused and not param.hidden:
                param.hidden = True
                left_out.append(param.opts[0])
            choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
            if refused_choices.get(name) and choices:
                dropped = [c for c in choices if _choice_value(c) in refused_choices[name]]
                param.metavar = f"<{'|'.join(_choice_value(c) for c in choices if c not in dropped)}>"
                left_out += [f"{param.opts[0]} {_choice_value(c)}" for c in dropped]
            shown.append(param)
        for param in shown:
            if param.name == "game" and param.help:
                param.help += escape(game_help_note(game) if problem is None
                                     else f" --game {game} has no parameters to show: {problem}")
                if left_out:
                    param.help += escape(f" Not shown, as {game} refuses them: {', '.join(left_out)}.")
        shown, params = [], shown
        for param in params:
            name = param.name or ""
            if getattr(param, "is_flag", False):
                param.metavar = ""
            panel = panels.get(name)
            if name == "help" or name.startswith("decoding_"):
                panel = OUTPUT if name == "help" else DECODING
            if panels and panel and hasattr(param, "rich_help_panel"):
                param.rich_help_panel = panel
            shown.append(param)
        if panels:
            shown.sort(key=_panel_rank)
        return shown


def _refused(game: str | None, args: list[str]) -> tuple[set[str], dict[str, set[str]]]:
    """What the game named refuses on this command line (`sepo.cli.applies`); nothing when no game
    is named, or when the question cannot be answered (the help still shows, whole)."""
    if game is None:
        return set(), {}
    from sepo.cli.applies import refused_options

    try:
        return refused_options(game, args)
    except Exception:  # a help screen never fails on it
        return set(), {}


def _choice_value(choice) -> str:
    return getattr(choice, "value", choice)


def _panel_rank(param) -> int:
    panel = getattr(param, "rich_help_panel", None) or "Options"
    if panel.endswith("parameters"):
        panel = "parameters"
    return PANEL_ORDER.index(panel) if panel in PANEL_ORDER else PANEL_ORDER.index("Options")


def _game_params(game: str | None) -> tuple[dict, str | None]:
    """{parameter name: (game name, Param)} of the game named ({} when none is named), and why the
    named game does not load (an unknown name, a family whose library is missing), which the help
    screen says instead of showing the generic screen as if no game were named."""
    if game is None:
        return {}, None
    try:
        from sepo.games import get_domain

        domain = get_domain(game)
    except Exception as error:  # help still shows, with the reason in the --game row
        from sepo.errors import brief

        return {}, brief(str(error), 300)
    return {param.name: (domain.name, param) for param in domain.params}, None


def _game_param_shown(option, game: str, param):
    """A hidden game option as the help of `game` shows it: the game's own help, type and default."""
    from sepo.cli.games import param_default, param_help, param_kind

    shown = copy.copy(option)
    shown.hidden = False
    default = param_default(param)
    shown.help = escape(param_help(game, param) + (f" [default: {default}]" if default is not None else ""))
    shown.metavar = f"<{param_kind(param)}>"
    shown.rich_help_panel = f"{GAME}: {game}'s parameters"
    return shown


def flags_as_flags(command) -> None:
    """A flag's help row shows no value type (typer shows `<bool>` as if it took one), --help's too."""
    from typer._click import Context

    help_option = command.get_help_option(Context(command, info_name=command.name))
    for param in [*getattr(command, "params", ()), *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and getattr(param, "metavar", None) is None:
            param.metavar = ""
    for child in getattr(command, "commands", {}).values():
        flags_as_flags(child)


class SepoApp(SepoGroup):
    """The `sepo` group: its commands listed in workflow order (`COMMAND_ORDER`), flags as flags."""

    def list_commands(self, ctx) -> list[str]:
        names = list(super().list_commands(ctx))
        rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(names, key=lambda name: rank.get(name, len(rank)))

    def main(self, *args, **kwargs):
        flags_as_flags(self)
        return super().main(*args, **kwargs)
