"""The `sepo` command line: the app, its global options, and its commands, one module per family:
the demo, the games, audit (`eval`, `exploit`, `frontier`), train (`train`, `data sft`, `sft`),
models, plots, `experiment` and `report`, `analyze` and `serve`. How the help screens read (workflow
order, panels, a game's own parameters) is `sepo.cli.layout`."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Optional

import typer

from sepo.cli.analyze import app as analyze_app
from sepo.cli.audit import eval_command, exploit_command, frontier_command
from sepo.cli.common import console
from sepo.cli.demo import demo_command
from sepo.cli.experiment import app as experiment_app
from sepo.cli.experiment import report_command
from sepo.cli.games import games_command
from sepo.cli.layout import SepoApp, SepoCommand
from sepo.cli.models import model_app
from sepo.cli.plots import plot_command
from sepo.cli.serve import serve_command
from sepo.cli.train import data_app, sft_command, train_command
from sepo.errors import SepoError

app = typer.Typer(
    name="sepo",
    help="Train and audit language-model agents in strategic games with Safe Equilibrium Policy "
    "Optimization.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=SepoApp,
)


def _print_version(value: bool) -> None:
    if value:
        from sepo import __version__

        console.print(f"sepo {__version__}")
        raise typer.Exit()


_shown_warnings: set[str] = set()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """sepo's own warnings (a paper quirk reproduced, a dropped cache entry) as one line for a user,
    each text once per command (a game built in several places warns once); other libraries'
    warnings keep Python's format, which says where they come from."""
    if category.__module__.startswith("sepo") or filename.startswith(str(Path(__file__).parents[1])):
        text = f"warning: {message}"
        if text not in _shown_warnings:
            _shown_warnings.add(text)
            print(text, file=sys.stderr)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


@app.callback()
def main_options(
    ctx: typer.Context,
    threads: Optional[int] = typer.Option(
        None, "--threads", min=1, help="CPU threads for torch (model play and training); at most the CPU "
        "cores this process may use. Default: chosen when a model loads, from the cores other work leaves "
        "free (one on a busy machine), and said in one line."),
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print sepo's version and exit."),
):
    """Train and audit language-model agents in strategic games with Safe Equilibrium Policy Optimization."""
    from sepo import threads as torch_threads

    warnings.showwarning = _show_warning
    _shown_warnings.clear()  # once per command, also when commands run in one process
    if threads is not None:
        from sepo.cli.common import print_error
        from sepo.limits import check_parallelism

        try:
            check_parallelism(threads, "--threads", "torch threads")
        except SepoError as error:
            print_error(str(error))
            raise typer.Exit(2) from None
    torch_threads.configure(threads)
    ctx.call_on_close(torch_threads.reset)


app.command("demo")(demo_command)
app.command("games")(games_command)
app.command("eval", cls=SepoCommand)(eval_command)
app.command("exploit", cls=SepoCommand)(exploit_command)
app.command("frontier")(frontier_command)
app.command("train", cls=SepoCommand)(train_command)
app.command("plot")(plot_command)
app.add_typer(model_app, name="model")
app.add_typer(data_app, name="data")
app.command("sft")(sft_command)
app.command("serve")(serve_command)
app.add_typer(experiment_app, name="experiment")
app.command("report")(report_command)
app.add_typer(analyze_app, name="analyze")


if __name__ == "__main__":
    app()
