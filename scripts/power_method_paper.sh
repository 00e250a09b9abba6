#!/usr/bin/env bash
# Reproduce the power-method paper's study (Li & Altafini, Table 1) on the real checkpoints.
# Needs a network (hub ids) or local checkpoint folders; each model is converted once, then
# analysed with the paper's setting: 1000 random Gaussian initial conditions of 10 tokens,
# D1 dynamics (alpha = 1, L2, no FFN), prolonged runs for the shared-weight ALBERTs.
#   usage: scripts/power_method_paper.sh [MODEL_ID ...]   (default: the 13 models of Table 1)
set -euo pipefail
cd "$(dirname "$0")/.."
JAXATTN=${JAXATTN:-.venv/bin/jaxattn}
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=(albert/albert-base-v2 albert/albert-large-v2 albert/albert-xlarge-v2 albert/albert-xxlarge-v2
          google-bert/bert-base-uncased google-bert/bert-large-uncased
          openai-community/gpt2 openai-community/gpt2-medium openai-community/gpt2-large openai-community/gpt2-xl
          EleutherAI/gpt-neo-125m EleutherAI/gpt-neo-1.3B EleutherAI/gpt-neo-2.7B)
fi
mkdir -p runs/paper/models
for id in "${models[@]}"; do
  name=${id##*/}
  file=runs/paper/models/$name.safetensors
  [ -f "$file" ] || "$JAXATTN" convert "$id" --out "$file"
  "$JAXATTN" analyze "$file" --num-init 1000 --n 10 --init gaussian --out "runs/paper/$name"
done
echo "reports: runs/paper/*/report.md"
