"""`sepo demo`: the product end to end, in about a minute on a laptop CPU.

With no game, a tour of every domain that declares a demo (`Domain.demo`, a `DemoSpec`):
1. an audit table: each domain's reference agent audited under sepo's rigorous protocol (utility
   against the train pool; the exact value, or the strongest best-response bound, with its label)
   and under the paper's (its exploit score, set beside the exact best responder's gap in the same
   game where the two disagree);
2. tabular SEPO against payoff-only GRPO from the uniform table in the featured domains, plotted;
3. where everything went.
With a game, that domain's own demo: every reference agent under both protocols, the same
training comparison, and more SEPO runs placed on the domain's exact frontier where it has one.

The demo sits above the domains: they give data, this module runs it. Everything goes to one
`demo` run folder (`sepo.runs`) whose config holds the domains' specs; the training runs are
sub-folders that are part of it. A finished demo run again is read and shown, never retrained.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sepo.errors import SepoError
from sepo.evaluation.evaluate import EvalConfig, evaluate
from sepo.games import domain_names, get_domain
from sepo.games.registry import DemoSpec, DemoTraining, Domain
from sepo.opponents.pools import BEST_RESPONSE, default_pools
from sepo.policies.specs import load_agent
from sepo.reports.plots import plot_frontier, plot_runs
from sepo.runs import RunDir, open_run
from sepo.training.checkpoint import read_json
from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer

COMMAND = "demo"
SUMMARY = "demo_summary.json"
PROTOCOLS = ("rigorous", "paper")
PAYOFF_ONLY = "payoff_only"
COMPARISON_PLOT = "sepo_vs_payoff_only.png"
FRONTIER_PLOT = "frontier.png"


def default_out(game: str | None = None) -> Path:
    """Where the demo goes without --out: runs/demo for the tour, runs/demo-GAME for one domain."""
    return Path("runs/demo") if game is None else Path(f"runs/demo-{game}")


def demo_config(game: str | None = None, steps: int | None = None) -> dict:
    """The demo run's config: the game (None: the tour), the steps override, and the demo spec of
    every domain shown (a changed spec is another demo, refused in an existing folder)."""
    if steps is not None and steps < 2:
        raise SepoError(f"--steps must be >= 2, got {steps}")
    if game is not None:
        if get_domain(game).demo is None:
            raise SepoError(f"game {game!r} has no demo; games with one: {', '.join(_demo_domains())}")
        names = [game]
    else:
        names = _demo_domains()
    return {"game": game, "steps": steps,  # a refusal names the fields that differ in key order: these first
            "what_each_domain_shows": {name: asdict(get_domain(name).demo) for name in names}}


def _demo_domains() -> list[str]:
    return [name for name in domain_names() if get_domain(name).demo is not None]


def run_demo(out: Path, console: Console, game: str | None = None, steps: int | None = None,
             overwrite: bool = False) -> dict:
    """`sepo demo`: the tour (no game) or one domain's demo, into the run folder `out`."""
    config = demo_config(game, steps)
    with open_run(out, COMMAND, config, overwrite=overwrite) as run:
        if run.finished:
            summary = read_json(out / SUMMARY, "demo summary")
            show(summary, console)
            console.print(
                f"[dim]The demo in {out} was already complete: shown from {out / SUMMARY}, nothing "
                "retrained.[/dim]"
            )
            return summary
        summary = _tour(run, steps, console) if game is None else _domain_demo(run, game, steps, console)
        run.write_json(SUMMARY, summary)
        show(summary, console)
        run.complete()
    return summary


# ----------------------------------------------------------------------------------- measuring

def _tour(run: RunDir, steps: int | None, console: Console) -> dict:
    audits = []
    for name in _demo_domains():
        domain = get_domain(name)
        audits.append(_audit(domain, domain.demo, 0, console))
    trainings = []
    for name in _demo_domains():
        spec = get_domain(name).demo
        if spec.featured and spec.training is not None:
            trainings.append(
                _training(run, get_domain(name), spec.training, steps, f"{name}/", console, frontier=False)
            )
    return {"game": None, "audits": audits, "trainings": trainings, "out": str(run.root)}


def _domain_demo(run: RunDir, name: str, steps: int | None, console: Console) -> dict:
    domain = get_domain(name)
    spec = domain.demo
    audits = [_audit(domain, spec, index, console) for index in range(len(spec.agents))]
    trainings = [] if spec.training is None else [_training(run, domain, spec.training, steps, "", console,
                                                            frontier=domain.frontier is not None)]
    return {"game": name, "audits": audits, "trainings": trainings, "out": str(run.root)}


def _audit(domain: Domain, spec: DemoSpec, index: int, console: Console) -> dict:
    """One reference agent of a domain under both protocols, as `sepo eval` audits it."""
    agent = spec.agents[index]
    row = {"domain": domain.name, "agent": agent.spec, "shows": agent.shows, "params": dict(spec.params),
           "episodes": spec.episodes, "unit": f"{domain.payoff_name}/{domain.round_name}"}
    for protocol in PROTOCOLS:
        with console.status(
            f"auditing {agent.spec} in {domain.name} ({protocol} protocol, {spec.episodes} episodes per "
            "opponent)"
        ):
            game = domain.game(protocol, **spec.params)
            result = evaluate(
                game, load_agent(agent.spec, game), EvalConfig(protocol=protocol, episodes=spec.episodes)
            )
        row[protocol] = measures(result)
    return row


def measures(result: dict) -> dict:
    """What the demo shows of an audit: utility, the pool exploit score, and the exact value (or
    the strongest best-response bound) with its name, label and method; `br_gap` is the exact best
    responder's gap u_O − u_A per round, the exact counterpart of the exploit score."""
    name = result.get("exact_value")
    value, method = (result.get(name), result.get("exact_method")) if name else (None, None)
    if name is None:
        for key, found in result.items():
            if key.endswith("_lower_bound") and isinstance(found, (int, float)):
                name, value, method = (
                    key[: -len("_lower_bound")],
                    float(found),
                    result.get("lower_bound_method"),
                )
                break
    br_gap = None
    if value is not None and name != "exploitability":
        br_gap = float(value)  # a general-sum game's value is the best responder's gap itself
    elif isinstance(result.get("br_payoff"), (int, float)) and isinstance(
        result.get("agent_payoff_vs_br"), (int, float)
    ):
        # zero-sum: twice the exploitability
        br_gap = float(result["br_payoff"]) - float(result["agent_payoff_vs_br"])
    return {
        "utility": result["utility"],
        "utility_ci": result["ci"].get("utility"),
        "utility_unit": result.get("utility_unit"),
        "exploit_pool": result["exploit_pool"],
        "exploit_pool_ci": result["ci"].get("exploit_pool"),
        "value_name": name,
        "value": None if value is None else float(value),
        "label": result.get("exact_label") if name else None,
        "method": method,
        "br_gap": br_gap,
    }


def _training(
    run: RunDir,
    domain: Domain,
    training: DemoTraining,
    steps: int | None,
    prefix: str,
    console: Console,
    frontier: bool,
) -> dict:
    """SEPO against payoff-only GRPO from the uniform table (and, with `frontier`, the domain's extra
    SEPO runs placed on its exact frontier); each run a `train` folder that is part of the demo."""
    settings = dict(training.settings, **({"steps": steps} if steps is not None else {}))
    plan = [(f"sepo_l{training.lambda_e:g}", "per-rollout", training.lambda_e), (PAYOFF_ONLY, "none", 0.0)]
    if frontier:
        plan += [(f"sepo_l{lam:g}", "per-rollout", lam) for lam in training.frontier_lambdas]
    runs = []
    for name, penalty, lambda_e in plan:
        config = TabularSEPOConfig(game=domain.name, penalty=penalty, lambda_e=lambda_e, seed=0, **settings)
        folder = run.path(prefix + name)
        with (
            console.status(
                f"training {domain.name}: {name} ({penalty}, λe={lambda_e:g}, {config.steps} steps)"
            ),
            open_run(folder, "train", {"policy": "tabular", **config.record()}, part_of=COMMAND) as sub,
        ):
            trainer = TabularSEPOTrainer(config, sub)
            # no curves.png per run: the comparison plot draws them (a figure costs about a second)
            summary = trainer.train()
        value_name = summary.get("exact_value") or trainer.env.solver.value_name
        label = (
            "exact"
            if summary.get("value_exact", 1.0)
            else "upper bound"
            if summary.get("value_upper_bound")
            else "bound"
        )
        runs.append(
            {
                "name": name,
                "folder": str(folder),
                "penalty": penalty,
                "lambda_e": lambda_e,
                "steps": config.steps,
                "value_name": value_name,
                "value": summary[value_name],
                "label": label,
                "utility": summary["utility"],
            }
        )
    title = f"{domain.name}: SEPO (λe={training.lambda_e:g}) against payoff-only GRPO"
    comparison = plot_runs(
        [run.root / prefix / r["name"] for r in runs[:2]], run.path(prefix + COMPARISON_PLOT), title=title
    )
    out = {
        "domain": domain.name,
        "unit": f"{domain.payoff_name}/{domain.round_name}",
        "runs": runs,
        "plots": [str(comparison)],
    }
    if frontier:
        train = [spec for spec in default_pools(domain.name)["train"] if spec.name != BEST_RESPONSE]
        lambdas = sorted({r["lambda_e"] for r in runs if r["penalty"] != "none"})
        report, curve = domain.frontier(train, lambdas, [Path(r["folder"]) for r in runs])
        placed = {Path(r["run"]).name: r for r in report["runs"]}
        for entry in runs:
            entry.update({k: placed[entry["name"]][k] for k in ("frontier_utility", "gap")})
        plot = plot_frontier(
            curve,
            run.path(prefix + FRONTIER_PLOT),
            [{"label": Path(r["run"]).name, **r} for r in report["runs"]],
            title=f"{domain.name}: best achievable trade-off",
            unit=out["unit"],
        )
        out["plots"].append(str(plot))
    return out


# ------------------------------------------------------------------------------------- showing

def disagreement(paper: dict) -> str:
    """The paper's exploit score beside the exact best responder's gap in the same game: 'agrees'
    when the gap lies in the score's 95% interval, else both numbers."""
    score = paper["exploit_pool"]
    low, high = paper.get("exploit_pool_ci") or (score, score)
    if paper["br_gap"] is None:
        return f"{score:.3f} (no exact)"
    gap = paper["br_gap"]
    if low - 1e-9 <= gap <= high + 1e-9:
        return f"{score:.3f} (agrees)"
    return f"{score:.3f} (exact {gap:.3f})"


def value_text(measured: dict, named: bool = True) -> str:
    """'adversarial gap 0.6250', '≥ 3.0000' for a lower bound; without `named`, the number alone."""
    if measured["value"] is None:
        return "pool bounds only"
    bound = "≥ " if measured["label"] == "lower bound" else ""
    return (
        f"{measured['value_name'].replace('_', ' ')} " if named else ""
    ) + f"{bound}{measured['value']:.4f}"


def _value_header(rows: list[dict]) -> str:
    names = {row["value_name"] for row in rows if row["value_name"]}
    return names.pop().replace("_", " ") if len(names) == 1 else "exact value"


def show(summary: dict, console: Console) -> None:
    """The demo's tables from its summary (a rerun shows the same from the saved file)."""
    if summary["game"] is None:
        _show_tour(summary, console)
    else:
        _show_domain(summary, console)
    _show_trainings(summary, console)
    _show_outputs(summary, console)


def _show_tour(summary: dict, console: Console) -> None:
    table = Table(
        title="1. Audit: one reference agent per domain (rigorous protocol; the paper's score beside it)"
    )
    for column in ("domain", "agent", "utility", "exact value", "label", "paper's score"):
        table.add_column(column, no_wrap=column in ("domain", "agent"))
    for row in summary["audits"]:
        rigorous, paper = row["rigorous"], row["paper"]
        table.add_row(
            row["domain"],
            row["agent"],
            f"{rigorous['utility']:.3f}",
            value_text(rigorous, named=False),
            rigorous["label"] or "-",
            disagreement(paper),
        )
    console.print(table)
    for row in summary["audits"]:
        value = (row["rigorous"]["value_name"] or "no exact value").replace("_", " ")
        console.print(f"  {row['domain']} ({value}, {row['unit']}), {row['agent']}: {row['shows']}")
    console.print(
        "The exact value is the exploitability (zero-sum) or the adversarial gap, or '≥' a best-response "
        "lower bound. The paper's score is its exploit score: the gap u_O − u_A per round of its exploiter "
        "bots, under its own protocol; where it disagrees, the exact best responder's gap in that same game "
        "is beside it (in a zero-sum game twice the exploitability) "
        "('no exact': the paper's version of the game has no exact solver). Each row is "
        "`sepo eval --game G --agent A` (the game parameters and --episodes are in demo_summary.json), under "
        "--protocol rigorous and paper.\n"
    )


def _show_domain(summary: dict, console: Console) -> None:
    first = summary["audits"][0]
    table = Table(title=f"1. Audit: {summary['game']}, reference agents under both protocols "
                        f"({first['episodes']} episodes per opponent; {first['unit']})")
    header = _value_header([row[protocol] for row in summary["audits"] for protocol in PROTOCOLS])
    for column in ("agent", "protocol", "utility", "exploit score", header, "label"):
        table.add_column(column, no_wrap=column == "agent")
    for row in summary["audits"]:
        for protocol in PROTOCOLS:
            measured = row[protocol]
            table.add_row(
                row["agent"],
                protocol,
                f"{measured['utility']:.3f}",
                f"{measured['exploit_pool']:.3f}",
                value_text(measured, named=header == "exact value"),
                measured["label"] or "-",
            )
    console.print(table)
    for row in summary["audits"]:
        console.print(
            f"  {row['agent']}: {row['shows']}; the paper's score against the exact gap: "
            f"{disagreement(row['paper'])}"
        )
    console.print()


def _show_trainings(summary: dict, console: Console) -> None:
    for training in summary["trainings"]:
        frontier = "frontier_utility" in training["runs"][0]
        table = Table(
            title=f"2. {training['domain']}: trained from the uniform table ({training['runs'][0]['steps']} "
            f"steps each, exact values; {training['unit']})"
        )
        for column in (
            "run",
            "λe",
            training["runs"][0]["value_name"].replace("_", " "),
            "utility vs train pool",
        ) + (("frontier u*(e)", "gap") if frontier else ()):
            table.add_column(column)
        for run in training["runs"]:
            label = "" if run["label"] == "exact" else f" ({run['label']})"
            cells = [
                run["name"],
                f"{run['lambda_e']:g}",
                f"{run['value']:.4f}{label}",
                f"{run['utility']:.4f}",
            ]
            if frontier:
                cells += [f"{run['frontier_utility']:.4f}", f"{run['gap']:.4f}"]
            table.add_row(*cells)
        console.print(table)


def _show_outputs(summary: dict, console: Console) -> None:
    out = Path(summary["out"])
    plots = [plot for training in summary["trainings"] for plot in training["plots"]]
    runs = [run["folder"] for training in summary["trainings"] for run in training["runs"]]
    console.print(f"\n3. Outputs, all in {out}/:")
    console.print(f"  the numbers above: {out / SUMMARY}")
    for plot in plots:
        console.print(f"  plot: {plot}")
    if runs:
        console.print(
            f"  training runs (each with policy.json, metrics.jsonl, summary.json): {', '.join(runs)}"
        )
    if summary["game"] is None:
        others = ", ".join(f"`sepo demo --game {row['domain']}`" for row in summary["audits"])
        console.print(f"  each domain's own demo: {others}")
