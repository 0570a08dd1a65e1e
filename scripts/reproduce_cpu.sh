#!/usr/bin/env bash
# Rerun CPU-scale presets and rebuild results/<preset>/ from their runs. Each preset's jobs (the
# product of its hydra.sweeper.params: scripts/sweep_jobs.py; run seed by seed) run two at a time, one per core
# (xargs -P 2; the presets set hardware.num_threads=1), then normbench-figures judges the claims by
# the preset's rules and writes results/<preset>/; RUN.txt records the commit, the rules hash,
# the commands, the start and the wall clock.
#
#   bash scripts/reproduce_cpu.sh                       # every _cpu paper preset, in this order
#   bash scripts/reproduce_cpu.sh powernorm_stats_cpu   # some of them
#   bash scripts/reproduce_cpu.sh leaderboard_cpu       # the leaderboard's three sweeps as one job list
#   bash scripts/reproduce_cpu.sh --pilot bn_lp_cpu     # the pilot: the sweep at the rules' pilot seeds,
#                                                       # into results/<preset>/pilot/ (then: normbench-plan)
#   NORMBENCH_JOBS=1 bash scripts/reproduce_cpu.sh ...  # one run at a time (leaves a core free); default 2
#
# Every job runs as `python -m normbench` from this checkout (cwd first on sys.path), never the
# `normbench` console script, which imports the package from wherever it was pip-installed
# (an editable install of another checkout would run that checkout's code).
#
# Runs only from a clean tree (outside results/; untracked files outside the code do not count): results are refused from runs whose code differed
# from a commit. Run folders: outputs/repro/<preset>-<UTC time>/<job>/ (never reused).
# Needs the shared data beside the project (../shared/data) or NORMBENCH_DATA.
set -uo pipefail
cd "$(dirname "$0")/.."
export WANDB_MODE=${WANDB_MODE:-offline} WANDB_SILENT=true PYTHONUNBUFFERED=1
pilot=""
pilot_note=" (pilot: the rules' pilot seeds)"  # a quote inside \${pilot:+...} in double quotes would open a quote
if [ "${1:-}" = --pilot ]; then pilot=1; shift; fi
presets=("$@")
cpu_presets() {  # every rules preset with a _cpu variant in conf/experiment (the leaderboard runs alone: name it)
  python -c "from pathlib import Path; from normbench.rules import list_rule_presets
print(' '.join(p + '_cpu' for p in list_rule_presets() if p != 'leaderboard' and Path('conf/experiment', p + '_cpu.yaml').is_file()))"
}
((${#presets[@]})) || read -r -a presets <<< "$(cpu_presets)"
# the tree as a run records it (normbench.sinks.files.git_state): tracked changes outside results/ and
# outputs/, and untracked files only where they can change a run (a venv inside the checkout is not one)
dirty=$( (git status --porcelain --untracked-files=no -- . ':!results' ':!outputs';
          git status --porcelain --untracked-files=all -- normbench conf hydra_plugins pyproject.toml) | sort -u)
if [ -n "$dirty" ]; then
  echo "reproduce_cpu: error: the tree differs from commit $(git rev-parse --short HEAD) outside results/:" \
    "$(echo "$dirty" | head -3 | tr '\n' ' ')— commit first, or run from a clean worktree (git worktree add)" >&2
  exit 2
fi
commit=$(git rev-parse --short HEAD)
jobs=${NORMBENCH_JOBS:-2}
case $jobs in ''|*[!0-9]*|0) echo "reproduce_cpu: error: NORMBENCH_JOBS=$jobs is not a positive whole number (runs at a time, e.g. 1 or 2)" >&2; exit 2;; esac

seed_major() {  # stdin: numbered jobs; stdout: the same jobs seed by seed (stable: each seed's jobs
  # keep their order), unnumbered. Side by side on the two cores then run two arms of one seed, so
  # no arm's throughput meets systematically different neighbours (the 2026-12-02 rmsnorm_speed_cpu
  # run, in sweep order with the norm outermost, had eager ln beside eager ln, eager rms beside compiled ln)
  awk '{ seed = 0; for (i = 2; i <= NF; i++) if ($i ~ /^seed=/) { split($i, s, "="); seed = s[2] }
         $1 = ""; print seed, substr($0, 2) }' | sort -s -n -k1,1 | cut -d' ' -f2-
}

jobs_of() {  # the preset's jobs, numbered, seed by seed; leaderboard_cpu: its three sweeps
  # (conf/experiment/leaderboard_cpu.yaml), the long translation jobs first so that the two cores end
  # together, its two translation sweeps merged seed by seed
  local seed=()
  if [ -n "$pilot" ]; then  # the rules' pilot seeds in place of the sweep's seeds
    seeds=$(python -c "from normbench.analysis.judging.rules_schema import load_rules; r = load_rules('$1')
print(','.join(map(str, r.pilot_seeds)) if r and r.pilot_seeds else '')") || return 2
    [ -n "$seeds" ] || { echo "reproduce_cpu: error: the rules of $1 name no pilot seeds (pilot: {seeds: [...]})" >&2; return 2; }
    seed=("seed=$seeds")
  fi
  if [ "$1" = leaderboard_cpu ]; then
    { { python scripts/sweep_jobs.py leaderboard_cpu 'experiment/arms/leaderboard@_global_=transformer_enc_cpu' norm=bn,gn,pn "${seed[@]}" &&
        python scripts/sweep_jobs.py leaderboard_cpu 'experiment/arms/leaderboard@_global_=transformer_cpu' norm=ln,rms "${seed[@]}"; } | seed_major &&
      python scripts/sweep_jobs.py leaderboard_cpu "${seed[@]}" | seed_major; } | awk '{ print NR - 1, $0 }'
  elif [ -n "$pilot" ]; then
    python scripts/sweep_jobs.py "$1" "${seed[@]}" | seed_major | awk '{ print NR - 1, $0 }'
  else
    python scripts/sweep_jobs.py "$1" | seed_major | awk '{ print NR - 1, $0 }'
  fi
}

analyse() {  # analyse <preset> <runs dir>: the claims and figures, or the leaderboard
  if [ "$1" = leaderboard_cpu ]; then
    python -m normbench.analysis.leaderboard.leaderboard_report "$2" --out "results/$1${pilot:+/pilot}" ${pilot:+--pilot}
  elif [ -n "$pilot" ]; then
    python -m normbench.analysis.figures.figures_cli "$1" --pilot --runs "$2" --out "results/$1/pilot"
  else
    python -m normbench.analysis.figures.figures_cli "$1" --runs "$2" --out "results/$1"
  fi
}
progress() {  # progress <out> <job> <exit status> <job start>: one line per finished job, with the preset's ETA
  local k now
  k=$(flock "$1/.progress.lock" bash -c 'k=$(( $(cat "$0" 2>/dev/null || echo 0) + 1 )); echo "$k" > "$0"; echo "$k"' "$1/.done")
  now=$(date +%s)
  local spent=$((now - REPRO_T0)) left=$(( (now - REPRO_T0) * (REPRO_N - k) / k ))
  printf '[reproduce] %s [%d/%d] job %s %s in %d s; %d min %02d s so far, about %d min %02d s to go\n' \
    "$REPRO_PRESET" "$k" "$REPRO_N" "$2" "$([ "$3" = 0 ] && echo finished || echo "failed (exit $3, see $1/$2.log)")" \
    $((now - $4)) $((spent / 60)) $((spent % 60)) $((left / 60)) $((left % 60))
  return "$3"
}
export -f progress
total=0
for preset in "${presets[@]}"; do
  out="outputs/repro/$preset${pilot:+-pilot}-$(date -u +%Y%m%dT%H%M%S)"
  folder="results/$preset${pilot:+/pilot}"
  mkdir -p "$out" "$folder"
  jobs_of "$preset" > "$out/jobs.txt" || exit 2
  start=$(date -u '+%Y-%m-%d %H:%M:%S'); t0=$SECONDS; load0=$(cut -d' ' -f1-3 /proc/loadavg)
  # shellcheck disable=SC2016
  REPRO_T0=$(date +%s) REPRO_N=$(wc -l < "$out/jobs.txt") REPRO_PRESET=$preset; export REPRO_T0 REPRO_N REPRO_PRESET
  echo "[reproduce] $preset: $REPRO_N runs, $jobs at a time, from $start UTC (logs: $out/<job>.log)"
  xargs -P "$jobs" -L 1 bash -c 't=$(date +%s); python -m normbench "${@:2}" hydra.run.dir="$0/$1" > "$0/$1.log" 2>&1
    progress "$0" "$1" $? "$t"' "$out" < "$out/jobs.txt"
  status=$?
  wall=$((SECONDS - t0)); total=$((total + wall)); load1=$(cut -d' ' -f1-3 /proc/loadavg)
  analyse "$preset" "$out" > "$out/figures.log" 2>&1
  fig_status=$?
  {
    echo "preset: $preset${pilot:+$pilot_note}"
    echo "commit: $commit"
    echo "rules hash: $(python -c "from normbench.rules import rules_hash; print(rules_hash('$preset'))")"
    echo "start (UTC): $start; wall clock: $((wall / 60)) min $((wall % 60)) s ($(wc -l < "$out/jobs.txt") runs, $jobs at a time)"
    echo "commands:"
    echo "  jobs_of $preset > $out/jobs.txt   # scripts/reproduce_cpu.sh: scripts/sweep_jobs.py $preset [overrides]"
    echo "  xargs -P $jobs -L 1 bash -c 'python -m normbench \"\${@:2}\" hydra.run.dir=\"\$0/\$1\"' $out < $out/jobs.txt"
    echo "  analyse $preset $out   # normbench-figures, or normbench-leaderboard for leaderboard_cpu"
    echo "  (the same jobs one after another: normbench -m experiment=$preset)"
    echo "exit status: runs $status, figures $fig_status"
    echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); torch $(python -c 'import torch; print(torch.__version__)')"
    echo "load average (1, 5, 15 min): $load0 at the start, $load1 at the end (the runs' own $jobs processes count $jobs)"
    # the table as these runs gave it and the plan that sized them (normbench-figures stamps the same
    # lines; index --check compares); none when the figures failed: the per_run.csv there is then an
    # earlier attempt's
    [ "$fig_status" = 0 ] && python -c "from pathlib import Path; from normbench.analysis.loading.table_digest import digest_line
line = digest_line(Path('$folder')); print(line) if line else None"
  } > "$folder/RUN.txt"
  echo "[reproduce] $preset: $((wall / 60)) min $((wall % 60)) s (runs $status, figures $fig_status)"
done
echo "[reproduce] all: $((total / 60)) min $((total % 60)) s of wall clock"
