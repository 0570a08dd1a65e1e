#!/usr/bin/env bash
# GPU checks, under 10 minutes on one GPU (each step has its own time limit):
#   1. the GPU-marked tests (pytest -m gpu)
#   2. every norm eager and compiled against torch's fused op of its layout -> results/bench/norms_cuda.csv
#   3. RMSNorm vs LayerNorm in the whole Transformer (transformer_iwslt, synthetic corpus, bf16), fused
#      F.rms_norm vs fused F.layer_norm, eager and compiled -> results/bench/gpu_rmsnorm_speed.csv
#   4. ResNet20 epoch time on a CIFAR-10-shaped task: fp32 / bf16 / channels_last / compile
#      -> results/bench/gpu_epoch_time.csv
#   5. hardware=ddp under torchrun with NCCL (one process per GPU, at most 2) -> results/bench/gpu_ddp.csv
#   6. prints the full-scale presets' commands and their expected wall time on one GPU
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
step "bench norms" 150 python scripts/bench_norms.py --device cuda --rounds 3 --min-time 0.05
rms_dir=$(mktemp -d)
step "rmsnorm speed" 120 python -m normbench -m model=transformer_iwslt dataset=synthetic_translation \
  dataset.max_tokens=4096 dataset.eval_bleu=false norm=ln,rms hardware=cuda_bf16 hardware.compile=false,true \
  max_steps=150 throughput_warmup_steps=30 diagnostics=off logger=local logger.progress_bar=false \
  checkpoint.enabled=false "hydra.sweep.dir=$rms_dir"
python - "$rms_dir" <<'PY' || failed+=("rmsnorm summary")
import csv, sys
with open(f"{sys.argv[1]}/sweep_summary.csv") as f:
    rows = list(csv.DictReader(f))
out = [{"overrides": r["overrides"], "status": r["status"], "tokens_per_s": r.get("perf/tokens_per_s")} for r in rows]
with open("results/bench/gpu_rmsnorm_speed.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(out[0])); w.writeheader(); w.writerows(out)
for r in out:
    print("[gpu_check] rmsnorm speed:", r)
PY
step "epoch time" 120 python scripts/bench_epoch.py --device cuda --out results/bench/gpu_epoch_time.csv
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

cat <<'TXT'
[gpu_check] full-scale presets on one GPU (expected wall time: estimates from the papers' schedules and
[gpu_check] the epoch times above; the data roots must point at real CIFAR-10 / IWSLT14):
  normbench -m experiment=santurkar_vgg dataset.root=<cifar>      # VGG16, 4 arms x seeds
  normbench -m experiment=gn_batch_size dataset.root=<cifar>      # ResNet, 5 norms x 5 batch sizes
  normbench -m experiment=ln_axes dataset.root=<cifar>
  normbench -m experiment=powernorm_stats                          # each arm reads its own data set (see the preset)
  normbench -m experiment=powernorm_mt dataset.root=<iwslt14>     # Transformer, pn vs ln (and bn)
  normbench -m experiment=rmsnorm_speed dataset.root=<iwslt14>    # Transformer, ln / rms / prms
  normbench -m experiment=leaderboard                             # every norm x model, 3 seeds
[gpu_check] see results/README.md for each preset's expected GPU hours.
TXT

if ((${#failed[@]})); then
  echo "[gpu_check] FAILED: ${failed[*]}"
  exit 1
fi
echo "[gpu_check] all passed; results in results/bench/gpu_*.csv and overhead_cuda.csv"
