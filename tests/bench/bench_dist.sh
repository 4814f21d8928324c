#!/usr/bin/env bash
# Training throughput of the tiny preset on one rank and under mpiexec (data and sequence
# parallel), for docs/distributed.md. Not a test. Usage:
#   tests/bench/bench_dist.sh BUILD/gdn [STEPS [ROUNDS]]
# Runs every configuration ROUNDS times, interleaved (so that load from elsewhere hits them
# alike). Per run: the median step throughput (steps after the first 3) and the CPU seconds of
# all ranks per 1000 training tokens (user + system, whole run). Printed: the best and the
# median run throughput (on a shared machine the best is the closest to an idle one), the
# median CPU cost, and the share of time rank 0 waited for other ranks.
set -euo pipefail
GDN=$1
STEPS=${2:-20}
ROUNDS=${3:-3}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
base=(--preset tiny --data "$SRC/data/kjv.txt.gz" --steps "$STEPS" --eval_every 0 --eval_batches 1
      --ckpt_every 0 --log_every 1000)
configs=(
  "one rank, 2 threads|1|--threads 2"
  "one rank, 1 thread|1|--threads 1"
  "dp 2 (batch 16 per rank)|2|"
  "dp 2 (batch 8 per rank)|2|--batch_size 8"
  "sp 2, pass|2|--sp 2 --sp_exchange pass"
  "sp 2, gather|2|--sp 2 --sp_exchange gather"
  "sp 4, pass (4 ranks on 2 cores)|4|--sp 4 --sp_exchange pass"
  "sp 4, gather (4 ranks on 2 cores)|4|--sp 4 --sp_exchange gather"
  "dp 2 x sp 2, pass (4 ranks on 2 cores)|4|--sp 2 --sp_exchange pass --batch_size 8"
)
for r in $(seq "$ROUNDS"); do
  for i in "${!configs[@]}"; do
    IFS='|' read -r name n extra <<< "${configs[$i]}"
    out="$dir/c$i.r$r"
    # shellcheck disable=SC2086
    if [ "$n" = 1 ]; then launch=("$GDN"); else launch=(mpiexec -n "$n" "$GDN"); fi
    /usr/bin/time -f "cpu %U %S" -o "$out.time" "${launch[@]}" train "${base[@]}" $extra --out "$out" > "$out.log" 2>&1
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
python3 - "$dir" "$ROUNDS" "${configs[@]}" <<'PY'
import json, re, statistics, sys
d, rounds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'configuration':40s} {'tok/step':>8s} {'best tok/s':>10s} {'median':>7s} {'vs 1 rank':>9s} "
      f"{'CPU s/1k tok':>12s} {'rank 0 waits':>12s}")
base = None
for i, c in enumerate(configs):
    name = c.split("|")[0]
    rates, waits, cpus, tok = [], [], [], 0
    for r in range(1, rounds + 1):
        m = [json.loads(l) for l in open(f"{d}/c{i}.r{r}/metrics.jsonl")]
        tok = m[1]["tokens"] - m[0]["tokens"]
        rates.append(statistics.median(x["tokens_per_s"] for x in m[3:]))
        w = re.search(r"waited for other ranks ([0-9.]+)%", open(f"{d}/c{i}.r{r}.log").read())
        if w: waits.append(float(w.group(1)))
        u, s = map(float, open(f"{d}/c{i}.r{r}.time").read().split("cpu ")[1].split())
        cpus.append((u + s) / (m[-1]["tokens"] / 1000.0))
    best = max(rates)
    base = base or best
    wait = f"{statistics.median(waits):.0f}%" if waits else "-"
    print(f"{name:40s} {tok:8d} {best:10.0f} {statistics.median(rates):7.0f} {best / base:8.2f}x "
          f"{statistics.median(cpus):12.3f} {wait:>12s}")
PY
