#!/usr/bin/env bash
# A sweep over several hosts under Slurm: one jaxattn process per host, each taking its own chunks
# of the grid and writing them into the same store (on a shared file system).
#
#   sbatch scripts/slurm_sweep.sh sweep.toml runs/my-sweep
#
# Every process reads its index and the process count from SLURM_PROCID / SLURM_NTASKS; the
# coordinator (process 0's host) comes from JAXATTN_COORDINATOR. Re-submitting the same job resumes.
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-task=8
#SBATCH --time=02:00:00
set -euo pipefail
config=${1:?usage: sbatch scripts/slurm_sweep.sh CONFIG OUT}
out=${2:?usage: sbatch scripts/slurm_sweep.sh CONFIG OUT}
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export JAXATTN_COORDINATOR="${head}:${JAXATTN_PORT:-12355}"
srun jaxattn sweep "$config" --out "$out" --no-progress
