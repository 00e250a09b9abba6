#!/usr/bin/env bash
# The consensus paper's figure set end to end for one model:
#   scripts/consensus_paper.sh MODEL [OUT]
# MODEL: 'minilm', a converted .safetensors file or a Hugging Face checkpoint folder (GPT-2 / GPT-Neo
# as in the paper). Runs the paper's setting: 100 random prompts of 200 tokens, 10 passes, with and
# without FFN, periodic and redrawn weights, and the theorem settings in continuous time.
set -euo pipefail
model=${1:?usage: scripts/consensus_paper.sh MODEL [OUT]}
out=${2:-runs/consensus-paper}
jaxattn consensus "$model" --prompts 100 --tokens 200 --passes 10 --synthetic-num 256 --t1 40 --out "$out"
echo "figures: $out/passes.png $out/synthetic.png; report: $out/report.md"
