#!/usr/bin/env bash
# The clustering paper's figure set end to end:
#   scripts/clusters_paper.sh [OUT]
# Pictures with 40 tokens as in the paper (V = I in 2-D and 3-D, a good triple with eigenvalues
# 1.35 and -0.07, complex and negative top eigenvalues, d = 1 Boolean attention with 40 tokens),
# cluster counts over 4096 initial conditions per (n, d, beta), and the good-triple fraction of
# 20000 random matrices per dimension up to d = 128 (the paper: about 14% of Ginibre matrices
# at d = 128). Minutes on an accelerator, longer on a CPU.
set -euo pipefail
out=${1:-runs/clusters-paper}
jaxattn clusters --n 40 --n-1d 40 --t1 15 --num 4096 \
  --table-n 10,20,40 --table-d 2,3,4 --table-beta 1,4,9 \
  --good-d 1,2,4,8,16,32,64,128 --good-samples 20000 --ensembles ginibre,symmetric,uniform,positive \
  --out "$out"
echo "figures: $out/polytope.png $out/hyperplanes.png $out/other_spectra.png $out/boolean.png $out/counts.png"
echo "report: $out/report.md"
