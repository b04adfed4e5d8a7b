"""`sepo plot`: training curves of several runs in one figure."""
from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from sepo.cli.common import console, user_errors


@user_errors
def plot_command(
    runs: List[Path] = typer.Argument(..., help="Run folders of `sepo train`."),
    out: Path = typer.Option(..., "--out", help="PNG file to write (a new file, or this same plot's)."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace a PNG another sepo command wrote at --out."
    ),
):
    """Training curves (exact exploitability and utility per step) of several runs in one figure."""
    from sepo.reports.plots import plot_runs
    from sepo.runs import output_file

    with output_file(out, "plot", {"runs": [str(Path(r).resolve()) for r in runs]}, overwrite=overwrite) as (
        tmp,
        stamp,
    ):
        plot_runs(runs, tmp, stamp=stamp)
    console.print(f"wrote {out}")
