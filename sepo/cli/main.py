"""The `sepo` command line: one Typer app, one sub-command module per concept."""
from __future__ import annotations

import typer

from sepo.cli.analyze import app as analyze_app

app = typer.Typer(
    name="sepo",
    help="Train and audit language-model agents in strategic games with Safe Equilibrium Policy Optimization.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(analyze_app, name="analyze")
