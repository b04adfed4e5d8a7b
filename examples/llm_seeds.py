"""SEPO-GRPO versus payoff-only GRPO from the same SFT model, over several seeds, with intervals.

    .venv/bin/python examples/llm_seeds.py --sft runs/kuhn_tiny/sft/model --out runs/seeds [--seeds 0 1 2]
    .venv/bin/python examples/llm_seeds.py --game ipd --param rounds=3 --param memory=1 --sft MODEL --out OUT

Any domain with a language-model training environment (`--game`, its parameters as `--param
NAME=VALUE`). For each seed, trains each of `--methods` (default `per-rollout` with λe and `none`;
also `advantage-alignment` with `--aa-beta`, docs/baselines.md) for `--steps` steps and
measures the final model's policy as it plays it: the distribution of its parsed action at
temperature 1 (the training decoding), estimated from `final_samples` replies per state at
training prompts, with the solver's exact value of that policy (Kuhn's exploitability, the
adversarial gap of general-sum games), its resampling interval, and the exact utility against
the train pool. Prints each run, then per method the mean, a 95% t-interval over seeds, and the
change relative to the SFT model. Writes everything to OUT/seeds.json (replaced whole: a stop
never leaves a torn file; a seeds.json this script did not write is refused, not replaced).

Every run goes through `run_llm_sepo`, which reads a finished run back only when its recorded
config is this one (a run trained with other --steps is refused, not reported as this one). Bad
arguments are one line and exit status 2, before any model is loaded.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sepo.errors import SepoError, brief, one_line
from sepo.reports.experiment import t_interval
from sepo.training.grpo import LLMSEPOConfig, SEPOEnvironment, run_llm_sepo

METHODS = {
    "per-rollout": lambda args: {"penalty": "per-rollout", "lambda_e": args.lambda_e},
    "none": lambda args: {"penalty": "none"},
    "advantage-alignment": lambda args: {
        "penalty": "none",
        "method": "advantage-alignment",
        "aa_beta": args.aa_beta,
    },
}
"""Each method's trainer settings (the run folder is named after the method)."""


def game_params(game: str, pairs: list[str]) -> dict:
    """`NAME=VALUE` pairs converted by the domain's parameter types (the CLI's own rules)."""
    from sepo.cli.game_options import game_params_for

    raw = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise SepoError(f"--param {brief(pair)} is not NAME=VALUE")
        if name in raw:
            raise SepoError(f"--param {name} is given twice")
        raw[name.strip().replace("-", "_")] = text
    return game_params_for(game, raw)


def final_invalid_rate(run_dir: Path) -> float:
    """The invalid rate of the completions of the run's last step."""
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in steps if "invalid_rate" in r and not r.get("final")][-1]["invalid_rate"]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit status 2, as sepo's own commands give them."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


RESULTS = "seeds.json"
RESULT_KEYS = {"game", "game_params", "value", "sft", "runs", "methods"}


def check_out(out: Path) -> None:
    """--out is a folder (or a new one) and its seeds.json, if any, is this script's."""
    from sepo.inputs import read_text
    from sepo.runs import check_out_path

    check_out_path(out)
    if out.exists() and not out.is_dir():
        raise SepoError(f"--out {brief(str(out), 300)} is a file; name a folder")
    results = out / RESULTS
    if results.is_dir() or results.is_symlink():
        raise SepoError(f"{brief(str(results), 300)} is not a file this script wrote; not touching it")
    if results.exists():
        try:
            data = json.loads(read_text(results, "seeds file"))
        except (SepoError, ValueError):
            data = None
        if not (isinstance(data, dict) and set(data) == RESULT_KEYS):
            raise SepoError(
                f"{brief(str(results), 300)} exists and was not written by this script; not touching it "
                "(use another --out)"
            )


def configs(args, params: dict) -> list[tuple[str, int, object]]:
    """(method, seed, LLMSEPOConfig) of every run, each validated before any is trained."""
    from sepo.policies.specs import check_model_source

    for name, values in (("--seeds", args.seeds), ("--methods", args.methods)):
        repeated = sorted({v for v in values if values.count(v) > 1})
        if repeated:  # a repeated seed would count one run twice in the t-interval
            raise SepoError(f"{name} repeats {', '.join(map(str, repeated))}; give each once")
    check_model_source(args.sft)
    common = dict(
        model=args.sft,
        game=args.game,
        game_params=params,
        groups=args.groups,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        final_samples=args.final_samples,
    )
    out = []
    for seed in args.seeds:
        for method in args.methods:
            config = LLMSEPOConfig(steps=args.steps, seed=seed, table_samples=args.table_samples,
                                   **METHODS[method](args), **common)
            out.append((method, seed, config.validate()))
    LLMSEPOConfig(**common).validate()  # the SFT baseline's measurement
    return out


def main(argv: list[str] | None = None) -> None:
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft", required=True, help="the SFT model directory")
    parser.add_argument("--game", default="kuhn")
    parser.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE", help="a game parameter (repeatable)"
    )
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lambda-e", type=float, default=5.0)
    parser.add_argument(
        "--table-samples", type=int, default=64, help="replies per state for each step's policy"
    )
    parser.add_argument(
        "--final-samples", type=int, default=512, help="replies per state for the final measurement"
    )
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["per-rollout", "none"],
        choices=list(METHODS),
        help="per-rollout (SEPO, --lambda-e), none (payoff-only GRPO), advantage-alignment (--aa-beta)",
    )
    parser.add_argument("--aa-beta", type=float, default=1.0)
    parser.add_argument(
        "--runs-only",
        action="store_true",
        help="train the runs only (no SFT baseline, no summary); "
        "a later call without it reads the finished runs",
    )
    args = parser.parse_args(argv)
    try:
        out = Path(args.out)
        check_out(out)
        params = game_params(args.game, args.param)
        planned = configs(args, params)
        run(args, out, params, planned)
    except SepoError as error:
        print(f"error: {one_line(str(error))}", file=sys.stderr)
        raise SystemExit(2) from None


def run(args, out: Path, params: dict, planned: list) -> None:
    from sepo.runs import atomic_write_json

    common = dict(
        model=args.sft,
        game=args.game,
        game_params=params,
        groups=args.groups,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        final_samples=args.final_samples,
    )
    runs = []
    for penalty, seed, config in planned:
        run_dir = out / f"{penalty}_seed{seed}"
        summary = run_llm_sepo(config, run_dir)  # a finished run of this config is read back, never retrained
        value = summary["exact_value"]
        invalid = final_invalid_rate(run_dir)
        runs.append(
            {
                "penalty": penalty,
                "seed": seed,
                "value": summary[value],
                "value_ci": summary[f"{value}_ci"],
                "policy": summary["policy"],
                "utility": summary["utility_exact"],
                "last_step_invalid_rate": invalid,
            }
        )
        low, high = summary[f"{value}_ci"]
        print(
            f"{penalty:12s} seed {seed}: {value} {summary[value]:.4f} [{low:.4f}, {high:.4f}] "
            f"({summary['policy']}), utility {summary['utility_exact']:.4f}, invalid rate (last step) "
            f"{invalid:.3f}",
            flush=True,
        )

    if args.runs_only:
        return

    from sepo.policies.hf import load_hf_model

    model, tokenizer, _ = load_hf_model(args.sft, None, device="cpu", dtype="float32")
    baseline = SEPOEnvironment(LLMSEPOConfig(**common), tokenizer, None).measure(model)
    value = baseline["exact_value"]
    low, high = baseline[f"{value}_ci"]
    print(f"SFT model: {value} {baseline[value]:.4f} [{low:.4f}, {high:.4f}] ({baseline['policy']}), "
          f"utility {baseline['utility_exact']:.4f}")

    report = {
        "game": args.game,
        "game_params": params,
        "value": value,
        "sft": {k: baseline[k] for k in (value, f"{value}_ci", "policy", "utility_exact")},
        "runs": runs,
        "methods": {},
    }
    for penalty in args.methods:
        e = [r["value"] for r in runs if r["penalty"] == penalty]
        u = [r["utility"] for r in runs if r["penalty"] == penalty]
        e_mean, e_low, e_high = t_interval(e)
        u_mean, u_low, u_high = t_interval(u)
        change = e_mean / baseline[value] - 1 if baseline[value] else None  # none relative to a value of 0
        report["methods"][penalty] = {value: [e_mean, e_low, e_high], "utility": [u_mean, u_low, u_high],
                                      f"relative_change_in_{value}": change}
        versus = "SFT value 0: no relative change" if change is None else f"{change:+.0%} vs SFT"
        print(f"{penalty:12s} {value} {e_mean:.4f} [{e_low:.4f}, {e_high:.4f}] ({versus}); "
              f"utility {u_mean:.4f} [{u_low:.4f}, {u_high:.4f}]  (95% t-interval over {len(e)} seeds)")
    atomic_write_json(out / RESULTS, report)  # replaced whole: a reader sees the old file or the new one


if __name__ == "__main__":
    main()
