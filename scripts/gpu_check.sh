#!/usr/bin/env bash
# GPU checks, under 10 minutes on one GPU (each step has its own time limit):
#   1. the GPU-marked tests (pytest -m gpu)
#   2. ResNet20 epoch time on a CIFAR-10-shaped task: fp32 / bf16 / channels_last / compile
#      -> results/bench/gpu_epoch_time.csv
#   3. the runner's overhead against a plain loop on the GPU -> results/bench/overhead_cuda.csv
#   4. hardware=ddp under torchrun with NCCL (one process per GPU, at most 2) -> results/bench/gpu_ddp.csv
# Run from anywhere:  bash scripts/gpu_check.sh     (log: results/bench/gpu_check.log)
set -uo pipefail
cd "$(dirname "$0")/.."
export WANDB_MODE=offline WANDB_SILENT=true PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p results/bench
exec > >(tee results/bench/gpu_check.log) 2>&1

python - <<'PY' || exit 1
import torch
assert torch.cuda.is_available(), "gpu_check.sh: no CUDA device visible"
print(f"[gpu_check] torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
PY

failed=()
step() {  # step <name> <seconds> <command...>
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "[gpu_check] === $name (limit ${limit}s)"
  if timeout --signal=INT --kill-after=15 "$limit" "$@"; then
    echo "[gpu_check] === $name: ok in $((SECONDS - t0))s"
  else
    echo "[gpu_check] === $name: FAILED (exit $?) after $((SECONDS - t0))s"
    failed+=("$name")
  fi
}

step "gpu tests" 150 python -m pytest -m gpu -q -p no:cacheprovider
step "epoch time" 240 python scripts/bench_epoch.py --device cuda --out results/bench/gpu_epoch_time.csv
step "overhead" 90 python scripts/bench_overhead.py --device cuda --batch-size 512 --rounds 3 --steps 40 --warmup 10 \
  --out results/bench/overhead_cuda.csv
nproc=$(python -c "import torch; print(min(torch.cuda.device_count(), 2))")
ddp_dir=$(mktemp -d)
step "ddp nccl x$nproc" 90 python -m torch.distributed.run --standalone --nproc_per_node="$nproc" -m normbench \
  hardware=ddp experiment=quickstart dataset.num_train=4096 dataset.num_test=1024 batch_size=256 epochs=2 \
  norm=bn norm.sync=true logger=local logger.progress_bar=false "hydra.run.dir=$ddp_dir"
python - "$ddp_dir" <<'PY' || failed+=("ddp summary")
import csv, json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
row = {k: s.get(k) for k in ("status", "device", "gpu", "world_size", "dist_backend", "norm_sync", "precision",
                            "perf/samples_per_s", "val/acc", "torch", "cuda")}
with open("results/bench/gpu_ddp.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(row)); w.writeheader(); w.writerow(row)
print("[gpu_check] ddp:", row)
assert s["status"] == "finished" and s["dist_backend"] == "nccl", s
PY

if ((${#failed[@]})); then
  echo "[gpu_check] FAILED: ${failed[*]}"
  exit 1
fi
echo "[gpu_check] all passed; results in results/bench/gpu_*.csv and overhead_cuda.csv"
