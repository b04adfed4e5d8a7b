"""One real-model study cell, whole, against the study's own cell: CPU minutes on one core each.

What it measures
----------------
The cell of `configs/real.yaml` named by `--domain`, `--stage` and `--seed` (20 SEPO-GRPO steps of
4 x 4 completions, two checkpoints, each audited on validation and test episodes), run by
`sepo experiment run` twice, side by side in the same run, each process on one torch thread:

- **baseline**: the cell as the study runs it (its SFT model; every policy read samples, because
  that model's answer lines leave part of the replies);
- **cheap**: the same cell with the levers of `benchmarks/README.md` that change cost:
  `--model` (an SFT model whose answer lines hold the replies, e.g. built with `sepo sft
  --legal-weight`), `training.llm.answer_rest` and `decoding.answer_rest` `--answer-rest` (the
  policy read from the answer lines' exact probabilities in training and in the audits), and
  with `--lora`, a LoRA adapter trained through the shared-prompt loss at `--lora-learning-rate`.

Each figure is CPU seconds of the `sepo experiment run` process and the cell process it runs
(`os.wait4`, user + system); wall seconds and the load average are printed beside them, since two
processes share the machine with whatever else runs. The goal it reports against: a cell in 15
CPU-minutes or less. It also prints each cell's audited numbers at the checkpoint chosen on
validation, so that a cheaper cell that no longer trains shows as such.

Usage: python benchmarks/bench_study_cell.py --model runs/smollm2-sft-kuhn-legal/model --lora
       [--config configs/real.yaml] [--domain kuhn] [--stage sepo] [--seed 0] [--answer-rest 0.1]
       [--out runs/bench-study-cell]
`--smoke` runs both on the tiny random model for 2 steps (numbers meaningless). An `--out` that
holds an earlier run is refused (a resumed cell's CPU would be counted in part); `--overwrite`
runs both again from the start.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

GOAL_CPU_MINUTES = 15.0


def cell_config(config: dict, args, cheap: bool) -> dict:
    """`config` cut to the one cell, with the cheap cell's levers where `cheap`."""
    data = json.loads(json.dumps(config))
    data["name"] = f"bench-cell-{'cheap' if cheap else 'baseline'}"
    data["domains"] = [d for d in data["domains"] if d["name"] == args.domain]
    if not data["domains"]:
        raise SystemExit(f"{args.config} has no domain {args.domain!r}")
    data["stages"], data["seeds"] = [args.stage], [args.seed]
    data["agents"] = data["agents"][:1]
    llm = data.setdefault("training", {}).setdefault("llm", {})
    if args.smoke:
        data["agents"][0]["model"] = "tiny"
        llm.update(steps=2, groups=2, group_size=2, table_samples=2, max_new_tokens=8)
        data["training"]["checkpoints"] = [1]
        data["decoding"] = {**data.get("decoding", {}), "samples": 2, "max_new_tokens": 8}
        data["episodes"] = {"validation": 1, "test": 1}
    if cheap:
        if args.model and not args.smoke:
            data["agents"][0]["model"] = args.model
        llm["answer_rest"] = args.answer_rest
        data["decoding"] = {**data.get("decoding", {}), "answer_rest": args.answer_rest}
        if args.lora:
            llm.update(lora=True, learning_rate=args.lora_learning_rate)
    return data


def start(config: dict, folder: Path, overwrite: bool) -> subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    command = [sys.executable, "-m", "sepo.cli.main", "--threads", "1", "experiment", "run", str(path),
               "--out", str(folder / "run"), "--workers", "1", "--quiet"]
    if overwrite:
        command.append("--overwrite")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen(command, env=env, stdout=open(folder / "log.txt", "w"), stderr=subprocess.STDOUT)


def chosen_audit(run: Path) -> dict:
    """The cell's result: its test audit at the checkpoint chosen on validation."""
    results = sorted(run.glob("cells/*/result.json"))
    return json.loads(results[0].read_text()) if results else {}


def summary_line(result: dict) -> str:
    """The test audit's headline numbers at the checkpoint chosen on validation."""
    chosen = (result.get("selected") or {}).get("validation")
    rows = {r["metric"]: r for r in result.get("rows", [])
            if r.get("split") == "test" and r.get("checkpoint") == chosen}
    shown = []
    for name in ("exploitability", "adversarial_gap", "utility_exact", "invalid_action_rate"):
        row = rows.get(name)
        if row and row.get("value") is not None:
            interval = f" [{row['low']:.3f}, {row['high']:.3f}]" if row.get("low") is not None else ""
            shown.append(f"{name} {row['value']:.3f}{interval}")
    return f"chosen {chosen}; " + "; ".join(shown) + f"; safety uses {result.get('safety_uses', '?')}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="configs/real.yaml")
    parser.add_argument("--domain", default="kuhn")
    parser.add_argument("--stage", default="sepo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", help="the cheap cell's SFT model (default: the config's)")
    parser.add_argument("--answer-rest", type=float, default=0.1)
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--lora-learning-rate", type=float, default=2e-4)
    parser.add_argument("--out", default="runs/bench-study-cell")
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)

    config = yaml.safe_load(Path(args.config).read_text())
    out = Path(args.out)
    if not args.overwrite and any((out / name / "run").exists() for name in ("baseline", "cheap")):
        raise SystemExit(f"{out} holds an earlier run, whose CPU this run would not count: "
                         "give --overwrite to run both cells again from the start")
    started = time.perf_counter()
    load_before = os.getloadavg()
    procs = {}
    for name, cheap in (("baseline", False), ("cheap", True)):
        process = start(cell_config(config, args, cheap), out / name, args.overwrite)
        procs[name] = (process, time.perf_counter())
    usage, wall = {}, {}
    pending = {p.pid: name for name, (p, _) in procs.items()}
    while pending:
        pid, status, rusage = os.wait4(-1, 0)
        name = pending.pop(pid, None)
        if name is None:
            continue
        procs[name][0].returncode = os.waitstatus_to_exitcode(status)
        usage[name] = rusage.ru_utime + rusage.ru_stime
        wall[name] = time.perf_counter() - procs[name][1]
    load_after = os.getloadavg()
    print(f"# one study cell ({args.domain}, {args.stage}, seed {args.seed}): baseline and cheap together")
    print(f"load average at start {load_before[0]:.2f}, at the end (1/5/15 min) "
          + "/".join(f"{v:.2f}" for v in load_after) + f"; {time.perf_counter() - started:.0f} s in all")
    for name in ("baseline", "cheap"):
        code = procs[name][0].returncode
        state = "ok" if code == 0 else f"FAILED (exit {code}; see {out / name / 'log.txt'})"
        cpu = usage[name]
        print(f"{name:9s} CPU {cpu:8.1f} s = {cpu / 60:5.1f} min, wall {wall[name]:7.0f} s, {state}")
        print(f"          {summary_line(chosen_audit(out / name / 'run'))}")
    if all(procs[n][0].returncode == 0 for n in procs):
        ratio = usage["baseline"] / max(usage["cheap"], 1e-9)
        minutes = usage["cheap"] / 60
        verdict = "met" if minutes <= GOAL_CPU_MINUTES else f"missed by {minutes / GOAL_CPU_MINUTES:.2f}x"
        print(f"cheap / baseline: {ratio:.2f}x less CPU; the {GOAL_CPU_MINUTES:.0f}-minute goal: {verdict}")
    return 0 if all(procs[n][0].returncode == 0 for n in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
