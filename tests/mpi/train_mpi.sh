#!/usr/bin/env bash
# gdn train under mpiexec:
#  0. Refusals with advice: --sp 2 without a launcher; --sp_exchange gather with --backend cuda.
#  1. 50-step loss curves of sp = 2 (both exchanges), dp = 2 (half the batch per rank) and, on
#     4 ranks, dp = 2 x sp = 2 equal the one-process curve within a relative 1e-4 (training and
#     validation losses).
#     The same for 10 steps of a hybrid with attention layers (sp = 2, both exchanges), which
#     --backend cuda refuses.
#  2. A 2-rank run (dp = 2) stopped at step 10 and resumed on 2 ranks ends bitwise identical to
#     the straight run (every loss, parameters and AdamW moments).
#  3. The same checkpoint resumed on 1 rank maps the data position; on 3 ranks it cannot and
#     says why.
#  4. A rank killed with SIGKILL mid-run ends the job within 30 s with a message naming it.
#  5. SIGUSR1 to mpiexec, or to one rank only: every rank stops at the same step after one
#     checkpoint, exit status 75 (requeue).
# Usage: train_mpi.sh GDN "MPIEXEC -n"
set -euo pipefail
GDN=$1
read -r -a MPIRUN <<< "$2"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=/usr/bin/python3
# the processes whose parent is $1 (the ranks mpiexec started), from /proc (no procps needed)
children_of() {
  local s st ppid
  for s in /proc/[0-9]*/stat; do
    st=$(cat "$s" 2>/dev/null) || continue
    read -r _ ppid _ <<< "${st##*) }" # after "pid (command) ": state, ppid, ...
    if [ "$ppid" = "$1" ]; then echo "${st%% *}"; fi
  done | sort -n
}
# compare_curves REF STEPS LABEL RUN...: every RUN's training and validation losses over steps
# 1..STEPS equal REF's (one process) within a relative 1e-4.
compare_curves() {
  $PY - "$dir" "$@" <<'PY'
import json, sys
d, ref_name, steps, label, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
def curve(name):
    return [json.loads(l) for l in open(f"{d}/{name}/metrics.jsonl")]
ref = curve(ref_name)
assert [r["step"] for r in ref] == list(range(1, steps + 1))
for name in names:
    c = curve(name)
    assert [r["step"] for r in c] == list(range(1, steps + 1)), f"{name}: steps {[r['step'] for r in c]}"
    worst = 0.0
    for a, b in zip(ref, c):
        for key in ("loss", "val_loss"):
            assert (key in a) == (key in b), f"{name}: {key} missing at step {a['step']}"
            if key in a:
                e = abs(a[key] - b[key]) / abs(a[key])
                assert e < 1e-4, f"{name}: step {a['step']} {key} {b[key]} vs {a[key]} (relative {e:.2e})"
                worst = max(worst, e)
    print(f"{name}: {label}{steps}-step loss curve matches one process, max relative difference {worst:.1e}")
PY
}
small=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 64 --n_layers 2 --d_ff 128 --seq_len 64
       --warmup_steps 5 --eval_every 25 --seed 5)

# 0. sequence parallelism without a launcher says how to start it
if "$GDN" train "${small[@]}" --steps 1 --sp 2 --out "$dir/alone" > /dev/null 2> "$dir/alone.err"; then
  fail "--sp 2 ran without a launcher"
fi
grep -q "sp = 2 needs 2 ranks (a multiple of 2), but this process runs alone: start it with mpiexec -n N" \
  "$dir/alone.err" || { cat "$dir/alone.err"; fail "no advice for --sp 2 without a launcher"; }
# the gather exchange is CPU-only: --backend cuda refuses it on any build, before looking for GPUs
if "${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" --steps 1 --sp 2 --sp_exchange gather --backend cuda \
  --out "$dir/gather_cuda" > /dev/null 2> "$dir/gather_cuda.err"; then
  fail "--backend cuda --sp_exchange gather ran"
fi
grep -q "backend cuda with --sp_exchange gather: sequence parallelism on GPUs passes the delta-rule state rank to rank only" \
  "$dir/gather_cuda.err" || { cat "$dir/gather_cuda.err"; fail "no reason for refusing --sp_exchange gather on cuda"; }

# 1. loss curves
"$GDN" train "${small[@]}" --steps 50 --batch_size 8 --eval_batches 2 --out "$dir/one" > "$dir/one.log"
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" --steps 50 --batch_size 8 --eval_batches 2 --sp 2 \
  --out "$dir/sp2" > "$dir/sp2.log"
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" --steps 50 --batch_size 8 --eval_batches 2 --sp 2 \
  --sp_exchange gather --out "$dir/sp2g" > "$dir/sp2g.log"
# dp ranks take interleaved samples: 2 ranks x 4 sequences cover the one-process batch of 8,
# and 2 x 2 validation batches of 4 its 2 batches of 8
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" --steps 50 --batch_size 4 --eval_batches 4 \
  --out "$dir/dp2" > "$dir/dp2.log"
"${MPIRUN[@]}" 4 "$GDN" train "${small[@]}" --steps 50 --batch_size 4 --eval_batches 4 --sp 2 \
  --out "$dir/dp2sp2" > "$dir/dp2sp2.log"
grep -q "distributed: 4 ranks = dp 2 x sp 2" "$dir/dp2sp2.log" || fail "grid not reported"
compare_curves one 50 "" sp2 sp2g dp2 dp2sp2

# 1b. a hybrid with softmax-attention layers (grouped kv heads, q/k norms, biases): sp = 2 with
#     either exchange gives the one-process losses over 10 steps; --backend cuda refuses it
hybrid=("${small[@]}" --mixers GA --n_heads 4 --n_kv_heads 2 --qk_norm 1 --qkv_bias 1 --steps 10
        --eval_every 5 --batch_size 8 --eval_batches 2)
if "${MPIRUN[@]}" 2 "$GDN" train "${hybrid[@]}" --sp 2 --backend cuda --out "$dir/hyb_cuda" \
  > /dev/null 2> "$dir/hyb_cuda.err"; then
  fail "--backend cuda with sp 2 and attention layers ran"
fi
grep -q "sequence parallelism of attention layers (mixer A in mixers \"GA\") runs on the CPU backend only" \
  "$dir/hyb_cuda.err" || { cat "$dir/hyb_cuda.err"; fail "no reason for refusing sp 2 with attention on cuda"; }
"$GDN" train "${hybrid[@]}" --out "$dir/hyb1" > "$dir/hyb1.log"
"${MPIRUN[@]}" 2 "$GDN" train "${hybrid[@]}" --sp 2 --out "$dir/hyb2" > "$dir/hyb2.log"
"${MPIRUN[@]}" 2 "$GDN" train "${hybrid[@]}" --sp 2 --sp_exchange gather --out "$dir/hyb2g" > "$dir/hyb2g.log"
compare_curves hyb1 10 "hybrid GA, " hyb2 hyb2g

# 2. 2-rank checkpoint resumed on 2 ranks: bitwise identical to the straight run
dp2=(--steps 20 --decay_steps 20 --batch_size 4 --eval_batches 2 --eval_every 10)
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" "${dp2[@]}" --ckpt_every 10 --out "$dir/straight" > /dev/null
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" "${dp2[@]}" --steps 10 --out "$dir/resumed" > /dev/null
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" "${dp2[@]}" --resume auto --out "$dir/resumed" > "$dir/resume.log"
grep -q "resuming from .*ckpt_00000010.h5 at step 10" "$dir/resume.log" || fail "2-rank run did not resume at step 10"
$PY "$SRC/tests/e2e/same_run.py" "$dir/straight" "$dir/resumed" 20
$PY - "$dir/straight" <<'PY'
import sys, h5py
st = h5py.File(sys.argv[1] + "/ckpt_00000020.h5", "r")["state"].attrs
assert (int(st["world_size"]), int(st["dp"]), int(st["sp"])) == (2, 2, 1), dict(st)
PY
echo "2 ranks: 20 steps straight == 10 + resume on 2 ranks: losses, weights and moments bitwise identical"

# 3. the 2-rank checkpoint on other world sizes: 40 samples per rank x 2 = 80 global samples
mkdir -p "$dir/one_rank"
cp "$dir/straight/ckpt_00000010.h5" "$dir/one_rank/"
"$GDN" train "${small[@]}" "${dp2[@]}" --steps 12 --resume auto --out "$dir/one_rank" > "$dir/map1.log"
grep -q "written by 2 ranks (dp 2 x sp 1), this run has 1 (dp 1 x sp 1): data position 40 samples per data-parallel rank -> 80" \
  "$dir/map1.log" || { cat "$dir/map1.log"; fail "data position not mapped from 2 ranks to 1"; }
mkdir -p "$dir/three"
cp "$dir/straight/ckpt_00000010.h5" "$dir/three/"
if "${MPIRUN[@]}" 3 "$GDN" train "${small[@]}" "${dp2[@]}" --resume auto --out "$dir/three" > "$dir/map3.log" 2>&1; then
  fail "resuming 80 samples on 3 data-parallel ranks succeeded"
fi
grep -q "the data position cannot be mapped: the checkpoint's 2 data-parallel ranks consumed 80 training samples together (40 each), which 3 ranks cannot split evenly" \
  "$dir/map3.log" || { cat "$dir/map3.log"; fail "no explanation for the unmappable data position"; }
echo "2-rank checkpoint: resumed on 1 rank at global sample 80; refused on 3 ranks with the reason"

# 4. SIGKILL one rank of a running 2-rank job: the job ends within 30 s, naming the rank
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" --steps 100000 --batch_size 4 --eval_every 0 --sp 2 \
  --out "$dir/kill" > "$dir/kill.log" 2>&1 &
job=$!
for _ in $(seq 300); do [ -s "$dir/kill/metrics.jsonl" ] && break; sleep 0.1; done
[ -s "$dir/kill/metrics.jsonl" ] || { kill -9 $job; cat "$dir/kill.log"; fail "the 2-rank job never started training"; }
ranks=($(children_of $job))
[ ${#ranks[@]} -eq 2 ] || { kill -9 $job; fail "expected 2 rank processes under mpiexec, found ${#ranks[@]}"; }
victim=${ranks[1]}
# the launcher reports the rank (the PID it prints may be 0 once the process is gone)
vrank=$(tr '\0' '\n' < /proc/$victim/environ | sed -n 's/^\(OMPI_COMM_WORLD_RANK\|PMIX_RANK\)=//p' | head -1)
[ -n "$vrank" ] || { kill -9 $job; fail "cannot tell the rank of PID $victim"; }
t0=$(date +%s)
kill -9 "$victim"
status=0
for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
if kill -0 $job 2>/dev/null; then
  kill -9 $job; cat "$dir/kill.log"; fail "the job was still running 30 s after rank $vrank was killed"
fi
wait $job || status=$?
took=$(( $(date +%s) - t0 ))
[ $status -ne 0 ] || fail "exit status 0 after rank $vrank was killed"
grep -qE "rank $vrank with PID .*(signal 9|Killed)" "$dir/kill.log" ||
  { cat "$dir/kill.log"; fail "the message does not name the killed rank $vrank (PID $victim)"; }
echo "killed rank $vrank: job ended in ${took}s with status $status: $(grep -m1 -E "rank $vrank with PID" "$dir/kill.log" | sed 's/^ *//')"
# 5. SIGUSR1 to the launcher (forwarded to every rank), then to one rank only
for target in launcher rank; do
  out="$dir/usr1_$target"
  "${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" --steps 100000 --batch_size 4 --eval_every 0 \
    --out "$out" > "$out.log" 2>&1 &
  job=$!
  for _ in $(seq 300); do [ -s "$out/metrics.jsonl" ] && break; sleep 0.1; done
  [ -s "$out/metrics.jsonl" ] || { kill -9 $job; cat "$out.log"; fail "$target: the job never started"; }
  if [ $target = launcher ]; then kill -USR1 $job; else kill -USR1 "$(children_of $job | tail -1)"; fi
  status=0
  wait $job || status=$?
  [ $status -eq 75 ] || { cat "$out.log"; fail "SIGUSR1 to the $target: exit status $status, expected 75"; }
  k=$($PY -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['step'])" "$out/metrics.jsonl")
  [ -f "$out/$(printf 'ckpt_%08d.h5' "$k")" ] || fail "SIGUSR1 to the $target: no checkpoint at the last step $k"
  echo "SIGUSR1 to the $target: every rank stopped at step $k with a checkpoint, exit status 75"
done
echo "train_mpi: ok"
