#!/usr/bin/env bash
# The equilibria and stability figure set at the papers' scale:
#   scripts/stability_paper.sh [OUT]
# Counts of stable consensus and bipartite consensus equilibria over 100 random symmetric value
# matrices per n (every sign pattern up to n = 10, 512 sampled patterns above), the map (D2) and the
# flow (C2); the weakest stable bipartite equilibrium of 200 random d = 3 models perturbed by growing
# amounts (64 perturbations per size); sphere trajectories for d = 3, n = 10, one and three heads;
# basins of 10000 random initial conditions. Figures: counts.png, perturbation.png,
# bipartite_perturbation.png, sphere_trajectories.png, correlation.png, basins.png.
set -euo pipefail
out=${1:-runs/stability-paper}
jaxattn stability --d 3 --tokens 3,4,5,6,8,10,16 --models 100 --exhaustive-max 10 --patterns 512 \
  --alpha 0.5 --beta 4 --search 200 --perturb-num 64 --basin-num 10000 --basin-n 10 --steps 600 --t1 300 \
  --out "$out"
echo "report: $out/report.md"
