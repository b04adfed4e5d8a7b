"""`sepo experiment run|plan` and `sepo report`: a whole study from one config, and its report."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from sepo.cli.common import choice_enum, console, print_json, user_errors, value_of

Backend = choice_enum("Backend", ("local", "ray"))
app = typer.Typer(help="Experiments: a matrix of domains × agents × stages × λ × seeds, trained and audited.",
                  no_args_is_help=True)


@app.command("run")
@user_errors
def run_command(
    config: Path = typer.Argument(..., help="Experiment config (YAML; see docs/experiments.md)."),
    out: Path = typer.Option(
        ..., "--out", help="Results folder: created fresh, or resumed if it holds this same config."
    ),
    backend: Backend = typer.Option(
        "local", "--backend", help="local (a process pool) or ray (cells as Ray tasks)."
    ),
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        help="Cells run at once (local processes, or the CPUs of a local "
        "Ray instance); at most the CPU cores this process may use, since each cell is a CPU-bound "
        "process and more only add memory and contention (a Ray cluster, --address "
        "or RAY_ADDRESS, counts its own).",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace an experiment in --out (removes only what it wrote)."
    ),
    address: Optional[str] = typer.Option(
        None,
        "--address",
        help="With --backend ray: the Ray cluster to run on, its head node's host:port "
        "(what `ray start --head` prints), or auto; default $RAY_ADDRESS, else a local Ray instance. --out "
        "must then be on a filesystem every node mounts at the same path. A cell lost with its node is run "
        "again (3 times at most).",
    ),
    only: Optional[list[str]] = typer.Option(
        None, "--only", metavar="DOMAINS",
        help="Run only these domains' cells this time (comma-separated, or repeated); the rest stay "
        "pending, and the same command without --only runs them.",
    ),
    amend: bool = typer.Option(
        False, "--amend",
        help="Go on in an --out started under another version of this config: finished cells whose "
        "definition (their domain's and agent's entries, the experiment-wide settings) is unchanged keep "
        "their results, unfinished cells start over, and a change that reaches a finished cell is refused; "
        "recorded in amendments.json.",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress display."),
):
    """Run every cell (train, select on validation episodes, audit on test episodes); resumes after a kill."""
    from rich.markup import escape

    from sepo.cli.common import err_console, progress
    from sepo.experiments.runner import run_experiment

    with progress(quiet) as bar:
        task = bar.add_task("cells", total=None)
        summary = run_experiment(config, out, backend=value_of(backend), workers=workers, overwrite=overwrite,
                                 address=address, only=only, amend=amend,
                                 on_notice=lambda line: err_console.print(f"note: {escape(line)}",
                                                                          highlight=False, soft_wrap=True),
                                 on_progress=lambda p: bar.update(task, completed=p.done, total=p.total,
                                                                  description=f"cells ({p.running} running)"))
    if summary.get("repaired"):
        console.print(f"{summary['repaired']}: rebuilt it from the cells' results")
    again = f" ({summary['already_finished']} were already finished)" if summary["already_finished"] else ""
    if summary.get("retried"):
        console.print(f"{len(summary['retried'])} cell(s) were lost with their node or worker and run again: "
                      + ", ".join(f"{cell} ({n}x)" for cell, n in summary["retried"].items()))
    console.print(
        f"{summary['finished']} of {summary['cells']} cells finished{again} in {summary['seconds']:.0f} s; "
        f"results in {summary['results']} (config hash {summary['config_hash']}); "
        f"{len(summary['skipped'])} matrix entries not applicable (listed in plan.json)"
    )
    if summary.get("not_selected"):
        console.print(f"{summary['not_selected']} cells of other domains are left for a run without --only")


@app.command("plan")
@user_errors
def plan_command(
    config: Path = typer.Argument(..., help="Experiment config (YAML)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """List the cells a config expands to (and the entries that do not apply), without running anything."""
    from sepo.experiments.cells import expand
    from sepo.experiments.config import load_config
    from sepo.experiments.seeds import check_disjoint

    the_config, _ = load_config(config)
    check_disjoint(the_config)
    plan = expand(the_config)
    if as_json:
        print_json(
            {
                "config_hash": the_config.hash(),
                "cells": [c.record() for c in plan.cells],
                "skipped": plan.skipped,
            }
        )
        return
    for cell in plan.cells:
        console.print(cell.id)
    for entry in plan.skipped:
        console.print(
            f"not applicable: {entry['domain']}/{entry['agent']}/{entry['stage']}: {entry['reason']}"
        )
    console.print(f"{len(plan.cells)} cells; config hash {the_config.hash()}")


@user_errors
def report_command(
    experiment: Path = typer.Argument(..., help="Folder of `sepo experiment run`."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Report folder (default: EXPERIMENT/report); new, or this same report's."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace a report in --out (removes only what it wrote)."
    ),
):
    """report.md and a self-contained report.html: tables, Figure 1, ablations, curves, frontier."""
    from rich.markup import escape

    from sepo.cli.common import err_console
    from sepo.reports.experiment import (
        DERIVED,
        Results,
        check_experiment,
        experiment_state,
        report_config,
        write_report,
    )
    from sepo.runs import open_run

    folder = check_experiment(experiment)
    target = out if out is not None else folder / "report"
    state = experiment_state(folder)
    results = Results(folder)  # read (a damaged file is one line) before a stale report is replaced
    # a report of this experiment built from other results (the experiment was rerun since) is stale: rebuilt
    with open_run(
        target, "report", report_config(folder, state), overwrite=overwrite, derived=DERIVED
    ) as run:
        if run.finished:  # read, never rewritten
            console.print(
                f"the report in {target} is already complete (the experiment has not changed since): "
                f"{target / 'report.md'}, {target / 'report.html'}"
            )
            return
        if run.stale:
            console.print(
                f"the report in {target} was built from other results of {folder} (the experiment changed "
                "since); rebuilding it"
            )
        written = write_report(folder, run, results)
        # cells of the plan without a result: said, and the report not final
        for line in written["incomplete"]:
            err_console.print(f"warning: {escape(line)}", highlight=False, soft_wrap=True)
        if state["experiment_complete"] and not written["incomplete"]:
            # a report of a finished experiment is final; one of a running experiment is redone
            run.complete()
        else:
            run.commit()
    console.print(f"wrote {written['markdown']} and {written['html']} ({written['images']} figures)"
                  + ("; the report is marked incomplete" if written["missing"] else ""))
