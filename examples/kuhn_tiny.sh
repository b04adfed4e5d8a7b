#!/usr/bin/env bash
# Language-model SEPO on Kuhn poker, end to end on a CPU:
# tiny model -> expert traces (paper mixture) -> SFT -> SEPO-GRPO and payoff-only GRPO -> audits.
# About 5 minutes on 2 cores. On a machine that can download weights, replace the tiny model with
# a real one (e.g. `--model Qwen/Qwen3.5-4B` for `sepo sft`) and add --lora --gpu with lower
# learning rates (see docs/llm.md).
set -euo pipefail
OUT=${1:-runs/kuhn_tiny}
SEPO=${SEPO:-sepo}
mkdir -p "$OUT"

$SEPO model init --out "$OUT/tiny" --seed 0
$SEPO data sft --game kuhn --mixture paper --episodes 100 --seed 0 --out "$OUT/data"
$SEPO sft --model "$OUT/tiny" --data "$OUT/data" --out "$OUT/sft" --epochs 2 --lr 3e-3 --seed 0
$SEPO train --game kuhn --policy "hf:$OUT/sft/model" --penalty per-rollout --lambda-e 5 --steps 20 --seed 0 --out "$OUT/sepo" --quiet
$SEPO train --game kuhn --policy "hf:$OUT/sft/model" --method grpo --steps 20 --seed 0 --out "$OUT/grpo" --quiet
for name in sft sepo grpo; do
  agent="run:$OUT/$name"
  $SEPO eval --game kuhn --agent "$agent" --episodes 20 --json > "$OUT/eval_$name.json"
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'model':6s} {'exploitability':>15s} {'utility/hand':>13s} {'95% CI':>18s} {'invalid':>8s}")
for name in ("sft", "sepo", "grpo"):
    r = json.load(open(f"{out}/eval_{name}.json"))
    low, high = r["ci"]["utility"]
    print(f"{name:6s} {r['exploitability']:15.4f} {r['utility']:13.4f}   [{low:.3f}, {high:.3f}] {r['invalid_action_rate']:8.4f}")
PY
