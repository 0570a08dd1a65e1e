#!/usr/bin/env bash
# Every GPU question on one GPU: each step has its own time limit (SIGINT at the limit, SIGKILL 5 s
# later). "measured" is the first real run's time on one H200 (torch 2.11, 16 cores, cold compile cache,
# 2026-12-04, results/bench/README.md); limits leave ~20-40 % headroom.
#
#   key / step            limit  measured  what                                           -> results/bench/
#   versions                 20     6-8 s  GPU, driver, CUDA, cuDNN, torch; torch.cuda.set_sync_debug_mode("warn")
#                                          reports one .item() (log header only)
#   tests                   100      55 s  pytest -m gpu: every norm under bf16 autocast on CUDA, a compiled
#                                          bf16 channels_last ResNet8 run, divergence check without a sync,
#                                          synchronized BN with both gloo ranks on cuda:0 (added since: +~15 s)
#   norms                   210  ~170 s    all 12 norms (ln, rms first) x images / sequences x eager / compiled
#                                          (48 rows, 24 small compiles) vs torch's fused op, 3 rounds x 0.02 s
#                                                                                  norms_cuda.csv
#   rmsnorm             100 + 10  ~60 s    the IWSLT14 recipe's Transformer (d_model 512, FFN 1024, 4 heads,
#                                          pre-norm, Adam) at 3+3 layers, synthetic corpus, bf16, 4096 tokens
#                                          per batch, 60 steps (20 warm-up), eager ln then rms (ln: 28.5 s)
#                                                                                  gpu_rmsnorm_speed.csv
#   epoch                   140  ~110 s    ResNet20, 50,000 + 2,000 synthetic CIFAR-shaped images, batch 512,
#                                          2 epochs (1 timed): fp32, bf16, fp32+cl, bf16+cl (73 s together),
#                                          bf16+cl+compile (~35 s)                 gpu_epoch_time.csv
#   ddp                  50 + 10    ~20 s  2 ranks under torchrun, ResNet20 + BN with norm.sync=true, global
#                                          batch 256 sharded 2 x 128, 2 epochs of 8 steps: NCCL one GPU per
#                                          rank with >= 2 GPUs; gloo, both ranks on cuda:0, with one GPU
#                                          (segfaulted in gloo's all-gather of CUDA tensors, 16 s; now
#                                          gathered through the host: not yet run on a GPU)   gpu_ddp.csv
#   overhead                 85   ~62 s    bench_overhead.py --device cuda: plain loop vs runner (diagnostics
#                                          off / default / full, W&B offline), batch 512, 2 rounds x 13 timed
#                                          steps (one round: ~30 s)                overhead_cuda.csv
#   sync                     30     15 s   sync_debug.py: ResNet20 and transformer_tiny, 1 warm-up + 3 counted
#                                          training steps under set_sync_debug_mode("warn") gpu_host_syncs.csv
#   rmsnorm_compiled    420 + 10  > 115 s  step rmsnorm compiled (hardware.compile=true): the first job was
#                                          still compiling after 115 s (cut at 2 steps); its time is unknown
#                                                                          gpu_rmsnorm_speed_compiled.csv
#   all steps: limits + kill-after 1,245 s at most (~13 min measured + the compiled pair).
#
# A leased GPU with 10 minutes a call (this project's device tool: 15 minutes a session, the start
# included) takes three calls, each within 600 s:
#   bash scripts/gpu_check.sh tests norms rmsnorm          # limits + kill-after 465 s, ~5.5 min measured
#   bash scripts/gpu_check.sh epoch ddp overhead sync      # 365 s, ~3.5 min measured
#   bash scripts/gpu_check.sh rmsnorm_compiled             # 465 s (a session of its own)
#
# Every CSV is written row by row as its step measures (a step cut at its limit leaves the rows it
# finished); every row ends with the columns gpu, driver, cuda, cudnn, torch (scripts/bench_io.py).
# A failed step does not stop the others; the exit status is 1 if any failed.
# At the end: the full-scale presets' commands and their expected wall time on one GPU.
# Run from anywhere:  bash scripts/gpu_check.sh     (log: results/bench/gpu_check.log)
# Some steps only:    bash scripts/gpu_check.sh rmsnorm ddp   (keys: versions tests norms rmsnorm epoch ddp
#                     overhead sync rmsnorm_compiled; versions always runs; log: results/bench/gpu_check-rmsnorm-ddp.log)
set -uo pipefail
cd "$(dirname "$0")/.."
export WANDB_MODE=offline WANDB_SILENT=true PYTHONUNBUFFERED=1 HYDRA_FULL_ERROR=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
STEPS=(versions tests norms rmsnorm epoch ddp overhead sync rmsnorm_compiled)
only=("$@")  # a subset of STEPS (versions always runs): rerun the steps that failed
for key in "${only[@]}"; do
  if [[ " ${STEPS[*]} " != *" $key "* ]]; then
    echo "gpu_check: no step '$key'; valid steps: ${STEPS[*]}" >&2
    exit 2
  fi
done
log=results/bench/gpu_check.log
if ((${#only[@]})); then
  log=results/bench/gpu_check-$(IFS=-; echo "${only[*]}").log
fi
mkdir -p results/bench
exec > >(tee "$log") 2>&1

KILL_AFTER=5
failed=()
planned=0
started=$SECONDS
step() {  # step <key> <name> <limit s> <command...>: SIGINT at the limit, SIGKILL KILL_AFTER s later
  local key=$1 name=$2 limit=$3; shift 3
  [[ " ${chosen[*]} " == *" $key "* ]] || return 0  # chosen: versions and the keys asked for (below)
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
T_VERSIONS=20 T_TESTS=100 T_NORMS=210 T_RMS=100 T_RMS_SUMMARY=10 T_EPOCH=140 T_DDP=50 T_DDP_SUMMARY=10 T_OVERHEAD=85
T_SYNC=30 T_RMS_COMPILED=420
declare -A step_limits=(  # per key: its steps' limits, summaries included
  [versions]=$T_VERSIONS [tests]=$T_TESTS [norms]=$T_NORMS [rmsnorm]="$T_RMS $T_RMS_SUMMARY" [epoch]=$T_EPOCH
  [ddp]="$T_DDP $T_DDP_SUMMARY" [overhead]=$T_OVERHEAD [sync]=$T_SYNC [rmsnorm_compiled]="$T_RMS_COMPILED $T_RMS_SUMMARY"
)
chosen=(versions "${only[@]}")
((${#only[@]})) || chosen=("${STEPS[@]}")
nsteps=0
for key in "${chosen[@]}"; do
  for l in ${step_limits[$key]}; do planned=$((planned + l + KILL_AFTER)); nsteps=$((nsteps + 1)); done
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "[gpu_check] $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "[gpu_check] steps: ${chosen[*]} ($nsteps timed); limits + kill-after: ${planned}s at most"
step versions "versions" "$T_VERSIONS" python - "$work/gpus" <<'PY'
import sys
import warnings

sys.path.insert(0, "scripts")
import torch
from bench_io import is_sync_warning, versions

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
syncs = [str(w.message).splitlines()[0] for w in caught if is_sync_warning(str(w.message))]
print(f"[gpu_check] torch.cuda.set_sync_debug_mode('warn'): get_sync_debug_mode() = {mode}; "
      f"(x * 2).sum() then x.sum().item(): {len(syncs)} warning(s) (1 expected): {syncs[:1]}")
PY
if [[ ! -s "$work/gpus" ]]; then
  echo "[gpu_check] no CUDA device: nothing else to check"
  exit 1
fi
gpus=$(cat "$work/gpus")

step tests "gpu tests" "$T_TESTS" python -m pytest -m gpu -q -p no:cacheprovider

step norms "bench norms" "$T_NORMS" python scripts/bench_norms.py --device cuda --rounds 3 --min-time 0.02 \
  --norms ln rms bn prms gn pn brn in ln_sample bn_noisy noise_only none --out results/bench/norms_cuda.csv

# RMSNorm vs LayerNorm in the Transformer: the eager pair (step rmsnorm), the compiled pair (step
# rmsnorm_compiled: each job compiles the model for itself); each pair builds its synthetic corpus and BPE
rmsnorm_pair() {  # rmsnorm_pair <key> <compile: false|true> <limit s> <csv>
  local key=$1 compile=$2 limit=$3 csv=$4
  step "$key" "rmsnorm speed, compile=$compile" "$limit" python -m normbench -m experiment=rmsnorm_speed \
    dataset=synthetic_translation seed=0 model.encoder_layers=3 model.decoder_layers=3 dataset.max_tokens=4096 \
    dataset.eval_bleu=false hardware=cuda_bf16 "hardware.compile=$compile" norm=ln,rms max_steps=60 \
    throughput_warmup_steps=20 logger=local logger.progress_bar=false checkpoint.enabled=false \
    "dataset.root=$work/corpus_$key" "hydra.sweep.dir=$work/$key"
  step "$key" "rmsnorm summary, compile=$compile" "$T_RMS_SUMMARY" python - "$work/$key" "$csv" <<'PY'
import sys
from pathlib import Path

sys.path.insert(0, "scripts")
from bench_io import CsvRows, versions

from normbench.cli import sweep

ln_rate = None
with CsvRows(Path(sys.argv[2]), versions("cuda")) as out:
    for job in sweep.job_dirs(Path(sys.argv[1])):
        s = sweep.read_summary(job) or {"status": "killed (no summary.json)"}
        overrides = sweep.recorded_overrides(job)
        norm = next((o.split("=", 1)[1] for o in overrides if o.startswith("norm=")), "")
        rate = s.get("perf/tokens_per_s")
        compiled = next((o.split("=", 1)[1] for o in overrides if o.startswith("hardware.compile=")), "").lower()
        if norm == "ln" and rate:
            ln_rate = rate
        row = out.write({
            "norm": norm, "compile": compiled, "precision": s.get("precision", ""), "status": s.get("status"),
            "steps": s.get("step", ""), "tokens_per_s": rate if rate is not None else "",
            "vs_ln": round(rate / ln_rate, 3) if rate and ln_rate else "", "val_loss": s.get("val/loss", ""),
            "wall_time_s": s.get("wall_time_s", ""), "overrides": " ".join(overrides),
        })
        print("[gpu_check] rmsnorm speed:", row)
if not out.rows:
    sys.exit("[gpu_check] rmsnorm speed: no job ran")
PY
}
rmsnorm_pair rmsnorm false "$T_RMS" results/bench/gpu_rmsnorm_speed.csv

step epoch "epoch time" "$T_EPOCH" python scripts/bench_epoch.py --device cuda --epochs 2 --num-test 2000 \
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
step ddp "ddp $backend x2 on $((gpus >= 2 ? 2 : 1)) GPU(s)" "$T_DDP" "${launch[@]}" experiment=quickstart \
  dataset.num_train=2048 dataset.num_test=512 batch_size=$ddp_batch epochs=2 norm=bn norm.sync=true logger=local \
  logger.progress_bar=false checkpoint.enabled=false "hydra.run.dir=$work/ddp"
step ddp "ddp summary" "$T_DDP_SUMMARY" python - "$work/ddp" "$backend" "$((gpus >= 2 ? 2 : 1))" "$ddp_batch" <<'PY'
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

step overhead "overhead" "$T_OVERHEAD" python scripts/bench_overhead.py --device cuda --batch-size 512 --rounds 2 --steps 16 --warmup 3 \
  --out results/bench/overhead_cuda.csv

step sync "sync debug" "$T_SYNC" python scripts/sync_debug.py --steps 3 --out results/bench/gpu_host_syncs.csv

rmsnorm_pair rmsnorm_compiled true "$T_RMS_COMPILED" results/bench/gpu_rmsnorm_speed_compiled.csv

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

echo "[gpu_check] done in $((SECONDS - started))s (limits + kill-after: ${planned}s)"
if ((${#failed[@]})); then
  echo "[gpu_check] FAILED: ${failed[*]}"
  exit 1
fi
echo "[gpu_check] all passed; results in results/bench/*cuda*.csv and gpu_*.csv"
