#!/usr/bin/env bash
# Data parallelism on GPUs (NCCL), on a machine with at least 2 GPUs:
#  1. test_nccl_ops under mpiexec -n 2: the NCCL data plane against exact values;
#  2. dp = 2 (batch b per GPU) equals one GPU (batch 2b) within bf16 tolerance: the first step's
#     loss and gradient norm, the gradient itself (AdamW's first moment after one step, clip
#     off: m = (1 - beta1) g), and 200-step loss curves with validation (every 50 steps);
#  3. throughput of gdn512m (B16 x T2048 per GPU, random vocab-32000 token shard): 1 GPU vs
#     dp = 2, median tokens/s of steps 4..N; the 2-GPU run also with one all-reduce after the
#     backward pass instead of buckets that overlap it (GDN_GRAD_BUCKET_MB=0);
#  4. kill -9 of one rank of the running 2-GPU job: the job ends within 30 s, naming the rank;
#  z. ZeRO-1: dp = 2 with --zero 1 vs --zero 0 (tiny, 20 steps): loss curves within 1e-3 relative
#     (bf16 tolerance), the per-rank optimizer state and GPU memory of both, the moments of the
#     final checkpoints (full size in both) compared.
# DP_PARTS selects parts (default "1 2 3 z"; 3 includes 4), e.g. DP_PARTS=z for ZeRO-1 alone;
# DP_QUICK=1 runs parts 1 and 2 only.
# Usage: test_gpu_dp.sh BUILD_DIR [OUT_DIR]. Exit 0: passed; 77: fewer than 2 GPUs or no
# mpiexec; 1: a check failed. Prints "result:" lines; logs go to OUT_DIR/logs.tgz.
set -uo pipefail
NAME=test_gpu_dp LOGS_TGZ=logs.tgz
source "$(dirname "$0")/multi_gpu_common.sh"
PARTS=${DP_PARTS:-$([ "${DP_QUICK:-0}" = 1 ] && echo "1 2" || echo "1 2 3 z")}
part() { [[ " ${PARTS//,/ } " == *" $1 "* ]]; } # part N: whether part N runs
nvidia-smi topo -m > "$logs/topo.txt" 2>&1
echo "result: GPUs: $(head -1 "$logs/gpus.txt" | cut -d, -f2) x $n_gpu; link GPU0-GPU1: $(sed 's/\x1b\[[0-9;]*m//g' "$logs/topo.txt" | awk 'NR > 1 && $1 == "GPU0" {print $3; exit}')"

# 1. the data plane
if ! part 1; then :
elif timeout 120 "${MPIRUN[@]}" "$BUILD/tests/gpu/test_nccl_ops" > "$logs/nccl_ops.log" 2>&1; then
  echo "result: $(grep -m1 '^test_nccl_ops:' "$logs/nccl_ops.log")"
  grep -m1 '^ZeRO-1 step' "$logs/nccl_ops.log" | sed 's/^/result: /'
else
  tail -20 "$logs/nccl_ops.log"; fail "test_nccl_ops"
fi

# 2. dp = 2 vs one GPU, tiny preset on the byte-level corpus
# dp ranks take interleaved samples: 2 x 8 sequences are the one-GPU batch of 16, and 2 x 2
# validation batches of 8 its 2 batches of 16
small=(--preset tiny --data "$SRC/data/kjv.txt.gz" --seed 7 --backend cuda --warmup_steps 5)
one() { timeout 120 "$GDN" train "${small[@]}" --batch_size 16 --eval_batches 2 "$@"; }
two() { timeout 120 "${MPIRUN[@]}" "$GDN" train "${small[@]}" --batch_size 8 --eval_batches 4 "$@"; }
if part 2; then
one --steps 1 --grad_clip 0 --out "$dir/g1" > "$logs/grad_1gpu.log" 2>&1 || fail "1-GPU one-step run"
two --steps 1 --grad_clip 0 --out "$dir/g2" > "$logs/grad_2gpu.log" 2>&1 || fail "2-GPU one-step run"
one --steps 200 --eval_every 50 --out "$dir/c1" > "$logs/curve_1gpu.log" 2>&1 || fail "1-GPU 200-step run"
two --steps 200 --eval_every 50 --out "$dir/c2" > "$logs/curve_2gpu.log" 2>&1 || fail "2-GPU 200-step run"
grep -q "GPUs: one per rank" "$logs/curve_2gpu.log" || fail "the 2-GPU run did not report its GPUs"
cp "$dir/c1/metrics.jsonl" "$logs/curve_1gpu.jsonl" 2>/dev/null
cp "$dir/c2/metrics.jsonl" "$logs/curve_2gpu.jsonl" 2>/dev/null
$PY - "$dir" <<'PY' || fail "dp = 2 does not match one GPU"
import json, sys, h5py, numpy as np
d = sys.argv[1]
rows = lambda r: [json.loads(l) for l in open(f"{d}/{r}/metrics.jsonl")]
g1, g2 = rows("g1")[0], rows("g2")[0]
rel = lambda a, b: abs(a - b) / abs(b)
e_loss, e_norm = rel(g2["loss"], g1["loss"]), rel(g2["grad_norm"], g1["grad_norm"])
def moments(r):
    with h5py.File(f"{d}/{r}/ckpt_00000001.h5", "r") as f:
        return np.concatenate([f["optim/m"][n][()].ravel().astype(np.float64) for n in sorted(f["optim/m"])])
m1, m2 = moments("g1"), moments("g2")
e_grad = np.linalg.norm(m2 - m1) / np.linalg.norm(m1)
print(f"result: step 1, dp=2 (B8 per GPU) vs 1 GPU (B16): loss {g2['loss']:.6f} vs {g1['loss']:.6f} (rel {e_loss:.1e}), "
      f"grad norm rel {e_norm:.1e}, gradient (AdamW m) rel L2 {e_grad:.1e}")
c1, c2 = rows("c1"), rows("c2")
assert [r["step"] for r in c1] == [r["step"] for r in c2] == list(range(1, 201))
worst = max(rel(b["loss"], a["loss"]) for a, b in zip(c1, c2))
vals = [(a["val_loss"], b["val_loss"]) for a, b in zip(c1, c2) if "val_loss" in a]
e_end, e_val = rel(c2[-1]["loss"], c1[-1]["loss"]), max(rel(b, a) for a, b in vals)
print(f"result: 200 steps: final loss {c2[-1]['loss']:.4f} vs {c1[-1]['loss']:.4f} (rel {e_end:.1e}), worst step rel "
      f"{worst:.1e}, final val_loss {vals[-1][1]:.4f} vs {vals[-1][0]:.4f}, val_loss at steps 50/100/150/200 worst rel "
      f"{e_val:.1e}")
assert e_loss < 1e-3 and e_norm < 2e-2 and e_grad < 2e-2, "first step differs beyond bf16 tolerance"
assert len(vals) == 4 and e_val < 2e-2 and worst < 5e-2, "loss curves differ beyond bf16 tolerance"
PY
fi

if part z; then # ZeRO-1 vs replicated optimizer state, dp = 2
for z in 0 1; do
  two --steps 20 --eval_every 10 --zero $z --out "$dir/z$z" > "$logs/zero$z.log" 2>&1 || fail "2-GPU --zero $z run"
  cp "$dir/z$z/metrics.jsonl" "$logs/zero$z.jsonl" 2>/dev/null
done
grep -q "one reduce-scatter after the backward pass" "$logs/zero1.log" || fail "the --zero 1 run did not report its collectives"
$PY - "$dir" "$logs" <<'PY' || fail "--zero 1 does not match --zero 0 on 2 GPUs"
import json, re, sys, h5py, numpy as np
d, logs = sys.argv[1], sys.argv[2]
rows = lambda r: [json.loads(l) for l in open(f"{d}/{r}/metrics.jsonl")]
def logline(z, start):
    return next((l.strip() for l in open(f"{logs}/zero{z}.log") if l.startswith(start)), "")
a, b = rows("z0"), rows("z1")
assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 21)), "steps differ"
rel = lambda x, y: abs(x - y) / abs(y)
e_loss = max(rel(y["loss"], x["loss"]) for x, y in zip(a, b))
e_val = max(rel(y["val_loss"], x["val_loss"]) for x, y in zip(a, b) if "val_loss" in x)
e_norm = max(rel(y["grad_norm"], x["grad_norm"]) for x, y in zip(a, b))
with h5py.File(f"{d}/z0/ckpt_00000020.h5", "r") as f0, h5py.File(f"{d}/z1/ckpt_00000020.h5", "r") as f1:
    cat = lambda f, g: np.concatenate([f[g][n][()].ravel().astype(np.float64) for n in f[g]])
    assert sorted(f0["optim/m"]) == sorted(f1["optim/m"]) and cat(f0, "optim/m").size == cat(f1, "optim/m").size
    e_m = np.linalg.norm(cat(f1, "optim/m") - cat(f0, "optim/m")) / np.linalg.norm(cat(f0, "optim/m"))
mib = lambda z: float(re.search(r"([0-9.]+) MiB", logline(z, "optimizer state:")).group(1))
gpu = lambda z: float(re.search(r"optimizer state ([0-9.]+) MiB", logline(z, "GPU memory per rank:")).group(1))
print(f"result: ZeRO-1, dp=2 tiny 20 steps: --zero 1 vs --zero 0 loss worst rel {e_loss:.1e}, val_loss {e_val:.1e}, "
      f"grad norm {e_norm:.1e}; step-20 moments (full size in both checkpoints) rel L2 {e_m:.1e}; optimizer state "
      f"per rank {mib(1):.3f} vs {mib(0):.3f} MiB; GPU parameters + gradients + optimizer state per rank "
      f"{gpu(1):.3f} vs {gpu(0):.3f} MiB")
assert e_loss < 1e-3 and e_val < 1e-3, "loss curves differ beyond bf16 tolerance"
assert abs(2 * mib(1) - mib(0)) < 1e-2 * mib(0), "the optimizer state is not halved"
PY
grep -h "^NCCL on rank 0 per step" "$logs/zero1.log" | head -1 | sed 's/^/result: ZeRO-1: /'
fi

if part 3; then # throughput, and a killed rank (part 4)
# 3. throughput of gdn512m: random tokens (vocab 32000) in one uint16 shard
random_shard "$dir/rand.bin"
big=(--preset gdn512m --data "$dir/rand.bin" --backend cuda --steps 1000 --eval_every 0 --ckpt_every 0
     --val_tokens 100000 --log_every 1)
STEPS=14
# run_big NAME KILL_RANK CMD...: starts the run (CMD is gdn or mpiexec itself, so that its ranks
# are its children), waits for STEPS metrics lines (at most 180 s), then kills it: all of it, or
# with KILL_RANK=1 one rank of the mpiexec job, timing the job's end
run_big() {
  local name=$1 kill_rank=$2; shift 2
  gpus_idle
  "$@" --out "$dir/$name" > "$logs/$name.log" 2>&1 &
  local job=$! t0 ok=0
  for _ in $(seq 1800); do
    [ -f "$dir/$name/metrics.jsonl" ] && [ "$(wc -l < "$dir/$name/metrics.jsonl")" -ge $STEPS ] && { ok=1; break; }
    kill -0 $job 2>/dev/null || break
    sleep 0.1
  done
  cp "$dir/$name/metrics.jsonl" "$logs/$name.jsonl" 2>/dev/null
  if [ $ok -eq 0 ]; then
    kill -9 $job 2>/dev/null; for p in $(children_of $job); do kill -9 "$p"; done
    tail -20 "$logs/$name.log"; fail "$name: did not reach $STEPS steps"; return
  fi
  if [ "$kill_rank" != 1 ]; then
    for p in $(children_of $job); do kill -9 "$p"; done; kill -9 $job 2>/dev/null; wait $job 2>/dev/null
    return
  fi
  local ranks=($(children_of $job))
  [ ${#ranks[@]} -eq 2 ] || { kill -9 $job "${ranks[@]}"; fail "$name: expected 2 rank processes, found ${#ranks[@]}"; return; }
  local victim=${ranks[1]}
  local vrank=$(tr '\0' '\n' < /proc/$victim/environ | sed -n 's/^\(OMPI_COMM_WORLD_RANK\|PMIX_RANK\)=//p' | head -1)
  t0=$(date +%s%N)
  kill -9 "$victim"
  for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then
    kill -9 $job "${ranks[@]}" 2>/dev/null
    fail "the 2-GPU job was still running 30 s after rank $vrank was killed"; return
  fi
  local st=0; wait $job || st=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ $st -ne 0 ] || fail "exit status 0 after rank $vrank was killed"
  if grep -qE "rank $vrank with PID .*(signal 9|Killed)" "$logs/$name.log"; then
    echo "result: kill -9 of rank $vrank during 2-GPU training: job ended in $((ms / 1000)).$(( ms % 1000 / 100 )) s, status $st: $(grep -m1 -E "rank $vrank with PID" "$logs/$name.log" | sed 's/^ *//')"
  else
    tail -20 "$logs/$name.log"; fail "the message does not name the killed rank $vrank"
  fi
}
run_big big_1gpu 0 "$GDN" train "${big[@]}"
run_big big_2gpu 1 "${MPIRUN[@]}" "$GDN" train "${big[@]}"
export GDN_GRAD_BUCKET_MB=0
run_big big_2gpu_flat 0 "${MPIRUN[@]}" -x GDN_GRAD_BUCKET_MB "$GDN" train "${big[@]}"
unset GDN_GRAD_BUCKET_MB
$PY - "$logs" <<'PY' || fail "throughput"
import json, os, sys
d = sys.argv[1]
def tps(name):
    p = f"{d}/{name}.jsonl"
    if not os.path.exists(p): return None
    r = [json.loads(l)["tokens_per_s"] for l in open(p)][3:]
    return sorted(r)[len(r) // 2] if r else None
one, two, flat = tps("big_1gpu"), tps("big_2gpu"), tps("big_2gpu_flat")
print(f"result: gdn512m B16xT2048 per GPU, median tokens/s of steps 4..: 1 GPU {one:,.0f}; dp=2 {two:,.0f} "
      f"({two / one:.3f}x, 64 MB buckets overlapping the backward)"
      + (f"; dp=2 one all-reduce after the backward {flat:,.0f} ({flat / one:.3f}x)" if flat else ""))
assert two / one >= 1.9, "dp = 2 gives less than 1.9x the tokens/s of one GPU"
PY
grep -h "^GPUs: one per rank" "$logs/big_2gpu.log" | head -1 | sed 's/^/result: /'
fi
echo "status: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
