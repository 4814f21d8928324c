#!/usr/bin/env bash
# Sequence parallelism on GPUs (NCCL, the pass exchange), on a machine with at least 2 GPUs:
#  0. test_seqpar_cuda under mpiexec -n 2: the hooks' transfers against exact values (sp = 2,
#     also on communicators split by ncclCommSplit with GDN_NCCL_SPLIT=1; with 4 GPUs also
#     dp 2 x sp 2 and sp 4); --sp_exchange gather with --backend cuda is refused with a message;
#  a. sp = 2 equals one GPU within bf16 tolerance after one step (tiny preset, seq_len 256: two
#     delta-rule chunks per segment): loss, validation loss, gradient norm, and the gradient itself
#     (AdamW's first moment after one step with clipping off: m = (1 - beta1) g);
#  b. 200 steps of tiny, sp = 2 vs one GPU: validation losses within 2% (final loss and the worst
#     step's relative gap printed);
#  c. the longest sequence of gdn512m at batch 1 that trains (2 steps) on one GPU and with sp = 2:
#     powers of two from a guess, then bisection to STEP_T tokens; running out of device memory
#     ("cannot allocate" / "out of memory") is the signal, any other failure fails the test;
#  d. tokens/s at the one-GPU maximum length: sp = 2 vs one GPU (median of steps 3..).
# PARTS (default 0abcd) selects the parts to run, e.g. PARTS=0ab or PARTS=cd; d without c runs
# at TPS_T tokens (default 81920, part c's one-GPU result on an H200).
# Usage: test_gpu_sp.sh BUILD_DIR [OUT_DIR]. Exit 0: passed; 77: fewer than 2 GPUs or no
# mpiexec; 1: a check failed. Prints "result:" lines; logs go to OUT_DIR/logs_sp.tgz.
set -uo pipefail
NAME=test_gpu_sp LOGS_TGZ=logs_sp.tgz
source "$(dirname "$0")/multi_gpu_common.sh"
STEP_T=${STEP_T:-8192} # granularity of the longest-sequence search (tokens)
PARTS=${PARTS:-0abcd}
part() { [[ "$PARTS" == *"$1"* ]]; }
echo "result: GPUs: $(head -1 "$logs/gpus.txt" | cut -d, -f2) x $n_gpu"

# 0. the hooks' transfers, and the refusal of the gather exchange
ops() { # NAME RANKS SP [MPIEXEC FLAGS]
  local name=$1 n=$2 sp=$3; shift 3
  if timeout 120 mpiexec -n "$n" -x NCCL_NVLS_ENABLE "$@" "$BUILD/tests/gpu/test_seqpar_cuda" "$sp" \
      > "$logs/$name.log" 2>&1; then
    echo "result: $(grep -m1 '^test_seqpar_cuda:' "$logs/$name.log")"
  else
    tail -20 "$logs/$name.log"; fail "test_seqpar_cuda ($name)"
  fi
}
tiny=(--preset tiny --data "$SRC/data/kjv.txt.gz" --seed 7 --backend cuda --warmup_steps 5 --seq_len 256
      --batch_size 8 --eval_batches 2)
if part 0; then
ops seqpar_sp2 2 2
ops seqpar_sp2_split 2 2 -x GDN_NCCL_SPLIT=1
ops seqpar_dp2_split 2 1 -x GDN_NCCL_SPLIT=1
if [ "$n_gpu" -ge 4 ]; then
  ops seqpar_dp2sp2 4 2
  ops seqpar_sp4 4 4
fi
if timeout 60 "${MPIRUN[@]}" "$GDN" train "${tiny[@]}" --steps 1 --sp 2 --sp_exchange gather --out "$dir/gather" \
    > "$logs/gather.log" 2>&1; then
  fail "--sp_exchange gather ran with --backend cuda"
elif grep -q "backend cuda with --sp_exchange gather" "$logs/gather.log"; then
  echo "result: refused: $(grep -m1 -o 'backend cuda with --sp_exchange gather.*' "$logs/gather.log")"
else
  tail -5 "$logs/gather.log"; fail "no reason given for refusing --sp_exchange gather on cuda"
fi
fi

if part a || part b; then
# a, b. sp = 2 vs one GPU on the same batches (the ranks of a sequence read the same windows)
one() { timeout 180 "$GDN" train "${tiny[@]}" "$@"; }
two() { timeout 180 "${MPIRUN[@]}" "$GDN" train "${tiny[@]}" --sp 2 "$@"; }
one --steps 1 --grad_clip 0 --out "$dir/g1" > "$logs/grad_1gpu.log" 2>&1 || fail "1-GPU one-step run"
two --steps 1 --grad_clip 0 --out "$dir/g2" > "$logs/grad_sp2.log" 2>&1 || fail "sp=2 one-step run"
curves=0
if part b; then
  curves=1
  one --steps 200 --eval_every 50 --out "$dir/c1" > "$logs/curve_1gpu.log" 2>&1 || fail "1-GPU 200-step run"
  two --steps 200 --eval_every 50 --out "$dir/c2" > "$logs/curve_sp2.log" 2>&1 || fail "sp=2 200-step run"
fi
grep -q "halos (bf16) and states (fp32) rank to rank over NCCL" "$logs/grad_sp2.log" ||
  fail "the sp=2 run did not report its sequence-parallel exchange"
for f in grad_sp2 curve_sp2; do
  [ -f "$logs/$f.log" ] || continue
  grep -h "sequence parallelism .* MB at most\|^NCCL on rank 0 per step" "$logs/$f.log" | sed "s/^/result: $f: /"
done
cp "$dir/c1/metrics.jsonl" "$logs/curve_1gpu.jsonl" 2>/dev/null
cp "$dir/c2/metrics.jsonl" "$logs/curve_sp2.jsonl" 2>/dev/null
$PY - "$dir" "$curves" <<'PY' || fail "sp = 2 does not match one GPU"
import json, sys, h5py, numpy as np
d, curves = sys.argv[1], sys.argv[2] == "1"
rows = lambda r: [json.loads(l) for l in open(f"{d}/{r}/metrics.jsonl")]
rel = lambda a, b: abs(a - b) / abs(b)
g1, g2 = rows("g1")[-1], rows("g2")[-1]
e_loss, e_norm, e_val = rel(g2["loss"], g1["loss"]), rel(g2["grad_norm"], g1["grad_norm"]), rel(g2["val_loss"], g1["val_loss"])
def moments(r):
    with h5py.File(f"{d}/{r}/ckpt_00000001.h5", "r") as f:
        return np.concatenate([f["optim/m"][n][()].ravel().astype(np.float64) for n in sorted(f["optim/m"])])
m1, m2 = moments("g1"), moments("g2")
e_grad = np.linalg.norm(m2 - m1) / np.linalg.norm(m1)
print(f"result: step 1, tiny B8 x T256, sp=2 (T128 per GPU) vs 1 GPU: loss {g2['loss']:.6f} vs {g1['loss']:.6f} "
      f"(rel {e_loss:.1e}), val_loss rel {e_val:.1e}, grad norm rel {e_norm:.1e}, gradient (AdamW m) rel L2 {e_grad:.1e}")
assert e_loss < 1e-3 and e_val < 1e-3 and e_norm < 2e-2 and e_grad < 2e-2, "first step differs beyond bf16 tolerance"
if not curves:
    sys.exit(0)
c1, c2 = rows("c1"), rows("c2")
assert [r["step"] for r in c1] == [r["step"] for r in c2] == list(range(1, 201)), "step lists differ"
worst = max(rel(b["loss"], a["loss"]) for a, b in zip(c1, c2))
vals = [(a["step"], a["val_loss"], b["val_loss"]) for a, b in zip(c1, c2) if "val_loss" in a]
assert len(vals) == 4 and all("val_loss" in b for a, b in zip(c1, c2) if "val_loss" in a), "validation steps differ"
e_end, e_vals = rel(c2[-1]["loss"], c1[-1]["loss"]), max(rel(b, a) for _, a, b in vals)
print(f"result: 200 steps: final loss {c2[-1]['loss']:.4f} vs {c1[-1]['loss']:.4f} (rel {e_end:.1e}), final val_loss "
      f"{vals[-1][2]:.4f} vs {vals[-1][1]:.4f}, val_loss at steps 50/100/150/200 worst rel {e_vals:.1e}, worst step "
      f"loss rel {worst:.1e}")
assert e_vals < 2e-2, "200 steps: validation losses differ by more than 2%"
PY
fi

if part c || part d; then
# c. the longest sequence: gdn512m, batch 1, random tokens (vocab 32000) in one uint16 shard
random_shard "$dir/rand.bin"
big=(--preset gdn512m --data "$dir/rand.bin" --backend cuda --batch_size 1 --val_tokens 0 --eval_every 0
     --ckpt_every 0 --log_every 1)
# the probes start from saved weights: drawing 512M random parameters takes longer than a probe
gpus_idle
if ! timeout 300 "$GDN" train "${big[@]}" --steps 1 --seq_len 2048 --out "$dir/init" > "$logs/init.log" 2>&1; then
  tail -20 "$logs/init.log"; fail "gdn512m weights for the probes"
fi
INIT=$dir/init/ckpt_00000001.h5
big+=(--init_from "$INIT")

# run_steps NAME SP SEQ_LEN STEPS: trains until STEPS metrics lines exist, then stops the run.
# Returns 0 (done), 1 (out of device memory) or 2 (another failure; the log's end is printed).
run_steps() {
  local name=$1 sp=$2 T=$3 steps=$4 job ok=0
  gpus_idle
  if [ "$sp" = 1 ]; then
    "$GDN" train "${big[@]}" --steps 100000 --seq_len "$T" --out "$dir/$name" > "$logs/$name.log" 2>&1 &
  else
    "${MPIRUN[@]}" "$GDN" train "${big[@]}" --steps 100000 --seq_len "$T" --sp "$sp" --out "$dir/$name" \
      > "$logs/$name.log" 2>&1 &
  fi
  job=$!
  for _ in $(seq 1800); do # 180 s
    [ -f "$dir/$name/metrics.jsonl" ] && [ "$(wc -l < "$dir/$name/metrics.jsonl")" -ge "$steps" ] && { ok=1; break; }
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  cp "$dir/$name/metrics.jsonl" "$logs/$name.jsonl" 2>/dev/null
  for p in $(children_of $job); do kill -9 "$p" 2>/dev/null; done
  kill -9 $job 2>/dev/null; wait $job 2>/dev/null
  rm -rf "${dir:?}/$name"
  [ $ok = 1 ] && return 0
  grep -qiE "cannot allocate|out of memory" "$logs/$name.log" && return 1
  tail -20 "$logs/$name.log" >&2
  return 2
}

# longest SP GUESS HOW: the largest multiple of STEP_T that trains 2 steps. From GUESS, up until a
# probe runs out of memory or down until one trains, by doubling / halving (HOW = scale: the size
# is unknown) or by steps of STEP_T, 2 STEP_T, 4 STEP_T ... (HOW = near: GUESS is close), then by
# bisection. Prints it (0: none fits, -1: a probe failed otherwise); the probes go to probes.txt.
longest() {
  local sp=$1 T=$2 how=$3 lo=0 hi=0 step=$STEP_T r
  while :; do
    run_steps "probe_sp${sp}_$T" "$sp" "$T" 2; r=$?
    echo "sp=$sp seq_len=$T: $(case $r in 0) echo ok;; 1) echo 'out of memory';; *) echo FAILED;; esac)" \
      >> "$logs/probes.txt"
    [ $r = 2 ] && { echo -1; return; }
    if [ $r = 0 ]; then lo=$T; else hi=$T; fi
    if [ $lo != 0 ] && [ $hi != 0 ]; then
      [ $((hi - lo)) -le $STEP_T ] && break
      T=$(( (lo + hi) / 2 / STEP_T * STEP_T ))
    elif [ $hi = 0 ]; then # all fitted so far: up
      if [ "$how" = scale ]; then T=$((T * 2)); else T=$((T + step)); step=$((step * 2)); fi
      [ $T -gt 4000000 ] && break
    else # none fitted so far: down
      [ $T -le $STEP_T ] && break
      if [ "$how" = scale ]; then T=$((T / 2 / STEP_T * STEP_T)); else T=$((T - step)); step=$((step * 2)); fi
      [ $T -lt $STEP_T ] && T=$STEP_T
    fi
  done
  echo $lo
}
if part c; then
t0=$(date +%s)
max1=$(longest 1 65536 scale)
max2=-1
# sp = 2: each GPU holds half the activations, so about twice the one-GPU length
if [ "$max1" -gt 0 ]; then max2=$(longest 2 $((2 * max1)) near); fi
sed 's/^/  probe: /' "$logs/probes.txt"
ratio=$(awk -v a="$max2" -v b="$max1" 'BEGIN { r = 0; if (b > 0) r = a / b; printf "%.2f", r }')
echo "result: longest gdn512m sequence at batch 1 that trains (granularity $STEP_T tokens): 1 GPU $max1 tokens," \
  "sp=2 $max2 tokens (${ratio}x); search took $(( $(date +%s) - t0 )) s"
if [ "$max1" -le 0 ] || [ "$max2" -le 0 ]; then
  fail "the longest-sequence search failed (see the probes above)"
elif [ $((10 * max2)) -lt $((18 * max1)) ]; then
  fail "sp = 2 trains less than 1.8x the one-GPU length: the segments should need half the memory per GPU"
fi
else
max1=${TPS_T:-81920} # part d alone: the length found by part c on an H200
fi

# d. tokens/s at the one-GPU maximum
if [ "$max1" -gt 0 ]; then
  run_steps tps_1gpu 1 "$max1" 8 || fail "1-GPU run at $max1 tokens"
  run_steps tps_sp2 2 "$max1" 8 || fail "sp=2 run at $max1 tokens"
  $PY - "$logs" "$max1" <<'PY' || fail "tokens/s"
import json, os, sys
d, T = sys.argv[1], int(sys.argv[2])
def tps(name):
    r = [json.loads(l)["tokens_per_s"] for l in open(f"{d}/{name}.jsonl")][2:]
    return sorted(r)[len(r) // 2]
one, two = tps("tps_1gpu"), tps("tps_sp2")
print(f"result: gdn512m B1 x T{T}, median tokens/s of steps 3..8: 1 GPU {one:,.0f} ({T / one:.2f} s per step); "
      f"sp=2 {two:,.0f} ({T / two:.2f} s per step, {two / one:.2f}x)")
assert two > one, "sp = 2 is slower than one GPU at this length"
PY
fi
fi
echo "status: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
