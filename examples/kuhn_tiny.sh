#!/usr/bin/env bash
# Language-model SEPO on Kuhn poker, end to end on a CPU:
# tiny model -> expert traces -> SFT -> SEPO-GRPO (and payoff-only GRPO) -> audits.
# About 15 minutes on 2 cores. Swap the model for a real one (e.g. --model Qwen/Qwen3.5-4B) on a
# machine that can download it; then add --lora and --gpu, and lower the learning rates.
set -euo pipefail
OUT=${1:-runs/kuhn_tiny}
SEPO=${SEPO:-sepo}
mkdir -p "$OUT"

$SEPO model init --out "$OUT/tiny" --seed 0
$SEPO data sft --game kuhn --mixture paper --episodes 60 --seed 0 --out "$OUT/data"
$SEPO sft --model "$OUT/tiny" --data "$OUT/data" --out "$OUT/sft" --epochs 1 --seed 0
$SEPO eval --game kuhn --agent "hf:$OUT/sft/model" --episodes 10 --json > "$OUT/eval_sft.json"
$SEPO train --game kuhn --policy "hf:$OUT/sft/model" --penalty per-rollout --lambda-e 5 --steps 12 --seed 0 --out "$OUT/sepo"
$SEPO train --game kuhn --policy "hf:$OUT/sft/model" --penalty none --steps 12 --seed 0 --out "$OUT/grpo"
$SEPO eval --game kuhn --agent "run:$OUT/sepo" --episodes 10 --json > "$OUT/eval_sepo.json"
$SEPO eval --game kuhn --agent "run:$OUT/grpo" --episodes 10 --json > "$OUT/eval_grpo.json"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
for name in ("sft", "sepo", "grpo"):
    r = json.load(open(f"{out}/eval_{name}.json"))
    print(f"{name:5s} exploitability {r['exploitability']:.4f}  utility {r['utility']:.4f}  invalid {r['invalid_action_rate']:.4f}")
PY
