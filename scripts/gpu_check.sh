#!/usr/bin/env bash
# Every GPU question in one run on one GPU, within 9 minutes (540 s) of device time: each step has
# its own time limit (SIGINT at the limit, SIGKILL 5 s later), and limits plus kill-afters add up to
# 536 s, torch.compile included. The expected times are ESTIMATES for one H200 with a cold compile
# cache (no GPU has run this yet); the first real run replaces them (the log times every step).
#
#   step                  limit  expected  what                                           -> results/bench/
#   0 versions               20     ~10 s  GPU, driver, CUDA, cuDNN, torch; torch.cuda.set_sync_debug_mode("warn")
#                                          reports one .item() (log header only)
#   1 gpu tests              70     ~45 s  pytest -m gpu: every norm under bf16 autocast on CUDA, a compiled
#                                          bf16 channels_last ResNet8 run, divergence check without a sync
#   2 bench norms            75     ~65 s  all 12 norms (ln, rms first) x images / sequences x eager / compiled
#                                          (24 small compiles, ~2-3 s each) vs torch's fused op, 3 rounds x 0.02 s
#                                                                                  norms_cuda.csv
#   3 rmsnorm speed          95     ~80 s  the IWSLT14 recipe's Transformer (d_model 512, FFN 1024, 4 heads,
#                                          pre-norm, Adam) at 3+3 layers instead of 6+6 (two cold compiles of
#                                          6+6 would not fit), synthetic corpus, bf16, 4096 tokens per batch,
#                                          60 steps (20 warm-up): eager ln, eager rms, compiled ln, compiled rms
#   3b rmsnorm summary        8      ~3 s                                          gpu_rmsnorm_speed.csv
#   4 epoch time             70     ~55 s  ResNet20, 50,000 + 2,000 synthetic CIFAR-shaped images, batch 512,
#                                          2 epochs (1 timed): fp32, bf16, fp32+cl, bf16+cl, bf16+cl+compile
#                                                                                  gpu_epoch_time.csv
#   5 ddp                    50     ~30 s  2 ranks under torchrun, ResNet20 + BN with norm.sync=true, global
#                                          batch 256 sharded 2 x 128, 2 epochs of 8 steps: NCCL one GPU per
#                                          rank with >= 2 GPUs; gloo, both ranks on cuda:0, with one GPU
#   5b ddp summary            8      ~3 s                                          gpu_ddp.csv
#   6 overhead               55     ~45 s  bench_overhead.py --device cuda: plain loop vs runner (diagnostics
#                                          off / default / full, W&B offline), batch 512, 2 rounds x 13 timed
#                                          steps                                   overhead_cuda.csv
#   7 sync debug             35     ~20 s  sync_debug.py: ResNet20 and transformer_tiny, 1 warm-up + 3 counted
#                                          training steps under set_sync_debug_mode("warn") gpu_host_syncs.csv
#   total: limits 486 + 10 x 5 s kill-after = 536 s (expected ~356 s; the first import of torch and
#   the CUDA context on a fresh machine are in step 0's 20 s, which writes the GPU count first)
#
# Every CSV is written row by row as its step measures (a step cut at its limit leaves the rows it
# finished); every row ends with the columns gpu, driver, cuda, cudnn, torch (scripts/bench_io.py).
# A failed step does not stop the others; the exit status is 1 if any failed.
# At the end: the full-scale presets' commands and their expected wall time on one GPU.
# Run from anywhere:  bash scripts/gpu_check.sh     (log: results/bench/gpu_check.log)
set -uo pipefail
cd "$(dirname "$0")/.."
export WANDB_MODE=offline WANDB_SILENT=true PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p results/bench
exec > >(tee results/bench/gpu_check.log) 2>&1

KILL_AFTER=5
BUDGET=540
failed=()
planned=0
started=$SECONDS
step() {  # step <name> <limit s> <command...>: SIGINT at the limit, SIGKILL KILL_AFTER s later
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc=0
  echo "[gpu_check] === $name (limit ${limit}s + ${KILL_AFTER}s; $((SECONDS - started))s so far)"
  timeout --signal=INT --kill-after=$KILL_AFTER "$limit" "$@" || rc=$?
  if ((rc == 0)); then
    echo "[gpu_check] === $name: ok in $((SECONDS - t0))s"
  else
    case $rc in 124 | 137) why="cut at its time limit" ;; *) why="exit $rc" ;; esac
    echo "[gpu_check] === $name: FAILED ($why) after $((SECONDS - t0))s"
    failed+=("$name")
  fi
}
# the steps' limits in seconds (the table above)
T_VERSIONS=20 T_TESTS=70 T_NORMS=75 T_RMS=95 T_RMS_SUMMARY=8 T_EPOCH=70 T_DDP=50 T_DDP_SUMMARY=8 T_OVERHEAD=55 T_SYNC=35
limits=("$T_VERSIONS" "$T_TESTS" "$T_NORMS" "$T_RMS" "$T_RMS_SUMMARY" "$T_EPOCH" "$T_DDP" "$T_DDP_SUMMARY" "$T_OVERHEAD" "$T_SYNC")
for l in "${limits[@]}"; do planned=$((planned + l + KILL_AFTER)); done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "[gpu_check] $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "[gpu_check] ${#limits[@]} steps; limits + kill-after: ${planned}s of a ${BUDGET}s budget"
step "versions" "$T_VERSIONS" python - "$work/gpus" <<'PY'
import sys
import warnings

sys.path.insert(0, "scripts")
import torch
from bench_io import versions

if not torch.cuda.is_available():
    sys.exit("[gpu_check] no CUDA device is visible")
n = torch.cuda.device_count()
with open(sys.argv[1], "w") as f:  # first: the later steps need only this, even if the rest is cut
    f.write(str(n))
v = versions("cuda")
print(f"[gpu_check] {n} x {v['gpu']}; driver {v['driver'] or '?'}, CUDA {v['cuda']}, cuDNN {v['cudnn']}, "
      f"torch {v['torch']}")
x = torch.ones(8, device="cuda")
torch.cuda.synchronize()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.cuda.set_sync_debug_mode("warn")
    try:
        mode = torch.cuda.get_sync_debug_mode()
        (x * 2).sum()  # no sync
        x.sum().item()  # one sync
    finally:
        torch.cuda.set_sync_debug_mode("default")
syncs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message)]
print(f"[gpu_check] torch.cuda.set_sync_debug_mode('warn'): get_sync_debug_mode() = {mode}; "
      f"(x * 2).sum() then x.sum().item(): {len(syncs)} warning(s) (1 expected): {syncs[:1]}")
PY
if [[ ! -s "$work/gpus" ]]; then
  echo "[gpu_check] no CUDA device: nothing else to check"
  exit 1
fi
gpus=$(cat "$work/gpus")

step "gpu tests" "$T_TESTS" python -m pytest -m gpu -q -p no:cacheprovider

step "bench norms" "$T_NORMS" python scripts/bench_norms.py --device cuda --rounds 3 --min-time 0.02 \
  --norms ln rms bn prms gn pn brn in ln_sample bn_noisy noise_only none --out results/bench/norms_cuda.csv

# compile outermost: the eager pair first, then the compiled pair; one corpus (and BPE) for the four jobs
step "rmsnorm speed" "$T_RMS" python -m normbench -m experiment=recipes/transformer_iwslt dataset=synthetic_translation \
  model.encoder_layers=3 model.decoder_layers=3 dataset.max_tokens=4096 dataset.eval_bleu=false hardware=cuda_bf16 \
  hardware.compile=false,true norm=ln,rms max_steps=60 throughput_warmup_steps=20 logger=local \
  logger.progress_bar=false checkpoint.enabled=false "dataset.root=$work/corpus" "hydra.sweep.dir=$work/rms"
step "rmsnorm summary" "$T_RMS_SUMMARY" python - "$work/rms" <<'PY'
import sys
from pathlib import Path

sys.path.insert(0, "scripts")
from bench_io import CsvRows, versions

from normbench import sweep

ln_rate = {}
with CsvRows(Path("results/bench/gpu_rmsnorm_speed.csv"), versions("cuda")) as out:
    for job in sweep.job_dirs(Path(sys.argv[1])):
        s = sweep.read_summary(job) or {"status": "killed (no summary.json)"}
        overrides = sweep.recorded_overrides(job)
        norm = next((o.split("=", 1)[1] for o in overrides if o.startswith("norm=")), "")
        rate = s.get("perf/tokens_per_s")
        compiled = str(s.get("compile", next((o.split("=", 1)[1] for o in overrides if "compile=" in o), ""))).lower()
        if norm == "ln" and rate:
            ln_rate[compiled] = rate
        base = ln_rate.get(compiled)
        row = out.write({
            "norm": norm, "compile": compiled, "precision": s.get("precision", ""), "status": s.get("status"),
            "steps": s.get("step", ""), "tokens_per_s": rate if rate is not None else "",
            "vs_ln": round(rate / base, 3) if rate and base else "", "val_loss": s.get("val/loss", ""),
            "wall_time_s": s.get("wall_time_s", ""), "overrides": " ".join(overrides),
        })
        print("[gpu_check] rmsnorm speed:", row)
if not out.rows:
    sys.exit("[gpu_check] rmsnorm speed: no job ran")
PY

step "epoch time" "$T_EPOCH" python scripts/bench_epoch.py --device cuda --epochs 2 --num-test 2000 \
  --out results/bench/gpu_epoch_time.csv

# two ranks even on one GPU: NCCL refuses two ranks on one device, so there gloo with both on cuda:0
# (an explicit hardware.device index is every rank's device: normbench.run.placement.distributed.init)
ddp_batch=256
if ((gpus >= 2)); then
  backend=nccl
  launch=(python -m torch.distributed.run --standalone --nproc_per_node=2 -m normbench hardware=ddp)
else
  backend=gloo
  launch=(python -m torch.distributed.run --standalone --nproc_per_node=2 -m normbench hardware=ddp
    hardware.device=cuda:0 hardware.backend=gloo)
fi
step "ddp $backend x2 on $((gpus >= 2 ? 2 : 1)) GPU(s)" "$T_DDP" "${launch[@]}" experiment=quickstart \
  dataset.num_train=2048 dataset.num_test=512 batch_size=$ddp_batch epochs=2 norm=bn norm.sync=true logger=local \
  logger.progress_bar=false checkpoint.enabled=false "hydra.run.dir=$work/ddp"
step "ddp summary" "$T_DDP_SUMMARY" python - "$work/ddp" "$backend" "$((gpus >= 2 ? 2 : 1))" "$ddp_batch" <<'PY'
import json
import sys
from pathlib import Path

sys.path.insert(0, "scripts")
from bench_io import CsvRows, versions

run_dir, backend, gpus, batch = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
try:
    s = json.loads((run_dir / "summary.json").read_text())
except (OSError, ValueError) as e:
    s = {"status": f"no summary ({type(e).__name__})"}
with CsvRows(Path("results/bench/gpu_ddp.csv"), versions("cuda")) as out:
    row = out.write({
        "status": s.get("status"), "backend": s.get("dist_backend", backend), "ranks": s.get("world_size", ""),
        "gpus_used": gpus, "device_rank0": s.get("device", ""), "norm_sync": s.get("norm_sync", ""),
        "global_batch": batch, "batch_stats_samples": s.get("batch_stats_samples", ""),
        "precision": s.get("precision", ""), "steps": s.get("step", ""),
        "samples_per_s": s.get("perf/samples_per_s", ""), "val_acc": s.get("val/acc", ""),
        "error": s.get("error", ""),
    })
print("[gpu_check] ddp:", row)
ok = (s.get("status") == "finished" and s.get("dist_backend") == backend and s.get("world_size") == 2
      and s.get("norm_sync") is True and s.get("batch_stats_samples") == batch)
sys.exit(0 if ok else "[gpu_check] ddp: not the expected finished 2-rank run with synchronized BN")
PY

step "overhead" "$T_OVERHEAD" python scripts/bench_overhead.py --device cuda --batch-size 512 --rounds 2 --steps 16 --warmup 3 \
  --out results/bench/overhead_cuda.csv

step "sync debug" "$T_SYNC" python scripts/sync_debug.py --steps 3 --out results/bench/gpu_host_syncs.csv

cat <<'TXT'
[gpu_check] full-scale presets on one GPU (expected wall time: estimates from the papers' schedules and
[gpu_check] the epoch times above; the data roots must point at real CIFAR-10 / IWSLT14):
  normbench -m experiment=santurkar_vgg dataset.root=<cifar>      # VGG16, 4 arms x seeds
  normbench -m experiment=bn_lp dataset.root=<cifar>              # VGG16 15k steps, none / bn / l1 / l2 / linf BN x 5 seeds (25 runs, ~santurkar_vgg's time per run)
  normbench -m experiment=gn_batch_size dataset.root=<cifar>      # ResNet, 5 norms x 5 batch sizes
  normbench -m experiment=gn_groups dataset.root=<cifar>          # ResNet, GN's group count, 6 arms x 5 seeds
  normbench -m experiment=bn_eval_stats dataset.root=<cifar>      # ResNet20 30 epochs, BN's EMA vs population, 3 arms x 5 seeds
  normbench -m experiment=bn_dropout dataset.root=<cifar>         # VGG16 60 epochs, BN x dropout, 4 arms x 5 seeds
  normbench -m experiment=bn_saturation dataset.root=<cifar>      # sigmoid VGG16 20 epochs, standard vs BN, 5 seeds
  normbench -m experiment=bn_lr_range dataset.root=<cifar>        # ResNet20 30 epochs, 4 norms x 6 lrs x 5 seeds (120 runs)
  normbench -m experiment=bn_padding dataset.root=<iwslt14>       # Transformer 30k steps, BN over padding or not, 5 arms x 5 seeds
  normbench -m experiment=ln_axes dataset.root=<iwslt14>          # Transformer encoder ln / ln_sample / in
  normbench -m experiment=powernorm_stats                          # each arm reads its own data set (see the preset)
  normbench -m experiment=powernorm_grads                          # the same arms with the gradients through the statistics
  normbench -m experiment=powernorm_mt dataset.root=<iwslt14>     # Transformer, pn vs ln (and bn)
  normbench -m experiment=powernorm_chain dataset.root=<iwslt14>  # encoder bn / pn_v / pn / ln: 20 runs, 4/3 x powernorm_mt's time
  normbench -m experiment=rmsnorm_speed dataset.root=<iwslt14>    # Transformer, ln / rms / prms
  normbench -m experiment=rmsnorm_time dataset.root=<iwslt14>     # the same 30 runs judged at equal time and steps: ~90 GPU-h (30 x ~3 h, leaderboard.yaml's estimate; not measured)
  normbench -m experiment=prms_width dataset.root=<iwslt14>       # ln / rms / prms at d 512, eager: 15 runs, ~45 GPU-h (15 x ~3 h, as rmsnorm_time; not measured)
  normbench -m experiment=leaderboard                             # every norm x model, 3 seeds
[gpu_check] see results/README.md for each preset's expected GPU hours.
TXT

echo "[gpu_check] done in $((SECONDS - started))s (budget ${BUDGET}s)"
if ((${#failed[@]})); then
  echo "[gpu_check] FAILED: ${failed[*]}"
  exit 1
fi
echo "[gpu_check] all passed; results in results/bench/*cuda*.csv and gpu_*.csv"
