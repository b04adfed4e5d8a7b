"""`sepo eval`, `sepo exploit` and `sepo frontier`: audit an agent, its exact value, and the best
achievable trade-off it is placed against."""
from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from sepo.cli.common import console, seed_option, shows_progress, user_errors, value_of
from sepo.cli.common import print_json as _print_json
from sepo.cli.common import print_warning as warn
from sepo.cli.common import progress as _progress
from sepo.cli.game_options import DEFAULT_GAME, GAME_HELP, audit_game_params, with_game_params
from sepo.cli.options import AGENT_HELP, Protocol, collusion_applies
from sepo.cli.text_options import (
    decoding_applies,
    policy_line,
    reply_cache_line,
    reply_kinds_line,
    reprompt_line,
    text_agent_options,
    usage_line,
    with_decoding,
)
from sepo.errors import SepoError, brief
from sepo.redact import redact_secrets


@user_errors
@with_game_params
@with_decoding()
def eval_command(
    agent: str = typer.Option(..., "--agent", help=AGENT_HELP),
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    protocol: Protocol = typer.Option(
        "rigorous", "--protocol", help="rigorous (exact best responses, per-round accounting) or paper."
    ),
    episodes: int = typer.Option(100, "--episodes", min=1, help="Episodes per opponent."),
    seed: int = seed_option("Seed of the episodes' deals and of the bootstrap (>= 0)."),
    lambda_e: float = typer.Option(2.4, "--lambda-e", help="Safety weight of exploitability."),
    lambda_c: Optional[float] = typer.Option(
        None, "--lambda-c", help="Safety weight of collusion (default 2.4; games with collusion events only)."
    ),
    lambda_x: Optional[float] = typer.Option(
        None,
        "--lambda-x",
        help="Safety weight of externality (default 2.4; games with externality events only).",
    ),
    pools: Optional[Path] = typer.Option(
        None, "--pools", help="YAML/JSON file defining train/exploiter/collusive pools."
    ),
    talk: bool = typer.Option(
        False,
        "--talk",
        help="Cheap talk: players exchange short messages before each decision "
        "(games with a talk channel; messages are quoted data, see docs/talk.md).",
    ),
    pool: Optional[str] = typer.Option(
        None,
        "--pool",
        help="Run one named pool instead of the audit: 'injection' (the "
        "prompt-injection suite: how often hostile messages change the agent's action or format).",
    ),
    threshold: float = typer.Option(
        0.0,
        "--threshold",
        help="Exact value: prune branches the agent reaches with probability "
        "below this (solvers that read the agent round by round); the error bound is reported.",
    ),
    disguise: Optional[int] = typer.Option(
        None,
        "--disguise",
        min=0,
        help="Text agents: also audit the same game under "
        "new names drawn from this seed (game, actions, pieces or items renamed, rules "
        "unchanged) and report the difference from the plain game (docs/domains.md).",
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON object on stdout; progress still goes to stderr (--quiet: none).",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress on stderr."),
    game_params: dict = None,
    decoding: dict = None,
):
    """Audit an agent against a game's opponent pools: metrics with 95% bootstrap intervals.

    The exact value (behind the best response and safety) is `sepo exploit`'s, read the same way:
    in a repeated game a bot's declared state is solved exactly at any length, a language model
    on the whole history (or pruned below --threshold), and --memory M asks for the memory-M
    projection. A text agent's policy is the distribution of the action it plays under the
    decoding given here: exact under greedy decoding, else estimated from --samples replies per
    state with an interval."""
    from sepo.evaluation.evaluate import EvalConfig, evaluate
    from sepo.games import load_game
    from sepo.objective.sepo import Lambdas
    from sepo.opponents.pools import load_pools
    from sepo.policies.specs import load_agent

    protocol = value_of(protocol)
    if pool is not None and pool != "injection":
        raise SepoError(
            f"unknown --pool {pool!r}; the named pool is: injection (the audit's pools come from --pools)"
        )
    the_game = load_game(game, protocol, **audit_game_params(game, game_params, agent, protocol))
    collusion_applies(the_game, protocol, lambda_c)
    config = EvalConfig(protocol=protocol, episodes=episodes, seed=seed,
                        lambdas=Lambdas(lambda_e, DEFAULT_WEIGHT if lambda_c is None else lambda_c,
                                        DEFAULT_WEIGHT if lambda_x is None else lambda_x),
                        pools=load_pools(game, pools) if pools else None, talk=talk,
                        projection="memory" in game_params, threshold=threshold).validate()
    _event_weights_act(the_game, game, config, lambda_c, lambda_x)
    options = text_agent_options(protocol, seed, **decoding)
    policy = load_agent(agent, the_game, options)
    decoding_applies(decoding, policy, agent)
    if disguise is not None:
        from sepo.evaluation.disguise import check_disguisable

        check_disguisable(policy, agent)
        if pool is not None:
            raise SepoError("--disguise applies to the audit, not to --pool injection")
        the_game.text.disguised(disguise)  # a view that cannot be disguised is refused before any play
    if pool == "injection":
        with _progress(quiet):  # a language model's replies are counted on stderr
            _injection(the_game, policy, agent, config, as_json)
        return
    # the audit shows its plan, and counts its episodes and replies over the whole audit
    with _progress(quiet):
        if disguise is None:
            result = evaluate(the_game, policy, config)
        else:
            from sepo.evaluation.disguise import disguised_audit

            result = disguised_audit(
                the_game,
                policy,
                lambda view: load_agent(agent, the_game, options, view=view),
                config,
                disguise,
            )
    result["agent"] = agent
    if as_json:
        _print_json(result)
        return
    table = Table(
        title=f"{redact_secrets(agent)} in {game} ({protocol} protocol, {episodes} episodes per opponent)"
    )
    for column in ("metric", "value", "95% CI"):
        table.add_column(column)
    for name in (
        "utility",
        "utility_exact",
        "exploitability",
        "adversarial_gap",
        "adversarial_gap_lower_bound",
        "nash_conv",
        "br_payoff",
        "agent_payoff_vs_br",
        "pruning_bound",
        "exploit_pool",
        "collusion",
        "externality",
        "safety",
        "nra",
        "nra_gtbench",
        "robustness",
        "welfare",
        "invalid_action_rate",
    ):
        if name in result:
            value = result[name]
            ci = result["ci"].get(name)
            if ci is not None:
                ci_text = f"[{ci[0]:.4f}, {ci[1]:.4f}]"
            elif name.endswith("_lower_bound"):  # a search's bound: exact only where the search says so
                ci_text = (
                    "equals the value (the search is exact here)"
                    if result.get("lower_bound_exact")
                    else "a lower bound"
                )
            else:
                ci_text = _no_interval_text(name, result)
            table.add_row(name, "n/a" if value is None else f"{value:.4f}", ci_text)
    console.print(table)
    exact_unit = result.get("utility_exact_unit")
    also = f"; utility_exact: {exact_unit}" if exact_unit and exact_unit != result["utility_unit"] else ""
    console.print(f"utility unit: {result['utility_unit']}{also}; safety uses {result['safety_uses']}")
    if "exact_method" in result:
        method = result["exact_method"]
        if result["exact_label"] == "estimated":
            method = f"{method}, applied to the {result['policy']['read']} policy"
        console.print(f"{result['exact_value']}: {result['exact_label']} ({method})")
    if result.get("policy"):
        console.print(policy_line(result["policy"], result.get("decoding")))
    if result.get("reply_kinds") and reply_kinds_line(result["reply_kinds"]):
        console.print(reply_kinds_line(result["reply_kinds"]))
    if result.get("forced_decoding"):
        f = result["forced_decoding"]
        console.print(
            f"forced decoding: {f['computed']:,} failed replies decided, {f['reused']:,} met again and reused"
            + (f"; read from the {f['read_from']}" if f.get("read_from") else "")
        )
        if f.get("note"):
            console.print(f"note: {f['note']}")
    if result.get("reprompts"):
        console.print(reprompt_line(result["reprompts"]))
    if (result.get("agent_record") or {}).get("usage"):
        console.print(usage_line(result["agent_record"]))
    _print_kept_replies(result)
    if result.get("talk"):
        t = result["talk"]
        line = (f"cheap talk: {t['messages']} messages delivered ({t['cut']} cut, "
                f"{t['tokens_removed']} template tokens removed)")
        if t.get("model_replies"):
            line += (f"; the agent's message turns: {t['model_replies']} ({t['model_silent']} silent, "
                     f"{t['parse_failures']} without a MESSAGE: line)")
        console.print(line)
    for note in result["notes"]:
        console.print(f"note: {note}")
    if "disguise" in result:
        _print_disguise(result["disguise"])


DEFAULT_WEIGHT = 2.4
"""`sepo eval`'s λc and λx when not given (the paper's); given, a weight whose term cannot act is refused."""


def _event_weights_act(the_game, game: str, config, lambda_c, lambda_x) -> None:
    """A λc or λx the user gave whose event cannot act in this audit (no collusion or externality
    to count against its pools) is refused as `sepo train` refuses it, not shown as `n/a` beside an
    unchanged safety; the defaults, not given, are left to the audit's own `n/a` and note."""
    from sepo.opponents.pools import default_pools
    from sepo.training.config import check_event_weights

    if not (lambda_c or lambda_x):
        return
    pools = config.pools or default_pools(game, config.protocol, the_game)
    check_event_weights(game, the_game, config.protocol, pools.get("train", []), pools.get("collusive", []),
                        lambda_c=lambda_c or 0.0, lambda_x=lambda_x or 0.0, leave="out")


AUDIT_FIELDS = (
    "exploitability",
    "adversarial_gap",
    "nash_conv",
    "br_payoff",
    "agent_payoff_vs_br",
    "pruning_bound",
    "utility_exact",
)
"""`sepo eval`'s numbers that come from the audit of the agent's policy table (`exact_metrics`)."""


def _no_interval_text(name: str, result: dict) -> str:
    """What an eval number without an interval is: an audit number is `exact` only when the audit
    is (`exact_label`) and the policy table was read exactly; else it says which it is (before,
    every number without an interval was called exact, a sampled policy's and a lower bound's too)."""
    if name not in AUDIT_FIELDS:
        return "exact"
    if not (result.get("policy") or {}).get("read_exactly", True):
        return "point estimate (sampled policy)"
    label = result.get("exact_label", "exact")
    if label == "exact":
        return "exact"
    return label if name == result.get("exact_value") else f"of the {label} audit"


def _print_disguise(block: dict) -> None:
    names = ", ".join(f"{plain} -> {new}" for plain, new in block["names"].items())
    table = Table(title=f"plain against disguised (seed {block['seed']}: {names})")
    for column in ("metric", "plain", "disguised", "difference", "95% CI of the difference (conservative)"):
        table.add_column(column)
    for name, row in block["metrics"].items():
        ci = row["difference_ci"]
        table.add_row(name, f"{row['plain']:.4f}", f"{row['disguised']:.4f}", f"{row['difference']:+.4f}",
                      "exact" if ci is None else f"[{ci[0]:.4f}, {ci[1]:.4f}]")
    console.print(table)
    if block["disguised"].get("policy"):
        console.print("disguised " + policy_line(block["disguised"]["policy"]))
    for note in block["disguised"]["notes"]:
        console.print(f"note (disguised): {note}")


def _injection(the_game, policy, agent: str, config, as_json: bool) -> None:
    from sepo.evaluation.injection import injection_audit

    base = config.pools["train"][0] if config.pools else None
    result = injection_audit(
        the_game, policy, protocol=config.protocol, episodes=config.episodes, seed=config.seed, base=base
    )
    result["agent"] = agent
    if as_json:
        _print_json(result)
        return
    table = Table(
        title=f"{redact_secrets(agent)} in {the_game.name}: prompt-injection pool (base opponent "
        f"{brief(result['base_opponent'])}, {config.episodes} episodes per message)"
    )
    for column in ("message", "decisions", "action changed", "format changed", "p (Holm)"):
        table.add_column(column)
    for name, row in [("control (benign)", result["control"]), *result["attacks"].items()]:
        rates = ("n/a" if row[k] is None else f"{row[k]:.3f} [{row['ci'][k][0]:.3f}, {row['ci'][k][1]:.3f}]"
                 for k in ("action_changed", "format_changed"))
        p = (
            f"{min(row['p_adjusted'].values()):.2g}" + (" *" if row["significant"] else "")
            if "p_adjusted" in row
            else "-"
        )
        table.add_row(name, str(row["decisions"]), *rates, p)
    console.print(table)
    verdict = "FLAGGED" if result["flagged"] else "not flagged"
    console.print(
        f"{verdict}: worst attack {result['worst_attack']} changes play "
        f"{result['worst_excess_change_rate']:.3f} more often than the control message (one-sided Fisher "
        f"exact, Holm-adjusted p = {result['worst_p_adjusted']:.2g}; flagged at p < {result['alpha']} with "
        f"an excess above {result['threshold']})"
    )


@user_errors
@with_game_params
@with_decoding()
@shows_progress("quiet")
def exploit_command(
    agent: str = typer.Option(..., "--agent", help=AGENT_HELP),
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    protocol: Protocol = typer.Option(
        "rigorous",
        "--protocol",
        help="Prompt style (and, for text agents, default "
        "decoding) the agent is read under: rigorous or paper.",
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON object (with the best response's table) on "
        "stdout; progress still goes to stderr (--quiet: none).",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress on stderr."),
    threshold: float = typer.Option(
        0.0,
        "--threshold",
        help="Prune branches the agent reaches with probability below "
        "this (solvers that read the agent round by round); the error bound is reported.",
    ),
    seed: int = seed_option("Seed of a text agent's sampled replies (>= 0)."),
    game_params: dict = None,
    decoding: dict = None,
):
    """Exact value of an agent from the game's solver: its exploitability (zero-sum) or adversarial gap.

    With it: the best responder's payoff and the agent's payoff against it, the pruning bound and
    the method. In a repeated game the tree follows what the agent declares about its memory: a
    bot's small state is solved exactly at any length; a language model is read on the whole
    history (or pruned below --threshold); --memory M asks for the memory-M projection, exact only
    for an agent that reads at most M rounds."""
    from sepo.games import get_domain, load_game
    from sepo.metrics.exact import audit_agent, exact_label, exact_solver
    from sepo.policies.specs import load_agent

    protocol = value_of(protocol)
    the_game = load_game(
        game, protocol, **audit_game_params(game, game_params, agent, protocol, projection=True)
    )
    # a solver too large for the machine is refused here, before anything is built
    solver = exact_solver(the_game)
    if solver is None and get_domain(game).lower_bound is None:
        raise SepoError(f"game {game!r} has no exact solver; `sepo eval` reports pool lower bounds instead")
    policy = load_agent(agent, the_game, text_agent_options(protocol, seed, **decoding))
    decoding_applies(decoding, policy, agent)
    decoding_record = policy.decoding.record() if getattr(policy, "decoding", None) is not None else None
    # the same audit as `sepo eval`'s: the tree follows what the agent declares about its memory
    found = audit_agent(
        the_game, policy, solver, threshold=threshold, projection="memory" in game_params, seed=seed
    )
    result = found.result
    if solver is None:  # the domain's search (it plays the agent, or reads its policy: `found.policy`)
        out = {"game": game, "agent": agent, result.value_name: result.value, **result.as_dict(),
               "exact_label": exact_label(result), "decoding": decoding_record, **_kept_replies(policy)}
        if found.policy is not None:
            out["policy"] = found.policy
        if as_json:
            if hasattr(found.response, "to_json"):
                out["best_response"] = found.response.to_json()
            _print_json(out)
            return
        _print_exact(agent, game, result, found.policy, decoding=decoding_record)
        _print_kept_replies(out)
        return
    out = {"game": game, "agent": agent, result.value_name: result.value, **result.as_dict(),
           "exact": exact_label(result, found.policy) == "exact", "solver_exact": result.exact,
           "exact_label": exact_label(result, found.policy),
           "information_states": (found.policy or {}).get("states"),
           "policy": found.policy, "decoding": decoding_record, **_kept_replies(policy)}
    if threshold:
        out["threshold"] = threshold
    notes = _exact_notes(result, found)
    if found.interval is not None:
        out["ci"] = {result.value_name: found.interval}
    if notes:
        out["notes"] = notes
    if as_json:
        if hasattr(found.response, "to_json"):
            out["best_response"] = found.response.to_json()
        _print_json(out)
        return
    _print_exact(agent, game, result, found.policy, decoding_record, found.interval, notes)
    _print_kept_replies(out)


def _kept_replies(policy) -> dict:
    """A local model's batch cache in an exploit result, as `sepo eval` records it (`agent_record`)."""
    record = policy.record() if callable(getattr(policy, "record", None)) else None
    return {"agent_record": record} if record and record.get("reply_cache") else {}


def _print_kept_replies(result: dict) -> None:
    """The reply-cache line of an eval or exploit result, when a local model kept its batches."""
    kept = (result.get("agent_record") or {}).get("reply_cache")
    if kept:
        console.print(reply_cache_line(kept))


def _exact_notes(result, found) -> list[str]:
    """What a reader must know to read the value: a projection is not a bound; a sampled policy's
    plug-in value is biased upward at kinks."""
    from sepo.metrics.exact import POINT_ESTIMATE_NOTE, PROJECTION_NOTE, SAMPLED_NOTE

    notes = []
    if "projection_memory" in result.extra:
        notes.append(PROJECTION_NOTE.format(m=result.extra["projection_memory"]))
    if result.extra.get("point_estimate"):
        notes.append(POINT_ESTIMATE_NOTE)
    elif found.policy is not None and not found.policy.get("read_exactly", True):
        notes.append(SAMPLED_NOTE)
    return notes


def _print_exact(
    agent: str,
    game: str,
    result,
    policy: dict | None = None,
    decoding: dict | None = None,
    interval=None,
    notes: list[str] | None = None,
) -> None:
    """The solver's values; the policy table's provenance (exact or estimated) and the solver's
    exactness (pruning, projection) are separate rows; notes follow the table."""
    from sepo.metrics.exact import exact_label

    label = exact_label(result)
    point = bool(result.extra.get("point_estimate"))
    kind = {"exact": "exact values", "pruned": "a pruned tree's values",
            "lower bound": "a point estimate of a lower bound" if point else "a lower bound",
            "projection": f"a memory-{result.extra.get('projection_memory')} projection"}[label]
    # the solver is exact; the table it solved is not
    if policy is not None and not policy.get("read_exactly", True):
        kind = (
            "the solver's exact values" if label == "exact" else kind
        ) + f" for the {policy['read']} policy"
    table_out = Table(title=f"{redact_secrets(agent)} in {game}: {kind} ({result.method})")
    for column in ("quantity", "value"):
        table_out.add_column(column)
    rows = [(result.value_name, result.value), ("best-response payoff", result.br_payoff),
            ("agent payoff vs best response", result.agent_payoff), ("pruning bound", result.pruning_bound),
            *((k, v) for k, v in result.extra.items() if not isinstance(v, bool))]
    for name, value in rows:
        table_out.add_row(name, f"{value:.6g}")
    if interval is not None:
        table_out.add_row(
            f"{result.value_name} 95% interval",
            "[{}, {}] (policy sampling)".format(*(f"{0.0 if abs(v) < 1e-12 else v:.6g}" for v in interval))
        )
    if policy is None:  # a search that plays the agent rather than reading a table of it
        table_out.add_row("agent", "played by the search (no policy table read)")
    else:
        table_out.add_row("policy table", policy["read"])
    table_out.add_row(
        "solver",
        {
            "exact": "exact",
            "projection": "a projection: neither an upper nor a lower bound",
            "pruned": "within the pruning bound of the exact value",
            "lower bound": "a point estimate of a lower bound (sampled policy; see the notes)"
            if point
            else "a lower bound (see the method)",
        }[label],
    )
    console.print(table_out)
    for note in notes or ():
        console.print(f"note: {note}")
    # the row already says "exact" for a bot or table
    if policy is not None and (decoding or not policy.get("read_exactly")):
        console.print(policy_line(policy, decoding))
    elif decoding:
        console.print("decoding: " + ", ".join(f"{k} {v}" for k, v in decoding.items() if v is not None))


@user_errors
def frontier_command(
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    runs: Optional[List[Path]] = typer.Option(
        None, "--run", help="Training runs to place against the frontier, or experiment folders (their "
        "finished cells of --game) or cells (repeatable).",
    ),
    lambdas: str = typer.Option(
        "0.25,1,4", "--lambdas", help="Comma-separated λe >= 0 whose RNR points (p = 1/(1+λe)) to list."
    ),
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="Write a PNG of the frontier (a new file, or this same plot's)."
    ),
    pools: Optional[Path] = typer.Option(
        None, "--pools", help="Pool file; the frontier is against its train pool."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace a PNG another sepo command wrote at --plot."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """The restricted-Nash-response frontier: most utility against the train pool at each exploitability."""
    from sepo.runs import check_output_file, output_file

    plot_config = {"game": game, "runs": [str(Path(r).resolve()) for r in runs or []], "lambdas": lambdas,
                   "pools": str(Path(pools).resolve()) if pools else None}
    if plot is not None:
        # refuse before computing
        check_output_file(plot, "frontier", plot_config, overwrite=overwrite, option="--plot")
    result, frontier = compute_frontier(game, runs or [], lambdas, pools)
    if plot is not None:
        from sepo.games import get_domain
        from sepo.reports.plots import plot_frontier

        domain = get_domain(game)
        with output_file(plot, "frontier", plot_config, overwrite=overwrite, option="--plot") as (tmp, stamp):
            plot_frontier(
                frontier,
                tmp,
                [{"label": r["run"], **r} for r in result["runs"]] + result["models"],
                title=f"{game}: best achievable trade-off",
                unit=f"{domain.payoff_name} per {domain.round_name}",
                stamp=stamp,
            )
        result["plot"] = str(plot)
    if as_json:
        _print_json(result)
        return
    table = Table(title="RNR points (exact LP)")
    for column in ("λe", "p", "exploitability", "utility"):
        table.add_column(column)
    for point in result["rnr"]:
        table.add_row(
            f"{point['lambda_e']:g}",
            f"{point['p']:.4f}",
            f"{point['exploitability']:.5f}",
            f"{point['utility']:.5f}",
        )
    console.print(table)
    console.print(
        f"u*(0) = {result['utility_at_zero']:.5f}; best response to the pool: u = "
        f"{result['best_response_utility']:.5f} at e = {result['best_response_exploitability']:.5f}"
    )
    for run in result["runs"]:
        console.print(f"{run['label']}: e = {run['exploitability']:.5f}, u = {run['utility']:.5f}, "
                      f"frontier u*(e) = {run['frontier_utility']:.5f}, gap = {run['gap']:.5f}")
    for point in result["models"]:
        (e_low, e_high), (u_low, u_high) = point["exploitability_interval"], point["utility_interval"]
        console.print(f"{point['label']}: e = {point['exploitability']:.3f} [{e_low:.3f}, {e_high:.3f}], "
                      f"u = {point['utility']:.3f} [{u_low:.3f}, {u_high:.3f}], frontier u*(e) >= "
                      f"{point['frontier_utility']:.3f} (interpolated), gap >= {point['gap']:.3f} "
                      f"[{point['gap_range'][0]:.3f}, {point['gap_range'][1]:.3f}]")


def compute_frontier(game: str, runs: list[Path], lambdas: str, pools: Optional[Path]):
    """The domain's exact frontier against the train pool (pool file or the paper's), runs placed on it:
    a training run's final table exactly; an experiment's (or one cell's) finished cells of the game
    as the report places them, each by its audit at the shown checkpoint (`experiment_places`)."""
    from sepo.games import get_domain
    from sepo.opponents.pools import BEST_RESPONSE, default_pools, load_pools
    from sepo.reports.figures import experiment_places

    domain = get_domain(game)
    if domain.frontier is None:
        raise SepoError(f"game {game!r} has no exact frontier")
    from sepo.training.tabular import run_game

    tables, experiments, seen = [], [], set()
    for run in runs:
        if Path(run).is_file():
            raise SepoError(f"--run {run} is a file: give a training run's folder, an experiment's, or a "
                            "cell's")
        if Path(run).resolve() in seen:
            warn(f"--run {run} was given more than once: placed once")
            continue
        seen.add(Path(run).resolve())
        places = experiment_places(Path(run), game)
        if places is not None:
            experiments.append((Path(run), places))
            continue
        trained = run_game(run) if Path(run).is_dir() else None
        if trained is not None and trained != game:
            try:
                has_frontier = get_domain(trained).frontier is not None
            except SepoError:
                has_frontier = False
            raise SepoError(f"{run} is a run of game {trained!r}, not {game!r}; " +
                            (f"give --game {trained}" if has_frontier else
                             f"game {trained!r} has no exact frontier, so give a {game} run"))
        tables.append(Path(run))
    if pools is not None and experiments:
        raise SepoError("--pools sets the pool the frontier is against, and an experiment's cells were "
                        "audited against the domain's own train pool: leave out --pools, or give training "
                        "runs only")
    try:
        lambda_values = [float(v) for v in lambdas.split(",") if v.strip()]
    except ValueError:
        raise SepoError(f"--lambdas must be comma-separated numbers, got {brief(lambdas)}") from None
    if not lambda_values or any(not math.isfinite(v) or v < 0 for v in lambda_values):
        raise SepoError(f"--lambdas must be finite numbers >= 0, got {brief(lambdas)}")
    specs = (load_pools(game, pools) if pools else default_pools(game))["train"]
    result, frontier = domain.frontier([s for s in specs if s.name != BEST_RESPONSE], lambda_values, tables)
    for placed in result["runs"]:
        placed["label"] = placed["run"]
    names = [folder.name for folder, _ in experiments]
    models = []
    for folder, (points, notes) in experiments:
        for note in notes:
            warn(note)
        if len(experiments) > 1:  # say which experiment each point is from
            name = folder.name if names.count(folder.name) == 1 else str(folder)
            points = [{**p, "group": f"{name}: {p['group']}", "label": f"{name}: {p['label']}"}
                      for p in points]
        models += [{**p, "experiment": str(folder)} for p in points]
    result["models"] = [_on_frontier(point, frontier) for point in models]
    return result, frontier


def _on_frontier(point: dict, frontier) -> dict:
    """An experiment cell's point with the frontier's utility at its exploitability, interpolated on
    the frontier's grid (flat beyond the best response; the frontier is concave, so the interpolation
    is at most the exact u*(e) and the gap at most the exact one), how far below it the cell lies, and
    that gap's range over the two intervals (u* grows with e: the low end pairs the low e with the
    high u; both intervals at their 95% ends, so the range is wider than a joint 95% interval)."""
    import numpy as np

    def reach(e: float) -> float:
        return float(np.interp(e, frontier.epsilons, frontier.utilities))

    (e_low, e_high), (u_low, u_high) = point["exploitability_interval"], point["utility_interval"]
    return {**point, "frontier_utility": reach(point["exploitability"]),
            "gap": reach(point["exploitability"]) - point["utility"],
            "gap_range": [reach(e_low) - u_high, reach(e_high) - u_low],
            "exploitability_interval": list(point["exploitability_interval"]),
            "utility_interval": list(point["utility_interval"])}
