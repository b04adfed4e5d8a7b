"""`sepo train`, `sepo data sft` and `sepo sft`: training with SEPO and its baselines, the
demonstrations for supervised fine-tuning, and the fine-tuning itself."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from sepo.cli.applies import has_talk
from sepo.cli.common import at_least, choice_enum, console, err_console, seed_option, user_errors, value_of
from sepo.cli.common import progress as _progress
from sepo.cli.game_options import DEFAULT_GAME, GAME_HELP, game_params_for, with_game_params
from sepo.cli.layout import SepoCommand
from sepo.cli.options import OVERWRITE_HELP, Protocol, collusion_applies, deprecated
from sepo.cli.text_options import text_agent_options, with_decoding
from sepo.errors import SepoError, brief
from sepo.objective.advantage_alignment import METHODS
from sepo.objective.sepo import PENALTY_MODES, REWARD_SCALINGS

Penalty = choice_enum("Penalty", PENALTY_MODES)

TRAIN_METHODS = ("sepo", "grpo", *(name for name in METHODS if name != "sepo"))
"""`--method`: SEPO, payoff-only GRPO by its name, and the baselines."""
Method = choice_enum("Method", TRAIN_METHODS)

Scaling = choice_enum("Scaling", REWARD_SCALINGS)

ReportTo = choice_enum("ReportTo", ("none", "tensorboard"))

VLLMMode = choice_enum("VLLMMode", ("colocate", "server"))


def _help(name: str) -> str:
    from sepo.training.config import SEPOConfig, help_of

    return help_of(SEPOConfig, name)


METHOD_HELP = (
    "sepo (the default): GRPO on the payoff minus the safety charges of --penalty, each weighted by its "
    "λ; with every λ at 0 (their default) it charges nothing, which is payoff-only GRPO, and the run says "
    "so. grpo: payoff-only GRPO, the baseline, asked for by name (no safety term). advantage-alignment: "
    "payoff-only GRPO plus the opponent-shaping term of Duque et al. 2025 (docs/baselines.md); "
    "`sepo train --method advantage-alignment --help` shows its --aa-beta and --aa-gamma."
)
PENALTY_HELP = ("With --method sepo, how the safety charges enter the reward (default per-rollout): "
                + _help("penalty").replace(" none (payoff-only GRPO).", "")
                + " none: the former spelling of --method grpo.")
PAYOFF_ONLY_NOTE = (
    "note: every safety weight (--lambda-e, --lambda-c, --lambda-x) is 0, so --method sepo charges "
    "nothing: this run is payoff-only GRPO; ask for it by name with --method grpo, or give a weight "
    "for SEPO"
)


def _say_payoff_only() -> None:
    err_console.print(PAYOFF_ONLY_NOTE, highlight=False, markup=False, soft_wrap=True)


def _before_first_stage(reporter, show) -> None:
    """Call `show` just before the first stage `reporter` shows (a run that passed its checks)."""
    stage = reporter.stage

    def first(text: str) -> None:
        reporter.stage = stage
        show()
        stage(text)

    reporter.stage = first


def _method_and_penalty(method: str, penalty: Optional[str], weights: dict) -> tuple[str, str, bool]:
    """The trainer's (method, penalty) for the command line's, and whether the run is payoff-only
    GRPO without being asked for by name. `--method grpo` is the trainer's `sepo` with penalty
    `none` (the run `--penalty none` made, so either spelling resumes the other's run)."""
    if method == "grpo":
        if penalty is not None and penalty != "none":
            raise SepoError(
                f"--method grpo is payoff-only GRPO; --penalty {penalty} applies with --method sepo"
            )
        given = [flag for flag, value in weights.items() if value]
        if given:
            raise SepoError(
                f"--method grpo is payoff-only GRPO: it takes no safety weight ({', '.join(given)}); "
                "give the weights with --method sepo"
            )
        return "sepo", "none", False
    if penalty == "none" and method == "sepo":
        deprecated("--penalty none", "--method grpo (payoff-only GRPO)")
        return method, penalty, False
    penalty = penalty or "per-rollout"
    return method, penalty, method == "sepo" and not any(weights.values())


@user_errors
@with_game_params
@with_decoding(training=True)
def train_command(
    out: Path = typer.Option(
        ...,
        "--out",
        help="Run folder: created fresh, or resumed if it holds this same run (see docs/runs.md).",
    ),
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    policy: str = typer.Option("tabular", "--policy", help="tabular, or hf:MODEL for a language model."),
    method: Method = typer.Option("sepo", "--method", help=METHOD_HELP),
    penalty: Optional[Penalty] = typer.Option(None, "--penalty", help=PENALTY_HELP),
    aa_beta: Optional[float] = typer.Option(None, "--aa-beta", help=_help("aa_beta") + " (>= 0; default 1)"),
    aa_gamma: Optional[float] = typer.Option(
        None, "--aa-gamma", help=_help("aa_gamma") + " (in [0, 1]; default 0.96)"
    ),
    self_play: bool = typer.Option(
        False,
        "--self-play",
        help="tabular: train against the policy itself instead of "
        "the train pool (games whose training environment has self-play).",
    ),
    lambda_e: float = typer.Option(0.0, "--lambda-e", help=_help("lambda_e") + " (>= 0)"),
    lambda_c: float = typer.Option(0.0, "--lambda-c", help=_help("lambda_c") + " (>= 0)"),
    lambda_x: float = typer.Option(0.0, "--lambda-x", help=_help("lambda_x") + " (>= 0)"),
    steps: Optional[int] = typer.Option(
        None, "--steps", min=1, help=_help("steps") + " (2000 tabular, 20 hf); part of the run's config"
    ),
    seed: int = seed_option(_help("seed") + " (>= 0)"),
    groups: Optional[int] = typer.Option(
        None, "--groups", min=1, help=_help("groups") + " (128 tabular, 8 hf)"
    ),
    group_size: Optional[int] = typer.Option(
        None, "--group-size", min=2, help=_help("group_size") + " (8 tabular, 4 hf)"
    ),
    learning_rate: Optional[float] = typer.Option(
        None, "--lr", help=_help("learning_rate") + " (in (0, 1]; 0.05 tabular, 1e-4 hf)"
    ),
    scale_rewards: Optional[Scaling] = typer.Option(
        None, "--scale-rewards", help=_help("scale_rewards") + " (batch tabular, none hf)"
    ),
    lora: bool = typer.Option(
        False, "--lora", help="hf: train a LoRA adapter (merged into the saved model)."
    ),
    beta: float = typer.Option(0.0, "--beta", help="hf: KL coefficient to the starting model (>= 0)."),
    gpu: bool = typer.Option(False, "--gpu", help="hf: use the accelerator instead of the CPU."),
    report_to: ReportTo = typer.Option(
        "none", "--report-to", help="hf: TRL/transformers logging integration."
    ),
    talk: bool = typer.Option(
        False,
        "--talk",
        help="hf: cheap talk in the training prompts (games with a talk channel): "
        "the opponents' lines and hostile messages; the agent's own messages are not trained (docs/talk.md).",
    ),
    talk_injection: Optional[float] = typer.Option(
        None,
        "--talk-injection",
        help="hf, with --talk: share of training "
        "prompts carrying a hostile message of the injection suite (0-1, default 0.25).",
    ),
    final_samples: Optional[int] = typer.Option(
        None,
        "--final-samples",
        min=1,
        help="hf: replies per information state for the final model's played policy (default 2048).",
    ),
    answer_rest: Optional[float] = typer.Option(
        None,
        "--answer-rest",
        help="hf: read the played policy from the exact "
        "probabilities of the answer lines instead of --samples sampled replies "
        "when they leave at most this share of the replies at every prompt (that "
        "share plays the fallback action; the label says how much). Default 0: only "
        "a model whose replies are its answer lines alone (docs/real-models.md).",
    ),
    vllm: Optional[VLLMMode] = typer.Option(
        None,
        "--vllm",
        help="hf, with --gpu: generate the completions and the played-policy replies with "
        "vLLM through TRL: colocate (an engine in each training process, on its GPU) or server (a vLLM "
        "server at --vllm-server URL, default http://localhost:8000, which `sepo train --vllm server --help` "
        "shows); needs vLLM installed (docs/distributed.md).",
    ),
    vllm_server: Optional[str] = typer.Option(
        None, "--vllm-server", help="hf, with --vllm server: the vLLM server's base URL (default "
        "http://localhost:8000)."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
    protocol: Protocol = typer.Option("rigorous", "--protocol", help=_help("protocol")),
    game_params: dict = None,
    decoding: dict = None,
):
    """Train a policy with SEPO (the default), payoff-only GRPO or a baseline; resumes after a kill.

    --method sepo charges each rollout its exploitability, collusion and externality, weighted by
    --lambda-e, --lambda-c and --lambda-x; they are 0 unless given, and with every weight at 0 the
    run is payoff-only GRPO (it says so when it starts). --method grpo asks for payoff-only GRPO by
    name. --out receives config.json, checkpoints, metrics.jsonl, the final policy (policy.json, or
    model/ for hf), summary.json and curves.png, listed in its manifest sepo-run.json (docs/runs.md).
    Unset options take the trainer config's defaults."""
    from sepo.games import get_domain
    from sepo.runs import open_run

    hf = policy.startswith("hf:")
    if not hf and policy != "tabular":
        raise SepoError(f"unknown --policy {brief(policy)}; use tabular or hf:MODEL")
    for option, value in (
        ("--lambda-e", lambda_e),
        ("--lambda-c", lambda_c),
        ("--lambda-x", lambda_x),
        ("--beta", beta),
    ):
        at_least(value, 0, option)
    if learning_rate is not None:
        from sepo.training.config import check_learning_rate

        check_learning_rate(learning_rate)
    weights = {"--lambda-e": lambda_e, "--lambda-c": lambda_c, "--lambda-x": lambda_x}
    method_name, penalty_name, payoff_only = _method_and_penalty(
        value_of(method), value_of(penalty) if penalty is not None else None, weights)
    given = {"game": game, "game_params": game_params_for(game, game_params), "penalty": penalty_name,
             "lambda_e": lambda_e, "lambda_c": lambda_c, "lambda_x": lambda_x, "seed": seed, "steps": steps,
             "groups": groups, "group_size": group_size, "learning_rate": learning_rate,
             "scale_rewards": value_of(scale_rewards) if scale_rewards is not None else None,
             "protocol": value_of(protocol)}
    given = {k: v for k, v in given.items() if v is not None}
    if method_name != "sepo":
        given.update(
            method=method_name,
            **{k: v for k, v in (("aa_beta", aa_beta), ("aa_gamma", aa_gamma)) if v is not None},
        )
    elif aa_beta is not None or aa_gamma is not None:
        raise SepoError("--aa-beta and --aa-gamma apply with --method advantage-alignment only")
    if self_play and hf:
        raise SepoError(
            "--self-play trains tabular policies only; a language model trains against the train pool"
        )
    if talk_injection is not None and not talk:
        raise SepoError("--talk-injection applies with --talk only")
    if talk and not has_talk(game):
        raise SepoError(f"game {game!r} has no cheap-talk channel; --talk does not apply to it")
    if (vllm is not None or vllm_server) and not hf:
        what = "--vllm generates" if vllm is not None else "--vllm-server names the vLLM server of"
        raise SepoError(f"{what} a language model's replies: it applies with --policy hf:MODEL")
    if talk and not hf:
        raise SepoError(
            "--talk trains language models only (--policy hf:MODEL): a tabular policy reads only the "
            "information state, which no message changes"
        )
    if talk:
        given.update(talk=True, **({"talk_injection": talk_injection} if talk_injection is not None else {}))
    from sepo.games import load_game
    from sepo.metrics.exact import check_exact_size

    the_game = load_game(game, given["protocol"], **given["game_params"])
    collusion_applies(the_game, given["protocol"], lambda_c)
    check_exact_size(the_game)  # training reads the exact solver: refuse before any folder is made
    if hf:
        from sepo.training.grpo import LLMSEPOConfig, run_llm_sepo

        text = text_agent_options(given["protocol"], seed, **decoding)
        d = text.decoding
        config = LLMSEPOConfig(
            model=policy[3:],
            lora=lora,
            beta=beta,
            use_cpu=not gpu,
            report_to=value_of(report_to),
            temperature=d.temperature,
            top_p=d.top_p,
            top_k=d.top_k,
            max_new_tokens=d.max_new_tokens,
            repetition_penalty=d.repetition_penalty,
            enable_thinking=d.enable_thinking,
            **({"table_samples": text.samples} if "samples" in decoding else {}),
            **({"final_samples": final_samples} if final_samples is not None else {}),
            **({"answer_rest": answer_rest} if answer_rest is not None else {}),
            **({"vllm": value_of(vllm)} if vllm is not None else {}),
            **({"vllm_server": vllm_server} if vllm_server else {}),
            **given,
        )
        config.validate()  # every check (sizes, λ that cannot act) before the run's first line
        reporter = _progress(quiet)
        # the run's first line, once it has passed its checks, says what it trains
        if payoff_only and not quiet:
            _before_first_stage(reporter, _say_payoff_only)
        with reporter:
            try:
                summary = run_llm_sepo(config, out, overwrite=overwrite)
            except KeyboardInterrupt:  # the stop's last line says what is kept and how to go on
                from sepo.runs import STOP_NOTES

                STOP_NOTES.append(_kept_training(out, config.steps))
                raise
        if summary["extended_from"] is not None:
            console.print(
                f"extended the finished run from {summary['extended_from']} to {config.steps} steps "
                "(allowed: the LLM trainer's learning rate is constant and its draws are keyed by step)"
            )
        value = summary.get("exact_value")
        value = value if isinstance(value, str) else "exploitability"
        interval = summary.get(f"{value}_ci")
        low, high = (
            map(_shown, interval)
            if isinstance(interval, list) and len(interval) == 2
            else (float("nan"),) * 2
        )
        complete = " (already complete)" if summary.get("already_complete") else ""
        console.print(
            f"done: {summary['steps']} steps{complete}; {value} {_shown(summary.get(value)):.4f} "
            f"{escape(f'[{low:.4f}, {high:.4f}]')} of the played policy ({summary.get('policy')}; replies "
            f"that do not parse play the {summary.get('failure_rule', 'fallback')} rule, as in training: "
            f"`sepo eval --failure-rule fallback` reads the same policy); model at {out / 'model'}"
        )
        return
    model_only = [f"--{name.replace('_', '-')}" for name in decoding]
    model_only += [flag for flag, given in (
        ("--lora", lora), ("--beta", beta != 0), ("--gpu", gpu),
        ("--report-to", value_of(report_to) != "none"), ("--answer-rest", answer_rest is not None)) if given]
    if model_only:  # given for a table they would change nothing: refused, not ignored
        raise SepoError(f"{model_only[0]} applies to language models (--policy hf:MODEL) only")
    if final_samples is not None:
        raise SepoError(
            "--final-samples applies to language models (--policy hf:MODEL) only: a tabular policy's final "
            "table is read exactly"
        )
    from sepo.reports.plots import plot_runs
    from sepo.training.tabular import TabularSEPOConfig, TabularSEPOTrainer

    config = TabularSEPOConfig(**given, **({"self_play": True} if self_play else {})).validate()
    domain = get_domain(game)
    with open_run(out, "train", {"policy": "tabular", **config.record()}, overwrite=overwrite) as run:
        trainer = TabularSEPOTrainer(config, run)
        value = trainer.env.solver.value_name
        with _progress(quiet) as bar:
            if payoff_only and not quiet:  # the run's first line says what it trains
                _say_payoff_only()
            task = bar.add_task(f"training {out.name}", total=config.steps)
            summary = trainer.train(on_step=lambda record: bar.update(task, completed=record["step"] + 1,
                                                                      description=f"e={record[value]:.4f}"))
        if not run.was_complete:
            plot_runs([out], run.path("curves.png"))
    resumed = (
        " (resumed)"
        if run.resumed and not run.was_complete
        else " (already complete)"
        if run.was_complete
        else ""
    )
    if summary.get("value_exact") == 0.0:  # a domain whose trained value is a bound says so in its metrics
        value += (
            " (an upper bound, not exact)" if summary.get("value_upper_bound") else " (a bound, not exact)"
        )
    console.print(
        f"done: {summary['steps']} steps{resumed}; {value} {_shown(summary[value.split(' ')[0]]):.5f}, "
        f"utility vs train pool {_shown(summary['utility']):.4f} {domain.payoff_name}/{domain.round_name}; "
        f"policy at {out / 'policy.json'}"
    )


def _kept_training(out: Path, steps: int) -> str:
    """What a stopped language-model run keeps: its latest checkpoint (`OUT/trainer/checkpoint-N`),
    from which the same command resumes, or with every step trained, the model the same command
    measures without training again."""
    saved = sorted(int(p.name.split("-", 1)[1]) for p in (out / "trainer").glob("checkpoint-*")
                   if p.is_dir() and p.name.split("-", 1)[1].isdigit())
    if not saved:
        return "no training checkpoint was saved yet: the same command starts the training again"
    if saved[-1] >= steps:
        return (
            f"all {steps} steps are trained and saved (checkpoint at step {saved[-1]} in {out / 'trainer'}): "
            "the same command measures the trained model's played policy without training again"
        )
    return (
        f"checkpoint at step {saved[-1]} saved in {out / 'trainer'}: the same command resumes the training "
        f"from step {saved[-1]} of {steps}"
    )


def _shown(number) -> float:
    """A number of a run summary as printed: NaN, which a summary file holds as null, for anything else."""
    from sepo.training.checkpoint import is_number

    return float(number) if is_number(number) else float("nan")


data_app = typer.Typer(help="Training data: expert traces for SFT.", no_args_is_help=True)


@data_app.command("sft", cls=SepoCommand)
@user_errors
@with_game_params
def data_sft_command(
    out: Path = typer.Option(
        ..., "--out", help="Folder for the Hugging Face dataset (a new folder, or this same dataset's)."
    ),
    game: str = typer.Option(DEFAULT_GAME, "--game", help=GAME_HELP),
    mixture: Optional[str] = typer.Option(
        None,
        "--mixture",
        help="A demonstration mixture of the game (default: the "
        "game's own default, the first it lists: the paper's where the game has one).",
    ),
    episodes: int = typer.Option(200, "--episodes", min=1, help="Episodes per driving opponent."),
    seed: int = seed_option("Seed of the traces and of the train/validation split (>= 0)."),
    protocol: Protocol = typer.Option("rigorous", "--protocol", help="Prompt style."),
    talk: bool = typer.Option(
        False,
        "--talk",
        help="Opponents talk (their lines; in half of the episodes a hostile "
        "message of the injection suite) and the demonstrations ignore it (games with a talk channel).",
    ),
    answer_only: bool = typer.Option(
        False,
        "--answer-only",
        help="The reply is the answer line alone, without the "
        "reason (a model trained on it is read exactly, and its replies are short).",
    ),
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
        raise SepoError(
            f"unknown --mixture {brief(mixture)} for {game}; use one of: {', '.join(domain.demos())}"
        )
    params = game_params_for(game, game_params)
    # the game's own checks, before anything is written or removed
    load_game(game, value_of(protocol), **params)
    config = {"game": game, "game_params": params, "mixture": mixture, "episodes": episodes, "seed": seed,
              "protocol": value_of(protocol)}
    if talk:
        if not has_talk(game):
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
                traces = generate_traces(
                    game,
                    mixture,
                    episodes,
                    seed,
                    value_of(protocol),
                    on_episode=lambda: bar.advance(task),
                    talk=talk,
                    answer_only=answer_only,
                    **params,
                )
                bar.stage(f"writing the dataset to {out}")
                with run.staged_contents() as tmp:
                    summary = asdict(write_sft_dataset(traces, tmp, seed))
            run.complete(summary)
    complete = " (already complete)" if run.finished else ""
    console.print(
        f"{summary['examples']} examples ({summary['train']} train, {summary['validation']} validation) of "
        f"the {mixture} mixture at {out}"
        f"{complete}; by strategy: "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary["by_strategy"].items()))
    )


@user_errors
def sft_command(
    model: str = typer.Option(..., "--model", help="Model folder or hub id."),
    data: list[Path] = typer.Option(
        ...,
        "--data",
        help="Dataset folder from `sepo data sft`; repeat it to train on "
        "several (e.g. one per domain), their splits concatenated.",
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Run folder (created fresh, or resumed if it holds this same run); the model goes to OUT/model.",
    ),
    epochs: float = typer.Option(
        2.0, "--epochs", help="Passes over the training split (> 0; ignored with --max-steps)."
    ),
    max_steps: int = typer.Option(
        -1, "--max-steps", min=-1, help="Stop after this many steps (overrides epochs); -1: use epochs."
    ),
    batch_size: int = typer.Option(16, "--batch-size", min=1, help="Examples per step."),
    learning_rate: float = typer.Option(
        2e-3, "--lr", help="Learning rate in (0, 1]; 2e-3 suits the tiny model, about 2e-5 4B models."
    ),
    lora: bool = typer.Option(False, "--lora", help="Train a LoRA adapter (merged into the saved model)."),
    legal_weight: float = typer.Option(
        0.0,
        "--legal-weight",
        help="Add this weight times the legal-reply term: along each "
        "demonstrated reply, -log P(the next token keeps the reply one of the decision's legal "
        "answers). Needs --answer-only data. 0: cross-entropy alone.",
    ),
    seed: int = seed_option("Seed of the data order and initialisation (>= 0)."),
    gpu: bool = typer.Option(False, "--gpu", help="Use the accelerator instead of the CPU."),
    overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
):
    """Supervised fine-tuning with TRL's SFTTrainer, loss on the assistant replies; resumes after a kill."""
    from sepo.training.sft import SFTRunConfig, run_sft

    if max_steps == 0:
        raise SepoError("--max-steps must be >= 1, or -1 to train for --epochs")
    config = SFTRunConfig(
        model=model,
        data=str(data[0]) if len(data) == 1 else [str(d) for d in data],
        epochs=epochs,
        max_steps=max_steps,
        batch_size=batch_size,
        learning_rate=learning_rate,
        lora=lora,
        seed=seed,
        use_cpu=not gpu,
        legal_weight=legal_weight,
    )
    with _progress(quiet) as bar:
        task = bar.add_task("SFT steps", total=None)
        result = run_sft(
            config,
            out,
            overwrite=overwrite,
            on_stage=bar.stage,
            on_log=lambda step, total, loss: bar.update(
                task,
                completed=step,
                total=total,
                description=f"SFT steps (loss {loss:.4f})" if loss is not None else None,
            ),
        )
    loss = f"; final train loss {result.train_loss:.4f}" if result.train_loss is not None else ""
    complete = " (already complete)" if result.already_complete else ""
    console.print(f"done: {result.steps} SFT steps{complete}{loss}; model at {result.model}")
