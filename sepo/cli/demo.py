"""`sepo demo`: the product in about 20 seconds."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sepo.cli.common import console, user_errors
from sepo.cli.game_options import GAME_HELP
from sepo.cli.options import OVERWRITE_HELP


@user_errors
def demo_command(
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        help="Folder for the demo's runs, plots and summary (new, or this same "
        "demo's); default runs/demo, or runs/demo-GAME with --game.",
    ),
    steps: Optional[int] = typer.Option(
        None,
        "--steps",
        min=2,
        help="Training steps of every training run (default: each domain's own, a few seconds a run).",
    ),
    game: Optional[str] = typer.Option(
        None,
        "--game",
        help="One domain's own demo (all its reference agents, both protocols, "
        f"its frontier where it has one) instead of the tour of all. {GAME_HELP}",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
):
    """The product in about 20 seconds: an audit table of all domains, SEPO vs payoff-only GRPO, the plots."""
    from sepo.demo import default_out, run_demo

    run_demo(
        out if out is not None else default_out(game), console, game=game, steps=steps, overwrite=overwrite
    )
