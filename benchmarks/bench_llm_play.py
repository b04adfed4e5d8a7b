"""Batched LLM play on Kuhn poker: all episodes at once vs one episode at a time.

What it measures
----------------
Decisions per second of a Hugging Face causal LM (`sepo.policies.hf.HFPolicy`) playing Kuhn
poker episodes (6 hands, the paper's length; the model in seat 0 against the `NashApprox` bot)
through `sepo.evaluation.play.play_episodes`, two ways, with the same model object, on the same
seeds, in the same process:

1. batched: `play_episodes` over N seeds at once, for each N in `--sizes` (default 1, 8, 32, 64).
   Every episode advances together; each turn is one `HFPolicy.act` call (one batched `generate`,
   plus one batched forward pass for forced decoding when some replies do not parse) for all
   pending decisions.
2. reference, one episode at a time: `play_episodes` with a single seed, called once per seed,
   over the first `--reference-episodes` seeds (default 16). These seeds begin every batched run,
   so the reference plays the same deals; its rate is per decision, so it compares with every N.

The headline is **sample mode**: the model writes its reply (sampled, temperature 1,
`max_new_tokens` 64) and the reply is parsed strictly; a reply that names no action, two actions
or an illegal one goes to the `forced` failure rule (the paper's forced decoding) and is counted.
**Score mode** (the default `HFPolicy` mode: the greedy reasoning prefix, then the legal answers'
log-probabilities in one forward pass, and a draw) is measured the same way at the largest N; it
parses no reply, so its invalid count is 0 by construction.

For every run the script prints decisions, `act` calls (turns), decisions per call, seconds,
decisions/s, ms per decision, the ratio to the one-at-a-time reference, the time inside model
calls (`generate` and the scoring/forced-decoding forward passes) vs the rest of `play_episodes`,
generated tokens per decision and the share of batched decode steps spent on rows that had already
finished (a batch decodes until its longest reply ends). Cost growth: time per `act` call against
decisions per call, summarised as a log-log slope (0: a call costs the same whatever its batch;
1: no gain from batching).

Validity: every run must play complete games (all hands, zero-sum payoffs) with a legal action at
every decision (checked on each `act` call); the invalid-reply counts (parse failures resolved by
the failure rule) are printed for batched and one-at-a-time play, which should be similar, since
batching must not change what the model writes. Also checked: the score-mode action distribution
at Kuhn's 12 information states, computed in one batch vs one decision per call (left padding must
not change it; max |difference| printed).

The model: by default the script builds the tiny SFT'd model in a temporary directory
(`sepo model init`, `sepo data sft --mixture nash --episodes 40`, `sepo sft --epochs 1`; about
20 s to 100 s on 2 CPU cores), so replies have realistic lengths; `--model DIR` uses an existing one.
Timings are wall clock (`time.perf_counter`) after a warm-up: `--repeats` (default 3) interleaved
rounds (reference, then each N) of which each measurement keeps its fastest, so a change of machine
load hits both sides. torch runs on one CPU thread by default (`--threads`): on a busy machine
(load above the core count) two OpenMP threads wait on each other in every matrix product, which
slows all play and batched play most, so the ratio then measures the machine's scheduling rather
than batching (benchmarks/README.md gives both, measured on one machine). The load average is
printed before and after. The whole run takes about 1 to 3 minutes on 2 CPU cores with the tiny
model, most of it building the model.

Run: `.venv/bin/python benchmarks/bench_llm_play.py [--model DIR] [--sizes 1,8,32,64]
[--reference-episodes 16] [--repeats 3] [--threads 1] [--device cpu]`. Absolute numbers depend
on the machine and its load; compare ratios measured in the same run. The LLM issue aims for
batched >= 5x.
"""
from __future__ import annotations

import argparse
import functools
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sepo.evaluation.play import play_episodes
from sepo.games import load_game
from sepo.games.kuhn.bots import BOTS
from sepo.games.kuhn.exact import canonical_decisions as kuhn_canonical_decisions
from sepo.policies.hf import HFDecoding, HFPolicy

OPPONENT = "NashApprox"
MODEL_CALLS = ("generate", "next_token_logprobs", "sequence_logprobs")


def build_model(workdir: Path, seed: int, threads: int) -> Path:
    """The tiny SFT'd model (see module doc), built with the `sepo` CLI next to this interpreter."""
    sepo = Path(sys.executable).with_name("sepo")
    steps = [
        [str(sepo), "model", "init", "--out", str(workdir / "init"), "--seed", str(seed)],
        [
            str(sepo),
            "data",
            "sft",
            "--mixture",
            "nash",
            "--episodes",
            "40",
            "--seed",
            str(seed),
            "--out",
            str(workdir / "data"),
        ],
        [
            str(sepo),
            "sft",
            "--model",
            str(workdir / "init"),
            "--data",
            str(workdir / "data"),
            "--out",
            str(workdir / "sft"),
            "--epochs",
            "1",
            "--seed",
            str(seed),
        ],
    ]
    for command in steps:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads)) if threads > 0 else None
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            sys.exit(f"building the model failed: {' '.join(command)}\n{done.stderr[-2000:]}")
    return workdir / "sft" / "model"


@dataclass
class Meter:
    """Wraps a policy's `act` and model calls (instance attributes) to count and time them."""

    policy: HFPolicy
    calls: list = field(default_factory=list)  # decisions per act call
    model_seconds: float = 0.0
    generated_tokens: int = 0  # tokens of the replies, up to and including the end-of-turn token
    decode_steps: int = 0  # rows x steps over the batched generate calls
    steps: int = 0  # steps summed over generate calls (each runs until its longest reply ends)
    generate_calls: int = 0
    illegal: int = 0

    def __post_init__(self):
        policy = self.policy
        act, generate = policy.act, policy.generate

        def metered_act(decisions, rng):
            choices = act(decisions, rng)
            self.calls.append(len(decisions))
            self.illegal += sum(c.action not in d.legal_actions for d, c in zip(decisions, choices))
            return choices

        def metered_generate(prompts, n=1, **kwargs):
            out = generate(prompts, n, **kwargs)
            lengths = [len(c.completion_ids) for group in out for c in group]
            self.generated_tokens += sum(lengths)
            # rows per model.generate call, as in HFPolicy.generate
            chunk = max(1, policy.batch_size // n) * n
            for start in range(0, len(lengths), chunk):
                part = lengths[start : start + chunk]
                self.decode_steps += len(part) * max(part)
                self.steps += max(part)
                self.generate_calls += 1
            return out

        policy.act = metered_act
        policy.generate = self._timed(metered_generate)
        for name in MODEL_CALLS[1:]:
            setattr(policy, name, self._timed(getattr(policy, name)))

    def _timed(self, function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.model_seconds += time.perf_counter() - t0

        return wrapper

    def reset(self) -> None:
        self.calls, self.model_seconds, self.illegal = [], 0.0, 0
        self.generated_tokens = self.decode_steps = self.steps = self.generate_calls = 0
        self.policy.reset_counts()

    def detach(self) -> None:
        for name in ("act",) + MODEL_CALLS:
            self.policy.__dict__.pop(name, None)


@dataclass
class Run:
    label: str
    episodes: int
    decisions: int
    calls: int
    seconds: float
    model_seconds: float
    generated_tokens: int
    decode_steps: int
    steps_per_generate: float
    invalid: int
    statuses: Counter

    @property
    def rate(self) -> float:
        return self.decisions / self.seconds

    @property
    def per_call(self) -> float:
        return self.decisions / self.calls


def check_valid(game, records, meter: Meter, label: str) -> None:
    """Complete games, zero-sum payoffs, a legal action at every decision."""
    for record in records:
        if len(record.rounds) != game.hands:
            raise AssertionError(
                f"{label}: episode {record.seed} has {len(record.rounds)} hands, not {game.hands}"
            )
        if any(abs(sum(r.payoffs)) > 1e-9 for r in record.rounds):
            raise AssertionError(f"{label}: episode {record.seed} has a non-zero-sum hand")
        if not record.decisions:
            raise AssertionError(f"{label}: episode {record.seed} has no agent decision")
    if meter.illegal:
        raise AssertionError(f"{label}: {meter.illegal} illegal actions played")


def play(game, meter: Meter, seeds: list[int], *, one_at_a_time: bool, agent_seed: int, label: str) -> Run:
    """Play `seeds`, all at once (one `play_episodes` call) or one episode per call."""
    meter.reset()
    t0 = time.perf_counter()
    if one_at_a_time:
        records = []
        for seed in seeds:
            records += play_episodes(
                game, meter.policy, [BOTS[OPPONENT]()], [seed], agent_seed=agent_seed + seed
            )
    else:
        records = play_episodes(
            game, meter.policy, [BOTS[OPPONENT]() for _ in seeds], seeds, agent_seed=agent_seed
        )
    seconds = time.perf_counter() - t0
    check_valid(game, records, meter, label)
    statuses = Counter(d.parse_status for r in records for d in r.decisions)
    return Run(
        label,
        len(seeds),
        sum(len(r.decisions) for r in records),
        len(meter.calls),
        seconds,
        meter.model_seconds,
        meter.generated_tokens,
        meter.decode_steps,
        meter.steps / max(1, meter.generate_calls),
        sum(n for s, n in statuses.items() if s != "ok"),
        statuses,
    )


HEADER = (f"{'run':<24}{'eps':>4}{'dec':>5}{'calls':>6}{'dec/call':>9}{'seconds':>8}{'dec/s':>7}{'ms/dec':>7}"
          f"{'ratio':>7}{'model%':>7}{'tok/dec':>8}{'steps':>6}{'idle%':>6}  invalid")
COLUMNS = (
    "columns: eps episodes; dec agent decisions; calls HFPolicy.act calls (turns); ratio decisions/s over "
    "the one-at-a-time reference; model% share of the time inside generate and the scoring/forced-decoding "
    "forward passes; tok/dec generated tokens per decision; steps decode steps per batched generate (its "
    "longest reply); idle% decode steps spent on rows already finished; invalid replies (parse failures, "
    "resolved by the failure rule)"
)


def row(run: Run, reference: Run | None) -> str:
    ratio = f"{run.rate / reference.rate:>6.2f}x" if reference is not None else f"{'ref':>7}"
    idle = (
        f"{100 * (1 - run.generated_tokens / run.decode_steps):>5.0f}%" if run.decode_steps else f"{'-':>6}"
    )
    bad = ", ".join(f"{s} {n}" for s, n in sorted(run.statuses.items()) if s != "ok")
    return (
        f"{run.label:<24}{run.episodes:>4}{run.decisions:>5}{run.calls:>6}{run.per_call:>9.1f}{run.seconds:>8.2f}"
        f"{run.rate:>7.2f}{1e3 * run.seconds / run.decisions:>7.0f}{ratio}"
        f"{100 * run.model_seconds / run.seconds:>6.0f}%"
        f"{run.generated_tokens / run.decisions:>8.1f}{run.steps_per_generate:>6.1f}{idle}  "
        f"{run.invalid}/{run.decisions} ({100 * run.invalid / run.decisions:.0f}%{'; ' + bad if bad else ''})"
    )


def slope(runs: list[Run]) -> float:
    """Log-log slope of seconds per act call against decisions per call."""
    x = np.log([r.per_call for r in runs])
    y = np.log([r.seconds / r.calls for r in runs])
    return float(np.polyfit(x, y, 1)[0]) if len(runs) > 1 and np.ptp(x) > 0 else float("nan")


def compare(
    game, meter: Meter, sizes: list[int], reference_seeds: list[int], args, title: str
) -> tuple[Run, list[Run]]:
    """The one-at-a-time reference and a batched run per size; with repeats, rounds are interleaved
    (reference, then each size) and each measurement keeps its fastest round, so a change of machine
    load hits both sides."""
    print()
    print(title)
    print(HEADER)
    best: dict[str, Run] = {}
    for round_ in range(args.repeats):
        jobs = [("one episode at a time", reference_seeds, True)]
        jobs += [(f"batched, N = {n}", list(range(args.seed, args.seed + n)), False) for n in sizes]
        for label, seeds, one_at_a_time in jobs:
            run = play(game, meter, seeds, one_at_a_time=one_at_a_time, agent_seed=args.seed, label=label)
            if label not in best or run.seconds < best[label].seconds:
                best[label] = run
            if round_ == args.repeats - 1:
                reference = best["one episode at a time"]
                print(row(best[label], None if one_at_a_time else reference), flush=True)
    runs = [best[f"batched, N = {n}"] for n in sizes]
    return best["one episode at a time"], runs


def load() -> str:
    try:
        return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        return "load average unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", help="model directory (default: build the tiny SFT'd model in a temporary directory)"
    )
    parser.add_argument(
        "--sizes", default="1,8,32,64", help="comma-separated numbers of episodes played at once"
    )
    parser.add_argument(
        "--reference-episodes", type=int, default=16, help="episodes of the one-at-a-time reference"
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="interleaved rounds of every measurement; the fastest of each is kept",
    )
    parser.add_argument("--no-score", action="store_true", help="skip the score-mode comparison")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads for play and for building the model (default 1; 0: torch's default)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    reference_seeds = list(range(args.seed, args.seed + args.reference_episodes))
    warnings.filterwarnings("ignore")
    started = time.perf_counter()

    import torch
    import transformers

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="bench_llm_play_") as tmp:
        if args.model:
            model_dir = Path(args.model)
        else:
            t0 = time.perf_counter()
            model_dir = build_model(Path(tmp), args.seed, args.threads)
            print(
                f"built the tiny SFT'd model in {time.perf_counter() - t0:.0f} s (init, nash data 40 "
                "episodes, SFT 1 epoch)"
            )
        game = load_game("kuhn")
        policy = HFPolicy(str(model_dir), game.text, mode="sample", device=args.device,
                          decoding=HFDecoding(failure_rule="forced", max_new_tokens=args.max_new_tokens,
                                              seed=args.seed))
        model = policy.model
        print(
            f"Kuhn ({game.hands} hands per episode) vs {OPPONENT}: {model.config.model_type}, "
            f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, config use_cache="
            f"{model.config.use_cache}, {args.device}, torch {torch.__version__} ({torch.get_num_threads()} "
            f"threads), transformers {transformers.__version__}, Python {platform.python_version()}, "
            f"{platform.machine()}"
        )
        print(f"{os.cpu_count()} CPUs, {load()} at the start")
        print(COLUMNS)

        meter = Meter(policy)
        play_episodes(
            game, policy, [BOTS[OPPONENT]() for _ in range(4)], [10_000 + i for i in range(4)], agent_seed=1
        )  # warm-up
        sample_reference, sample_runs = compare(
            game, meter, sizes, reference_seeds, args,
            f"sample mode (the model writes its reply, parsed strictly; failure rule forced), "
            f"max_new_tokens {args.max_new_tokens}, temperature {policy.temperature}")
        meter.detach()

        print()
        print("time per act call by decisions per call (sample mode)")
        print(f"{'run':<30}{'dec/call':>9}{'ms/call':>9}{'ms/dec':>8}")
        for run in [sample_reference] + sample_runs:
            print(
                f"{run.label:<30}{run.per_call:>9.1f}{1e3 * run.seconds / run.calls:>9.1f}"
                f"{1e3 * run.seconds / run.decisions:>8.1f}"
            )
        print(
            "log-log slope of time per call vs decisions per call: "
            f"{slope([sample_reference] + sample_runs):.2f} (0: a call costs the same whatever its batch; 1: "
            "no gain from batching)"
        )

        if not args.no_score:
            scorer = HFPolicy(model, game.text, mode="score", tokenizer=policy.tokenizer,
                              decoding=HFDecoding(max_new_tokens=args.max_new_tokens, seed=args.seed))
            decisions = list(kuhn_canonical_decisions(game.hands).values())
            together = scorer.batch_action_probabilities(decisions)
            alone = [scorer.batch_action_probabilities([d])[0] for d in decisions]
            difference = max(abs(a[k] - b[k]) for a, b in zip(together, alone) for k in a)
            print()
            print(
                f"score mode, 12 Kuhn information states: max |P batched - P one per call| = {difference:.2e}"
            )
            meter = Meter(scorer)
            compare(
                game,
                meter,
                sizes[-1:],
                reference_seeds,
                args,
                "score mode (greedy reasoning prefix, then the legal answers scored in one forward pass; a "
                "draw)",
            )
            meter.detach()

        print()
        best = max(sample_runs, key=lambda r: r.rate)
        print(
            "summary (sample mode): batched/one-at-a-time = "
            + ", ".join(f"N={r.episodes}: {r.rate / sample_reference.rate:.2f}x" for r in sample_runs)
            + f"; best {best.rate:.1f} vs {sample_reference.rate:.1f} decisions/s (the issue aims for >= 5x)"
        )
        print(f"{load()} at the end; total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
