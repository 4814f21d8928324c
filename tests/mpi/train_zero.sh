#!/usr/bin/env bash
# gdn train --zero 1 (ZeRO-1: AdamW moments sharded over the ranks) under mpiexec, on a model of
# 150,472 parameters (3 ranks pad it to 150,474):
#  1. 20-step loss curves (training and validation losses, gradient norms) of --zero 1 equal
#     those of --zero 0 within a relative 1e-5 on 2 and 3 ranks; the start-up log reports the
#     optimizer state per rank as 1/N of the unsharded one.
#  2. The --zero 1 checkpoint opens in h5py as a --zero 0 one does: the same datasets, shapes,
#     dtypes and crc32 attributes, full-size moments equal to the --zero 0 ones within 1e-5.
#  3. Resuming is bitwise: 3 ranks with --zero 1 stopped at step 12 and resumed, and stopped by
#     SIGUSR1 mid-run and resumed, end identical to a straight run (losses, weights, moments).
#  4. Checkpoints cross settings: --zero 1 -> --zero 0 and --zero 0 -> --zero 1 on 2 ranks
#     continue the straight curve within 1e-5; a 2-rank --zero 1 checkpoint resumes on 3 ranks
#     with --zero 1 and with --zero 0 alike (curves within 1e-5, final moments within 1e-5).
# Usage: train_zero.sh GDN "MPIEXEC -n"
set -euo pipefail
GDN=$1
read -r -a MPIRUN <<< "$2"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
job=
trap '[ -z "$job" ] || kill $job 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
PY=/usr/bin/python3
small=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 64 --n_layers 2 --d_ff 128 --seq_len 64
       --warmup_steps 5 --seed 5 --batch_size 4 --eval_batches 2 --eval_every 6 --decay_steps 20)
# 20 steps, checkpoints and validation at 6, 12, 18, 20 (12 x 8 samples split evenly over 2 and 3 ranks)
run=("${small[@]}" --steps 20 --ckpt_every 6 --keep 5)
train() { local n=$1; shift; "${MPIRUN[@]}" "$n" "$GDN" train "$@"; }

# 1. --zero 1 vs --zero 0 on 2 and 3 ranks
for n in 2 3; do
  for z in 0 1; do train $n "${run[@]}" --zero $z --out "$dir/n${n}z$z" > "$dir/n${n}z$z.log"; done
  grep -q "gradient reduce-scatter .* and parameter all-gather" "$dir/n${n}z1.log" ||
    { cat "$dir/n${n}z1.log"; fail "$n ranks: --zero 1 does not report its collectives"; }
done
$PY - "$dir" <<'PY'
import json, re, sys
d = sys.argv[1]
curve = lambda name: [json.loads(l) for l in open(f"{d}/{name}/metrics.jsonl")]
def state(name):
    line = next(l for l in open(f"{d}/{name}.log") if l.startswith("optimizer state:"))
    return float(re.match(r"optimizer state: ([0-9.]+) MiB", line).group(1)), line.strip()
for n in (2, 3):
    a, b = curve(f"n{n}z0"), curve(f"n{n}z1")
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 21))
    worst = 0.0
    for x, y in zip(a, b):
        for key in ("loss", "val_loss", "grad_norm"):
            assert (key in x) == (key in y), f"{n} ranks: {key} missing at step {x['step']}"
            if key in x:
                e = abs(x[key] - y[key]) / abs(x[key])
                assert e < 1e-5, f"{n} ranks: step {x['step']} {key} {y[key]} (--zero 1) vs {x[key]} (relative {e:.2e})"
                worst = max(worst, e)
    full, line0 = state(f"n{n}z0")
    mine, line1 = state(f"n{n}z1")
    assert f"sharded over {n} ranks" in line1, line1
    assert abs(mine * n - full) < 1e-3 * full, f"{n} ranks: {mine} MiB per rank, unsharded {full} MiB"
    print(f"{n} ranks: 20-step curves of --zero 1 and --zero 0 (loss, val_loss, grad_norm) max relative difference "
          f"{worst:.1e}; optimizer state {mine:.3f} MiB per rank vs {full:.3f} MiB")
PY

# 2. the --zero 1 checkpoint in h5py, against the --zero 0 one
$PY - "$dir/n3z0/ckpt_00000020.h5" "$dir/n3z1/ckpt_00000020.h5" <<'PY'
import sys, zlib, h5py, numpy as np
fa, fb = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
def walk(f):
    out = {}
    f.visititems(lambda k, o: out.__setitem__(k, o) if isinstance(o, h5py.Dataset) else None)
    return out
da, db = walk(fa), walk(fb)
assert sorted(da) == sorted(db), f"datasets differ: {sorted(set(da) ^ set(db))}"
worst, n_moments = {}, 0
for k in da:
    a, b = da[k], db[k]
    assert a.shape == b.shape and a.dtype == b.dtype, f"{k}: {b.shape} {b.dtype} vs {a.shape} {a.dtype}"
    if not k.startswith(("params/", "optim/")):
        continue
    x, y = a[()], b[()]
    assert int(b.attrs["crc32"]) == zlib.crc32(y.tobytes()), f"{k}: crc32 attribute does not match the data"
    e = float(np.linalg.norm(y.astype(np.float64) - x) / max(np.linalg.norm(x.astype(np.float64)), 1e-30))
    grp = k.rsplit("/", 1)[0]
    worst[grp] = max(worst.get(grp, 0.0), e)
    n_moments += k.startswith("optim/")
assert n_moments == 2 * len(fa["params"]), f"{n_moments} moment tensors for {len(fa['params'])} parameters"
assert all(e < 1e-5 for e in worst.values()), worst
assert dict(fb["state"].attrs)["world_size"] == 3
print(f"--zero 1 checkpoint (3 ranks): same {len(da)} datasets, shapes, dtypes and valid crc32 as --zero 0; "
      "full-size tensors vs --zero 0, worst relative L2: " + ", ".join(f"{g} {e:.1e}" for g, e in sorted(worst.items())))
PY

# 3. bitwise resume with --zero 1 on 3 ranks: stopped at step 12, and stopped by SIGUSR1
same() { $PY "$SRC/tests/e2e/same_run.py" "$@"; } # same A B STEP: bitwise identical losses and step-STEP checkpoints
train 3 "${run[@]}" --zero 1 --steps 12 --out "$dir/resumed" > /dev/null
train 3 "${run[@]}" --zero 1 --resume auto --out "$dir/resumed" > "$dir/resumed.log"
grep -q "resuming from .*ckpt_00000012.h5 at step 12" "$dir/resumed.log" || fail "3-rank --zero 1 run did not resume at step 12"
same "$dir/n3z1" "$dir/resumed" 20 || fail "3 ranks --zero 1: stop at 12 + resume differs from the straight run"
echo "3 ranks --zero 1: 20 steps straight == 12 + resume: losses, weights and moments bitwise identical"
# SIGUSR1 to the launcher mid-run (a step that depends on timing), resume to 6 steps later
sig=("${small[@]}" --zero 1 --eval_every 0)
# (mpiexec itself in the background, not a shell function: the signal must reach the launcher)
"${MPIRUN[@]}" 3 "$GDN" train "${sig[@]}" --steps 100000 --out "$dir/usr1" > "$dir/usr1.log" 2>&1 &
job=$!
for _ in $(seq 300); do [ -s "$dir/usr1/metrics.jsonl" ] && [ "$(wc -l < "$dir/usr1/metrics.jsonl")" -ge 3 ] && break; sleep 0.1; done
kill -USR1 $job
status=0
wait $job || status=$?
job=
[ $status -eq 75 ] || { cat "$dir/usr1.log"; fail "SIGUSR1: exit status $status, expected 75"; }
k=$($PY -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['step'])" "$dir/usr1/metrics.jsonl")
train 3 "${sig[@]}" --steps $((k + 6)) --resume auto --out "$dir/usr1" > "$dir/usr1_resume.log"
grep -q "resuming from .* at step $k " "$dir/usr1_resume.log" || { cat "$dir/usr1_resume.log"; fail "no resume at step $k"; }
train 3 "${sig[@]}" --steps $((k + 6)) --out "$dir/usr1_straight" > /dev/null
same "$dir/usr1_straight" "$dir/usr1" $((k + 6)) || fail "3 ranks --zero 1: SIGUSR1 at step $k + resume differs"
echo "3 ranks --zero 1: stopped by SIGUSR1 at step $k and resumed to $((k + 6)) == straight run, bitwise"

# 4. checkpoints across --zero settings and world sizes
close() { # close() A B STEPS...: losses and validation losses of B at least at the given steps within 1e-5 of A's
  $PY - "$@" <<'PY'
import json, sys
a, b = sys.argv[1], sys.argv[2]
la = {r["step"]: r for r in map(json.loads, open(a + "/metrics.jsonl"))}
lb = {r["step"]: r for r in map(json.loads, open(b + "/metrics.jsonl"))}
assert sorted(lb) == list(range(1, 21)), sorted(lb)
worst = 0.0
for s in range(13, 21):
    for key in ("loss", "val_loss"):
        if key in la[s]:
            e = abs(la[s][key] - lb[s][key]) / abs(la[s][key])
            assert e < 1e-5, f"step {s} {key}: {lb[s][key]} vs {la[s][key]} (relative {e:.2e})"
            worst = max(worst, e)
print(f"{worst:.1e}")
PY
}
for pair in "1 0" "0 1"; do
  read -r from to <<< "$pair"
  mkdir -p "$dir/x$from$to"
  cp "$dir/n2z$from/ckpt_00000012.h5" "$dir/x$from$to/"
  cp "$dir/n2z$from/metrics.jsonl" "$dir/x$from$to/"
  train 2 "${run[@]}" --zero $to --resume auto --out "$dir/x$from$to" > "$dir/x$from$to.log"
  grep -q "changed on resume: \"zero\": $to  (was \"zero\": $from)" "$dir/x$from$to.log" ||
    { cat "$dir/x$from$to.log"; fail "the --zero change is not reported on resume"; }
  e=$(close "$dir/n2z$from" "$dir/x$from$to") || fail "--zero $from checkpoint resumed with --zero $to leaves the curve"
  echo "2 ranks: --zero $from checkpoint at step 12 resumed with --zero $to: steps 13-20 within $e of the straight run"
done
for z in 1 0; do
  mkdir -p "$dir/w23z$z"
  cp "$dir/n2z1/ckpt_00000012.h5" "$dir/w23z$z/"
  train 3 "${run[@]}" --zero $z --resume auto --out "$dir/w23z$z" > "$dir/w23z$z.log"
  grep -q "written by 2 ranks (dp 2 x sp 1), this run has 3 (dp 3 x sp 1): data position 48 samples per data-parallel rank -> 32" \
    "$dir/w23z$z.log" || { cat "$dir/w23z$z.log"; fail "2 -> 3 ranks: data position not mapped"; }
done
$PY - "$dir/w23z0" "$dir/w23z1" <<'PY'
import json, sys, h5py, numpy as np
a, b = sys.argv[1], sys.argv[2]
la = [json.loads(l) for l in open(a + "/metrics.jsonl")]
lb = [json.loads(l) for l in open(b + "/metrics.jsonl")]
assert [r["step"] for r in la] == [r["step"] for r in lb] == list(range(13, 21))
worst = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(la, lb) for k in ("loss", "val_loss") if k in x)
fa, fb = h5py.File(a + "/ckpt_00000020.h5", "r"), h5py.File(b + "/ckpt_00000020.h5", "r")
wm = max(np.linalg.norm(fb[g][n][()].astype(np.float64) - fa[g][n][()]) / np.linalg.norm(fa[g][n][()].astype(np.float64))
         for g in ("optim/m", "optim/v") for n in fa[g])
assert worst < 1e-5 and wm < 1e-5, (worst, wm)
print(f"2-rank --zero 1 checkpoint on 3 ranks: --zero 1 vs --zero 0 resumes, steps 13-20 within {worst:.1e}, "
      f"step-20 moments within {wm:.1e}")
PY
echo "train_zero: ok"
