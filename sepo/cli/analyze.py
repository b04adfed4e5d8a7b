"""`sepo analyze`: equilibrium analysis of normal-form games, play histories, dynamics and populations.

Every command prints a readable report, or one JSON object with `--json`. Bad input files get
one line naming the file and the field, and exit status 2.
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from sepo.analysis import MIN_PAIR_EPISODES
from sepo.cli.common import console, progress, seed_option
from sepo.cli.common import print_json as _print_json
from sepo.cli.common import user_errors as _user_errors
from sepo.cli.game_options import DEFAULT_GAME, GAME_HELP, with_game_params
from sepo.cli.layout import SepoCommand
from sepo.errors import SepoError

app = typer.Typer(
    help="Equilibrium analysis: games, regret, learning dynamics, collusion stress tests, populations.",
    no_args_is_help=True,
)

MAX_ITERATIONS = 10_000_000
"""Rounds of a learning rule one command may run."""
MAX_DT = 1.0
"""Largest replicator time step: beyond it the Euler step leaves the simplex and means nothing."""

ENUMERATION_LIMIT = 200_000
"""Support enumeration is skipped (with a note) beyond this many support pairs."""


def _fmt(x: float) -> str:
    return f"{x:.6g}" if abs(x) >= 1e-12 else "0"


def _clean(x: float) -> float:
    """A nonnegative quantity's rounding noise shown as 0 (no -0.0000)."""
    return 0.0 if abs(x) < 1e-12 else x


def _mix(names, probabilities, tol: float = 1e-12) -> str:
    return ", ".join(f"{n} {_fmt(p)}" for n, p in zip(names, probabilities) if p > tol)


# ----------------------------------------------------------------------------------------- game

@app.command("game")
@_user_errors
def game_command(
    file: str = typer.Argument(
        ..., help="Normal-form game (YAML/JSON): players, actions, payoffs, optional profile."
    ),
    objective: List[str] = typer.Option(
        ["max-welfare", "min-welfare"],
        "--objective",
        help="CE/CCE objective(s): max-welfare, min-welfare, max:PLAYER, min:PLAYER. Repeatable.",
    ),
    tol: float = typer.Option(
        1e-9, "--tol", help="Tolerance (finite, >= 0) of the Nash check of the file's profile."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Nash equilibria (all, for two players), zero-sum value, CE/CCE welfare range; audits the profile."""
    from sepo.analysis.equilibria import correlated_equilibrium, nash_equilibria_2p, solve_zero_sum
    from sepo.analysis.normal_form import load_game

    if not (math.isfinite(tol) and tol >= 0):
        from sepo.analysis.errors import AnalysisInputError

        raise AnalysisInputError("--tol", "tol", f"must be a finite number >= 0, got {tol}")
    game = load_game(file)
    report: dict = {"name": game.name, "players": list(game.players),
                    "actions": {p: list(a) for p, a in zip(game.players, game.actions)}}
    report["pure_nash"] = [
        dict(zip(game.players, (game.actions[i][a] for i, a in enumerate(j))))
        for j in game.pure_nash_equilibria()
    ]
    if game.num_players == 2:
        m, n = game.shape
        pairs = sum(math.comb(m, k) * math.comb(n, k) for k in range(1, min(m, n) + 1))
        if pairs <= ENUMERATION_LIMIT:
            enumeration = nash_equilibria_2p(game)
            report["nash"] = {
                "equilibria": [
                    {
                        "profile": game.describe_profile((x, y)),
                        "payoffs": dict(zip(game.players, map(float, game.expected_payoffs((x, y))))),
                    }
                    for x, y in enumeration.equilibria
                ],
                "degenerate": enumeration.degenerate,
            }
        else:
            report["nash"] = {"skipped": f"{pairs} support pairs exceed the limit of {ENUMERATION_LIMIT}"}
        if game.constant_sum() is not None:
            solution = solve_zero_sum(game)
            report["zero_sum"] = {
                "constant": game.constant_sum(),
                "value": solution.value,
                "maximin": game.describe_profile((solution.row_strategy, solution.column_strategy)),
            }
    report["correlated"] = []
    for kind, goal in itertools.product(("ce", "cce"), objective):
        result = correlated_equilibrium(game, kind, goal)
        report["correlated"].append(
            {
                "kind": kind,
                "objective": goal,
                "objective_value": result.objective_value,
                "payoffs": dict(zip(game.players, map(float, result.payoffs))),
                "max_violation": result.max_violation,
                "support": [
                    {"joint": dict(zip(game.players, joint)), "probability": p}
                    for joint, p in result.support(game)
                ],
            }
        )
    if game.profile is not None:
        profile = game.profile
        gains = game.deviation_gains(profile)
        report["profile"] = {
            "strategies": game.describe_profile(profile),
            "payoffs": dict(zip(game.players, map(float, game.expected_payoffs(profile)))),
            "best_responses": {
                p: [game.actions[i][a] for a in game.best_responses(profile, i)]
                for i, p in enumerate(game.players)
            },
            "gains": dict(zip(game.players, map(float, gains))),
            "nash_conv": float(gains.sum()),
            "is_nash": game.is_nash(profile, tol),
            "tolerance": tol,
        }
    if as_json:
        _print_json(report)
        return
    _print_game(game, report)


def _print_game(game, report: dict) -> None:
    console.print(
        f"[bold]{game.name}[/bold]: "
        + "; ".join(f"{p} {list(a)}" for p, a in zip(game.players, game.actions)),
        highlight=False,
    )
    pure = report["pure_nash"]
    console.print(
        "pure Nash equilibria: " + ("; ".join("/".join(j.values()) for j in pure) if pure else "none"),
        highlight=False,
    )
    if "nash" in report:
        nash = report["nash"]
        if "skipped" in nash:
            console.print(f"Nash enumeration skipped: {nash['skipped']}")
        else:
            table = Table(
                title="Nash equilibria (support enumeration)"
                + (" — degenerate game, list may be incomplete" if nash["degenerate"] else "")
            )
            for column in ["#", *game.players, "payoffs"]:
                table.add_column(column)
            for k, eq in enumerate(nash["equilibria"], 1):
                cells = [_mix(list(eq["profile"][p]), list(eq["profile"][p].values())) for p in game.players]
                table.add_row(str(k), *cells, ", ".join(_fmt(v) for v in eq["payoffs"].values()))
            console.print(table)
    if "zero_sum" in report:
        z = report["zero_sum"]
        console.print(
            f"constant-sum ({_fmt(z['constant'])}): value for {game.players[0]} = {_fmt(z['value'])}; "
            "maximin: "
            + "; ".join(f"{p}: {_mix(list(s), list(s.values()))}" for p, s in z["maximin"].items()),
            highlight=False,
        )
    table = Table(title="Correlated (CE) and coarse correlated (CCE) equilibria at the chosen objectives")
    for column in ("kind", "objective", "value", "payoffs", "distribution", "max violation"):
        table.add_column(column)
    for item in report["correlated"]:
        support = "; ".join(
            f"{'/'.join(s['joint'].values())} {_fmt(s['probability'])}" for s in item["support"]
        )
        table.add_row(
            item["kind"].upper(),
            item["objective"],
            _fmt(item["objective_value"]),
            ", ".join(_fmt(v) for v in item["payoffs"].values()),
            support,
            f"{item['max_violation']:.1e}",
        )
    console.print(table)
    if "profile" in report:
        prof = report["profile"]
        table = Table(
            title=f"Profile audit: NashConv {_fmt(prof['nash_conv'])} — "
                  f"{'Nash' if prof['is_nash'] else 'not Nash'} (tol {prof['tolerance']:g})"
        )
        for column in ("player", "strategy", "payoff", "best responses", "gain from deviating"):
            table.add_column(column)
        for p in game.players:
            s = prof["strategies"][p]
            table.add_row(
                p,
                _mix(list(s), list(s.values())),
                _fmt(prof["payoffs"][p]),
                ", ".join(prof["best_responses"][p]),
                _fmt(prof["gains"][p]),
            )
        console.print(table)


# --------------------------------------------------------------------------------------- regret

@app.command("regret")
@_user_errors
def regret_command(
    history: str = typer.Argument(
        ...,
        help="CSV: columns action + payoff_if_<ACTION> (+ received, player), or one column per player of "
             "--game.",
    ),
    game_file: Optional[str] = typer.Option(
        None, "--game", help="Normal-form game the joint-action history was played in."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """External regret, swap regret with its maximising swap map, and the empirical CE/CCE gaps."""
    from sepo.analysis.normal_form import load_game
    from sepo.analysis.regret import load_history

    report = load_history(history, load_game(game_file) if game_file else None)
    if as_json:
        _print_json(report.to_dict())
        return
    table = Table(title=f"Regret of {history}")
    for column in (
        "player",
        "rounds",
        "received",
        "best fixed action",
        "external regret",
        "swap regret",
        "swap map",
    ):
        table.add_column(column)
    for p in report.players:
        swap_map = ", ".join(f"{a}→{b}" for a, b in p.swap_map.items()) or "identity"
        table.add_row(
            p.player,
            str(p.rounds),
            _fmt(p.received),
            f"{p.best_fixed_action} ({_fmt(p.best_fixed_total)})",
            _fmt(p.external_regret),
            _fmt(p.swap_regret),
            swap_map,
        )
    console.print(table)
    console.print(
        f"empirical CCE gap {_fmt(report.cce_gap)}, CE gap {_fmt(report.ce_gap)} (payoff per round; 0 = the "
        "history is an exact CCE / CE)"
    )


# ------------------------------------------------------------------------------------- dynamics

@app.command("dynamics")
@_user_errors
def dynamics_command(
    file: str = typer.Argument(..., help="Normal-form game (YAML/JSON); its profile, if any, is the start."),
    rule: str = typer.Option(..., "--rule", help="fictitious | replicator | hedge | regret-matching"),
    iterations: int = typer.Option(10_000, "--iterations", help="Rounds (replicator: steps of --dt)."),
    swap: bool = typer.Option(
        False, "--swap", help="Swap-regret version (Blum-Mansour) of hedge or regret-matching."
    ),
    eta: Optional[float] = typer.Option(
        None, "--eta", help="Hedge step size (default sqrt(8 ln k / T) / payoff range)."
    ),
    dt: float = typer.Option(0.01, "--dt", help="Replicator time step."),
    seed: int = seed_option(
        "Seed of fictitious play's tie-breaking and the replicator's random start (>= 0)."
    ),
    plot: Optional[str] = typer.Option(
        None, "--plot", help="Write a PNG of strategies and gaps over time (a new file, or this same plot's)."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace a PNG another sepo command wrote at --plot."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Run a learning rule; report the CE/CCE gaps of average play, NashConv and cycling."""
    from sepo.analysis.dynamics import RULES, plot_trajectory, run_dynamics
    from sepo.analysis.errors import AnalysisInputError
    from sepo.analysis.normal_form import load_game
    from sepo.runs import check_output_file, output_file

    if rule not in RULES:
        raise AnalysisInputError("--rule", rule, f"unknown rule; use one of {', '.join(RULES)}")
    if swap and rule not in ("hedge", "regret-matching"):
        raise AnalysisInputError(
            "--swap", rule, "the swap-regret version exists for hedge and regret-matching only"
        )
    if iterations < 1:
        raise AnalysisInputError("--iterations", str(iterations), "must be at least 1")
    if iterations > MAX_ITERATIONS:
        raise AnalysisInputError("--iterations", str(iterations), f"at most {MAX_ITERATIONS:,}")
    if not math.isfinite(dt) or not 0 < dt <= MAX_DT:
        raise AnalysisInputError("--dt", "dt", f"must be a finite number in (0, {MAX_DT}], got {dt}")
    if eta is not None and not (math.isfinite(eta) and eta > 0):
        raise AnalysisInputError("--eta", "eta", f"must be a finite positive number, got {eta}")
    plot_config = {
        "file": str(Path(file).resolve()),
        "rule": rule,
        "iterations": iterations,
        "swap": swap,
        "eta": eta,
        "dt": dt,
        "seed": seed,
    }
    if plot is not None:
        check_output_file(plot, "analyze dynamics", plot_config, overwrite=overwrite, option="--plot")
    game = load_game(file)
    trajectory = run_dynamics(
        game, rule, iterations, swap=swap, eta=eta, dt=dt, start=game.profile, seed=seed
    )
    report = trajectory.to_dict(game)
    if plot is not None:
        with output_file(plot, "analyze dynamics", plot_config, overwrite=overwrite, option="--plot") as (
            tmp,
            stamp,
        ):
            plot_trajectory(game, trajectory, tmp, stamp)
        report["plot"] = str(plot)
    if as_json:
        _print_json(report)
        return
    name = rule + (" (swap-regret version)" if swap else "")
    console.print(
        f"[bold]{name}[/bold] on {game.name}, {iterations} "
        f"{'steps of dt=' + str(dt) if rule == 'replicator' else 'iterations'}",
        highlight=False,
    )
    table = Table()
    for column in ("player", "time-averaged strategy", "final strategy"):
        table.add_column(column)
    for p in game.players:
        avg, final = report["final_average_strategies"][p], report["final_strategies"][p]
        table.add_row(
            p, _mix(list(avg), list(avg.values()), 1e-4), _mix(list(final), list(final.values()), 1e-4)
        )
    console.print(table)
    cycle = report["cycle"]
    console.print(f"CCE gap {_fmt(report['cce_gap'])}, CE gap {_fmt(report['ce_gap'])} of average play; "
                  f"NashConv of average strategies {_fmt(report['nash_conv_of_average'])}", highlight=False)
    detail = f", {cycle['returns']} returns, period ≈ {_fmt(cycle['period'])}" if cycle["detected"] else ""
    console.print(f"cycle: {cycle['verdict']}{detail}", highlight=False)
    if plot:
        console.print(f"plot: {report['plot']}", highlight=False)


# ------------------------------------------------------------------------------------ collusion

@app.command("collusion")
@_user_errors
def collusion_command(
    rules_file: str = typer.Argument(
        ..., help="Reward rules (YAML/JSON), e.g. examples/analysis/publication_naive.yaml."
    ),
    seeds: Optional[int] = typer.Option(
        None, "--seeds", max=100_000, help="Run seeds 0..N-1 (default: the file's seeds)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Independent epsilon-greedy learners under reward rules: target frequency and exact coalition gain."""
    from sepo.analysis.collusion import load_rules, stress_test
    from sepo.analysis.errors import AnalysisInputError

    rules = load_rules(rules_file)
    if seeds is not None and seeds < 1:
        raise AnalysisInputError("--seeds", "seeds", f"must be at least 1, got {seeds}")
    report = stress_test(rules, range(seeds) if seeds is not None else None).to_dict()
    if as_json:
        _print_json(report)
        return
    freq = report["target_frequency"]
    target = "/".join(report["target"].values())
    console.print(
        f"[bold]{report['name']}[/bold]: {len(freq['per_seed'])} seeds x {report['rounds']} rounds, epsilon "
        f"{report['epsilon']}",
        highlight=False,
    )
    console.print(
        f"{target} in the final {report['window']} rounds: mean {freq['mean']:.3f} (min {freq['min']:.3f}, "
        f"max {freq['max']:.3f}); {freq['share_of_seeds_at_or_above_threshold']:.0%} of seeds at or above "
        f"{freq['threshold']:.0%}",
        highlight=False,
    )
    coalition = report["coalition"]
    console.print(
        f"coalition gain of {'/'.join(coalition['deviation'].values())} over "
        f"{'/'.join(coalition['baseline'].values())}: {coalition['gain']:+.4f} joint reward per round (exact "
        "expectation over scenarios)",
        highlight=False,
    )
    console.print(
        "pure Nash equilibria of the expected game: "
        + ("; ".join("/".join(j.values()) for j in report["expected_game_pure_nash"]) or "none"),
        highlight=False,
    )


# --------------------------------------------------------------------------------------- markov

@app.command("markov")
@_user_errors
def markov_command(
    file: str = typer.Argument(..., help="Finite discounted Markov game with a joint policy (YAML/JSON)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Exact values of the file's policy (Bellman linear solve) and each player's best-response value."""
    from sepo.analysis.errors import AnalysisInputError
    from sepo.analysis.markov import load_markov_game

    game = load_markov_game(file)
    if game.policy is None:
        raise AnalysisInputError(file, "policy", "missing: the audit needs a joint policy")
    report = game.audit(game.policy)
    if as_json:
        _print_json(report)
        return
    table = Table(
        title=f"Values at {report['start']} (gamma {report['gamma']}): NashConv {_fmt(report['nash_conv'])}"
    )
    for column in ("player", "value of policy", "best-response value", "gain", "best response"):
        table.add_column(column)
    for p, item in report["players"].items():
        table.add_row(p, _fmt(item["value"]), _fmt(item["best_response_value"]), _fmt(item["gain"]),
                      ", ".join(f"{s}: {a}" for s, a in item["best_response"].items()))
    console.print(table)
    states = Table(title="Value of every state under the policy")
    states.add_column("state")
    for p in game.players:
        states.add_column(p)
    for s, values in report["values"].items():
        states.add_row(s, *(_fmt(values[p]) for p in game.players))
    console.print(states)


# ----------------------------------------------------------------------------------- population

@app.command("population", cls=SepoCommand)
@_user_errors
@with_game_params
def population_command(
    agents: Optional[List[str]] = typer.Option(
        None,
        "--agents",
        help="Agent specs: --agents A B C ... (nash, uniform, bot:NAME, tabular:FILE, run:DIR, hf:PATH).",
    ),
    more_agents: Optional[List[str]] = typer.Argument(
        None, help="The rest of the --agents list.", show_default=False
    ),
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    matrix: Optional[str] = typer.Option(
        None,
        "--matrix",
        help="Instead of agents: a meta-game file with agents and payoffs (row agent vs column agent).",
    ),
    episodes: int = typer.Option(
        200, "--episodes", min=MIN_PAIR_EPISODES,
        help="Episodes per pair of agents when payoffs must be sampled (half in each seat).",
    ),
    seed: int = seed_option("Seed of sampled play (>= 0)."),
    monoculture: float = typer.Option(
        0.9, "--monoculture", help="Flag monoculture when one agent has at least this share of the Nash mix."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    game_params: dict = None,
):
    """Meta-game of agents: Nash and correlated equilibria, exploitability in the population, diversity."""
    from sepo.analysis.errors import AnalysisInputError
    from sepo.analysis.population import analyze_population, build_meta_game, load_matrix
    from sepo.cli.game_options import game_params_for

    specs = list(agents or []) + list(more_agents or [])
    if not 0.0 < monoculture <= 1.0:
        raise AnalysisInputError("--monoculture", "monoculture", f"a share in (0, 1], got {monoculture}")
    if matrix and specs:
        raise AnalysisInputError("--matrix", "matrix", "give either --matrix or --agents, not both")
    if matrix and game_params:  # a matrix file holds its payoffs: a game parameter would change nothing
        flag = f"--{next(iter(game_params)).replace('_', '-')}"
        raise SepoError(
            f"{flag} applies to the game the --agents play; --matrix reads its payoffs from the file"
        )
    params = game_params_for(game, game_params) if specs else {}
    if matrix:
        meta = load_matrix(matrix)
    elif specs:
        with progress() as bar:  # on stderr, with --json too: stdout holds the object alone
            task = bar.add_task("playing pairs of agents", total=None)
            meta = build_meta_game(game, specs, episodes=episodes, seed=seed, game_params=params,
                                   progress=lambda done, total: bar.update(task, completed=done, total=total))
    else:
        raise AnalysisInputError(
            "--agents", "agents", "missing: name at least two agents (--agents A B ...) or give --matrix FILE"
        )
    report = analyze_population(meta, monoculture).to_dict()
    if as_json:
        _print_json(report)
        return
    names = report["agents"]
    console.print(
        f"[bold]meta-game[/bold] of {len(names)} agents, payoffs {report['method']}", highlight=False
    )
    table = Table(title="payoff per round of the row agent against the column agent")
    table.add_column("")
    for a in names:
        table.add_column(a)
    for a in names:
        table.add_row(a, *(_fmt(report["payoffs"][a][b]) for b in names))
    console.print(table)
    mix = max(report["nash"]["mixes"], key=lambda m: -sum(p * math.log(p) for p in m.values() if p > 0))
    agents_table = Table(title=f"Nash mix: {report['nash']['method']}")
    for column in (
        "agent",
        "Nash weight",
        "payoff vs Nash mix",
        "exploitability in population",
        "best exploiter",
    ):
        agents_table.add_column(column)
    for a in names:
        item = report["agents_report"][a]
        agents_table.add_row(
            a,
            _fmt(mix[a]),
            _fmt(item["payoff_against_nash_mix"]),
            _fmt(item["exploitability_in_population"]),
            item["best_exploiter"] or "none",
        )
    console.print(agents_table)
    d = report["diversity"]
    console.print(
        f"diversity: entropy {_clean(d['entropy_nats']):.4f} nats "
        f"({_clean(d['normalized_entropy']):.2f} of the maximum), "
        f"{d['effective_strategies']:.2f} effective strategies, largest share {d['largest_share']:.2f} "
        f"({d['most_common']})"
        + (" — MONOCULTURE" if d["monoculture"] else ""),
        highlight=False,
    )
    ce = report["correlated_equilibrium_max_welfare"]
    console.print(
        "max-welfare CE of the meta-game: welfare "
        + _fmt(ce["welfare"])
        + "; "
        + "; ".join(f"{s['row']}/{s['column']} {_fmt(s['probability'])}" for s in ce["support"]),
        highlight=False,
    )


# ---------------------------------------------------------------------------------- institution

def _assignment(text: str, option: str) -> tuple[str, str]:
    from sepo.analysis.errors import AnalysisInputError

    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise AnalysisInputError(option, option.lstrip("-"), f"{text!r}: write NAME=VALUE")
    return name.strip().replace("-", "_"), value.strip()


@app.command("institution")
@_user_errors
def institution_command(
    game_name: str = typer.Option(
        ..., "--game", help="Domain whose rules are searched (it needs a tabular trainer)."
    ),
    vary: List[str] = typer.Option(
        ...,
        "--vary",
        help="A game parameter and its values to search, NAME=V1,V2,... "
        "(one --vary per parameter; repeat for a grid, e.g. --vary fine=0,0.05 "
        "--vary detection=0.5,1 with --set sanction_threshold=1.6).",
    ),
    fixed: Optional[List[str]] = typer.Option(
        None, "--set", help="A game parameter held fixed, NAME=VALUE (repeatable)."
    ),
    out: Path = typer.Option(
        ..., "--out", help="Folder of the search: a training run per setting and seed, and report.json."
    ),
    seeds: int = typer.Option(
        3, "--seeds", min=1, max=100, help="Trained agents per setting (seeds 0..N-1)."
    ),
    steps: int = typer.Option(300, "--steps", min=1, help="Training steps per agent."),
    groups: int = typer.Option(64, "--groups", min=1, help="Groups per training step."),
    penalty: str = typer.Option(
        "none", "--penalty", help="Trainer's penalty: none (payoff-only GRPO, default) or per-rollout (SEPO)."
    ),
    lambda_e: float = typer.Option(
        0.0, "--lambda-e", help="λe of the trained agents (with --penalty per-rollout)."
    ),
    lambda_c: float = typer.Option(
        0.0, "--lambda-c", help="λc of the trained agents (with --penalty per-rollout)."
    ),
    lambda_x: float = typer.Option(
        0.0, "--lambda-x", help="λx of the trained agents (with --penalty per-rollout)."
    ),
    tolerance: float = typer.Option(
        0.02, "--tolerance", help="Settings within this of the least mean collusion compete on externality."
    ),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Replace an existing search in --out (removes only the files that search wrote).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """Search a game's institution parameters for the setting whose trained agents collude least, at the least
    externality.

    Each --vary names one parameter with all its values; a setting that makes the same game as an
    earlier one (a setting that changes nothing there) is trained once and marked."""
    from sepo.analysis.institutions import SearchConfig, cell_name, search
    from sepo.cli.game_options import game_params_for
    from sepo.games import get_domain

    domain = get_domain(game_name)
    defaults = {p.name: p.default for p in domain.params}

    def converted(name: str, text: str):
        return game_params_for(game_name, {name: text}).get(name, defaults.get(name))

    grid = {}
    for text in vary:
        name, values = _assignment(text, "--vary")
        if name in grid:  # the second used to replace the first without a word
            raise SepoError(
                f"--vary {name} is given twice; give all its values in one: --vary {name}=V1,V2,..."
            )
        grid[name] = [converted(name, value) for value in values.split(",")]
    held = {name: converted(name, value) for name, value in (_assignment(t, "--set") for t in (fixed or []))}
    config = SearchConfig(
        game=game_name,
        vary=grid,
        fixed=held,
        seeds=seeds,
        steps=steps,
        groups=groups,
        penalty=penalty,
        lambda_e=lambda_e,
        lambda_c=lambda_c,
        lambda_x=lambda_x,
        tolerance=tolerance,
    )
    with progress() as bar:  # on stderr, with --json too: stdout holds the object alone
        task = bar.add_task("training", total=None)
        report = search(
            config, out, progress=lambda text: bar.update(task, description=text), overwrite=overwrite
        )
    if as_json:
        _print_json(report)
        return
    spread = "means with 95% t-intervals over seeds" if seeds >= 2 else "one seed: no interval"
    table = Table(
        title=f"{game_name}: {len(report['settings'])} settings x {seeds} trained "
        f"agent{'s' if seeds != 1 else ''} (penalty {penalty}; {spread})"
    )
    for column in ("setting", "collusion", "externality", "utility"):
        table.add_column(column)
    for row in report["settings"]:
        cells = [("n/a" if m not in row else f"{row[m]['mean']:.4f} (n/a)" if row[m]["ci"] is None
                  else f"{row[m]['mean']:.4f} [{row[m]['ci'][0]:.4f}, {row[m]['ci'][1]:.4f}]")
                 for m in ("collusion", "externality", "utility")]
        mark = " (chosen)" if row["cell"] == report["chosen_cell"] else ""
        if row.get("same_as") is not None:
            mark += f" (= {cell_name(report['settings'][row['same_as']]['setting'])}, trained once)"
        table.add_row(cell_name(row["setting"]) + mark, *cells)
    console.print(table)
    for note in report.get("notes", ()):
        console.print(f"note: {note}", highlight=False)
    console.print(
        f"chosen: {cell_name(report['chosen'])}: the least collusion within {tolerance:g} of the least "
        f"({report['least_collusion']:.4f}), then the least externality; measured {report['measured']}; "
        f"report at {Path(out) / 'report.json'}",
        highlight=False,
    )
