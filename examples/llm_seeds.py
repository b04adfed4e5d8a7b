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
change relative to the SFT model. Writes everything to OUT/seeds.json.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


from sepo.reports.experiment import t_interval
from sepo.training.grpo import SEPOEnvironment, LLMSEPOConfig, run_llm_sepo


METHODS = {
    "per-rollout": lambda args: {"penalty": "per-rollout", "lambda_e": args.lambda_e},
    "none": lambda args: {"penalty": "none"},
    "advantage-alignment": lambda args: {"penalty": "none", "method": "advantage-alignment", "aa_beta": args.aa_beta},
}
"""Each method's trainer settings (the run folder is named after the method)."""


def game_params(game: str, pairs: list[str]) -> dict:
    """`NAME=VALUE` pairs converted by the domain's parameter types."""
    from sepo.games.registry import get_domain

    types = {p.name: p.type for p in get_domain(game).params}
    params = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        if name not in types:
            raise SystemExit(f"{game} has no parameter {name!r}; it has: {', '.join(types) or 'none'}")
        params[name] = types[name](text)
    return params


def final_invalid_rate(run_dir: Path) -> float:
    """The invalid rate of the completions of the run's last step."""
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in steps if "invalid_rate" in r and not r.get("final")][-1]["invalid_rate"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sft", required=True, help="the SFT model directory")
    parser.add_argument("--game", default="kuhn")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="a game parameter (repeatable)")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lambda-e", type=float, default=5.0)
    parser.add_argument("--table-samples", type=int, default=64, help="replies per state for each step's policy")
    parser.add_argument("--final-samples", type=int, default=512, help="replies per state for the final measurement")
    parser.add_argument("--methods", nargs="+", default=["per-rollout", "none"], choices=list(METHODS),
                        help="per-rollout (SEPO, --lambda-e), none (payoff-only GRPO), advantage-alignment (--aa-beta)")
    parser.add_argument("--aa-beta", type=float, default=1.0)
    parser.add_argument("--runs-only", action="store_true", help="train the runs only (no SFT baseline, no summary); "
                        "a later call without it reads the finished runs")
    args = parser.parse_args()
    out = Path(args.out)
    params = game_params(args.game, args.param)
    common = dict(model=args.sft, game=args.game, game_params=params, groups=args.groups, group_size=args.group_size,
                  max_new_tokens=args.max_new_tokens, final_samples=args.final_samples)

    runs = []
    for seed in args.seeds:
        for penalty in args.methods:
            config = LLMSEPOConfig(steps=args.steps, seed=seed, table_samples=args.table_samples, **METHODS[penalty](args),
                                   **common)
            run_dir = out / f"{penalty}_seed{seed}"
            done = run_dir / "summary.json"  # a finished run is read, not retrained
            summary = json.loads(done.read_text()) if done.exists() else run_llm_sepo(config, run_dir)
            value = summary["exact_value"]
            invalid = final_invalid_rate(run_dir)
            runs.append({"penalty": penalty, "seed": seed, "value": summary[value], "value_ci": summary[f"{value}_ci"],
                         "policy": summary["policy"], "utility": summary["utility_exact"], "last_step_invalid_rate": invalid})
            low, high = summary[f"{value}_ci"]
            print(f"{penalty:12s} seed {seed}: {value} {summary[value]:.4f} [{low:.4f}, {high:.4f}] "
                  f"({summary['policy']}), utility {summary['utility_exact']:.4f}, invalid rate (last step) {invalid:.3f}",
                  flush=True)

    if args.runs_only:
        return

    from sepo.policies.hf import load_hf_model

    model, tokenizer, _ = load_hf_model(args.sft, None, device="cpu", dtype="float32")
    baseline = SEPOEnvironment(LLMSEPOConfig(**common), tokenizer, None).measure(model)
    value = baseline["exact_value"]
    low, high = baseline[f"{value}_ci"]
    print(f"SFT model: {value} {baseline[value]:.4f} [{low:.4f}, {high:.4f}] ({baseline['policy']}), "
          f"utility {baseline['utility_exact']:.4f}")

    report = {"game": args.game, "game_params": params, "value": value,
              "sft": {k: baseline[k] for k in (value, f"{value}_ci", "policy", "utility_exact")}, "runs": runs, "methods": {}}
    for penalty in args.methods:
        e = [r["value"] for r in runs if r["penalty"] == penalty]
        u = [r["utility"] for r in runs if r["penalty"] == penalty]
        e_mean, e_low, e_high = t_interval(e)
        u_mean, u_low, u_high = t_interval(u)
        change = e_mean / baseline[value] - 1
        report["methods"][penalty] = {value: [e_mean, e_low, e_high], "utility": [u_mean, u_low, u_high],
                                      f"relative_change_in_{value}": change}
        print(f"{penalty:12s} {value} {e_mean:.4f} [{e_low:.4f}, {e_high:.4f}] ({change:+.0%} vs SFT); "
              f"utility {u_mean:.4f} [{u_low:.4f}, {u_high:.4f}]  (95% t-interval over {len(e)} seeds)")
    (out / "seeds.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
