#!/usr/bin/env bash
# Rerun every CPU-scale paper preset and rebuild results/<preset>/ from the runs: the commands,
# wall clock per preset and the commit go into results/<preset>/RUN.txt (each README quotes them).
# On the 2-core machine each preset runs as two sweeps side by side (one per seed, one thread each:
# the presets set hardware.num_threads=1), so a preset's wall time is that of its slower seed.
#
#   bash scripts/reproduce_cpu.sh                       # all six presets, in this order
#   bash scripts/reproduce_cpu.sh powernorm_stats_cpu   # some of them
#
# Outputs: outputs/multirun/repro/<preset>_s<seed>/ (the runs), results/<preset>/ (figures, CSVs,
# claims). Needs the shared data beside the project (../shared/data) or NORMBENCH_DATA.
set -uo pipefail
cd "$(dirname "$0")/.."
export WANDB_MODE=${WANDB_MODE:-offline} WANDB_SILENT=true PYTHONUNBUFFERED=1
presets=("$@")
((${#presets[@]})) || presets=(powernorm_stats_cpu santurkar_vgg_cpu gn_batch_size_cpu powernorm_mt_cpu ln_axes_cpu rmsnorm_speed_cpu)
commit=$(git rev-parse --short HEAD)
total=0
for preset in "${presets[@]}"; do
  out=outputs/multirun/repro
  mkdir -p "$out" "results/$preset"
  start=$(date -u +%H:%M:%S); t0=$SECONDS
  pids=()
  for seed in 0 1; do
    python -m normbench -m "experiment=$preset" "seed=$seed" "hydra.sweep.dir=$out/${preset}_s$seed" \
      > "$out/${preset}_s$seed.log" 2>&1 &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
  wall=$((SECONDS - t0)); total=$((total + wall))
  python -m normbench.analysis.figures_cli "$preset" --runs "$out/${preset}_s0" "$out/${preset}_s1" \
    --out "results/$preset" > "$out/${preset}_figures.log" 2>&1 || status=$?
  {
    echo "preset: $preset"
    echo "commit: $commit"
    echo "start (UTC): $(date -u +%Y-%m-%d) $start; wall clock: $((wall / 60)) min $((wall % 60)) s (two sweeps side by side)"
    echo "commands:"
    echo "  normbench -m experiment=$preset seed=0 hydra.sweep.dir=$out/${preset}_s0 &"
    echo "  normbench -m experiment=$preset seed=1 hydra.sweep.dir=$out/${preset}_s1"
    echo "  normbench-figures $preset --runs $out/${preset}_s0 $out/${preset}_s1 --out results/$preset"
    echo "exit status: $status"
  } > "results/$preset/RUN.txt"
  echo "[reproduce] $preset: $((wall / 60)) min $((wall % 60)) s (status $status)"
done
echo "[reproduce] all: $((total / 60)) min $((total % 60)) s of wall clock"
