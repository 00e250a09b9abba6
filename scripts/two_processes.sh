#!/usr/bin/env bash
# Two cooperating jaxattn processes on one machine (what a multi-host run does, on localhost):
#   scripts/two_processes.sh sweep.toml runs/my-sweep
# Each process takes every other chunk; the store ends up identical to a single-process run.
set -euo pipefail
config=${1:?usage: scripts/two_processes.sh CONFIG OUT}
out=${2:?usage: scripts/two_processes.sh CONFIG OUT}
port=${JAXATTN_PORT:-12355}
jaxattn sweep "$config" --out "$out" --no-progress --num-processes 2 --process-id 0 --coordinator "localhost:$port" &
first=$!
jaxattn sweep "$config" --out "$out" --no-progress --num-processes 2 --process-id 1 --coordinator "localhost:$port"
wait "$first"
