#!/usr/bin/env bash
# End-to-end: a loss, gradient or parameter that becomes NaN/Inf stops gdn train with exit
# status 3 and a message naming the step, and never reaches a checkpoint:
#  1. --lr 1e30, one step, a checkpoint every step: the update leaves the weights so large that
#     the step's validation overflows; no checkpoint, status 3.
#  2. the same over 3 steps with no validation before the end: the check before the step-1
#     checkpoint (finite weights that no longer compute) refuses it.
#  3. a good run with a checkpoint at step 2, resumed at --lr 1e30 to step 4: the last step's
#     loss is NaN; the step-2 checkpoint stays the newest, verifies and holds finite weights.
# metrics.jsonl stays parseable in every case (a step stopped by its loss says why in its line).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=${GDN_H5PY_PYTHON:-/usr/bin/python3}
small=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 64 --n_layers 2 --d_ff 128 --seq_len 64
       --batch_size 4 --eval_batches 2 --threads 1 --seed 3)

# expect_nonfinite NAME PATTERN args...: status 3, the message, no checkpoint written by this run
expect_nonfinite() {
  local name=$1 pat=$2; shift 2
  set +e; "$GDN" train "${small[@]}" "$@" --out "$dir/$name" > "$dir/$name.log" 2> "$dir/$name.err"; local st=$?; set -e
  [ $st -eq 3 ] || { cat "$dir/$name.err"; fail "$name: exit status $st, expected 3"; }
  grep -Eq "$pat" "$dir/$name.err" || { cat "$dir/$name.err"; fail "$name: message lacks /$pat/"; }
  grep -q "try a lower --lr" "$dir/$name.err" || fail "$name: no hint"
  $PY - "$dir/$name/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows, "no metrics lines"
print(f"  metrics: {len(rows)} lines, the last: {rows[-1].get('stopped', 'a good step')}")
PY
}

expect_nonfinite one "step 1: the (validation loss|training loss|gradient norm) is (NaN|[+-]Inf)" \
  --lr 1e30 --steps 1 --ckpt_every 1
ls "$dir/one"/ckpt_*.h5 > /dev/null 2>&1 && fail "one: a checkpoint was written"
expect_nonfinite three "step 1: the parameters after this step give a loss of (NaN|[+-]Inf)" \
  --lr 1e30 --steps 3 --ckpt_every 1 --eval_every 0
ls "$dir/three"/ckpt_*.h5 > /dev/null 2>&1 && fail "three: a checkpoint was written"

"$GDN" train "${small[@]}" --steps 2 --out "$dir/last" > /dev/null
expect_nonfinite last "step 4: the (training loss|gradient norm) is (NaN|[+-]Inf)" \
  --lr 1e30 --steps 4 --eval_every 0 --resume auto
[ "$(cd "$dir/last" && ls ckpt_*.h5)" = "ckpt_00000002.h5" ] || fail "last: checkpoints $(ls "$dir/last")"
"$GDN" inspect "$dir/last/ckpt_00000002.h5" > /dev/null || fail "last: the step-2 checkpoint does not verify"
$PY - "$dir/last/ckpt_00000002.h5" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
n = 0
for grp in ("params", "optim/m", "optim/v"):
    for name in f[grp]:
        assert np.isfinite(f[grp][name][()]).all(), f"{grp}/{name} not finite"
        n += 1
print(f"  step-2 checkpoint: {n} tensors, all finite")
PY
# the run goes on from the good checkpoint at a sane learning rate
"$GDN" train "${small[@]}" --steps 4 --resume auto --out "$dir/last" > "$dir/last2.log"
grep -q "resuming from .*ckpt_00000002.h5 at step 2" "$dir/last2.log" || fail "last: no resume from step 2"
$PY -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r['step'] for r in rows] == [1, 2, 3, 4] and 'val_loss' in rows[-1] and 'stopped' not in rows[-1], rows
" "$dir/last/metrics.jsonl" || fail "last: metrics after the resume"
echo "train_nonfinite: ok"
