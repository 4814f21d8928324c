#!/usr/bin/env bash
# The validation loss does not depend on how the job is laid out: one checkpoint evaluated
# (gdn train --eval_only) on one rank, on dp = 2 and on sp = 2 ranks gives the same val_loss:
# bitwise for dp (each validation batch is computed whole by one rank, the batches are summed
# in order), to rounding for sp (a batch's sum is formed from two segments). Two sizes: 3
# batches of 4 windows (an odd number of batches over 2 ranks) and more batches than the
# validation data holds (31 windows: the last batch is partial). The training run's own final
# val_loss equals the one-rank evaluation. The same holds for the validation inside training
# (one step at lr 1e-30 leaves the weights as they were, so the three layouts evaluate the same
# weights). Threads are fixed at 1 per rank: the CPU kernels'
# sums depend on the thread count.
# Usage: train_eval_layout.sh GDN "MPIEXEC -n"
set -euo pipefail
source "$(dirname "$0")/lib.sh"
read -r -a MPIRUN <<< "$2"
PY=/usr/bin/python3
small=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 64 --n_layers 2 --d_ff 128 --seq_len 64
       --batch_size 4 --val_tokens 2000 --threads 1 --seed 8)
"$GDN" train "${small[@]}" --steps 6 --eval_batches 3 --out "$dir/run" > /dev/null
# val NAME launcher...: the val_loss that --eval_only prints
val() {
  local name=$1; shift
  "$@" "$GDN" train "${small[@]}" --eval_only --resume auto --out "$dir/run" "${extra[@]}" > "$dir/$name.log" 2>&1 \
    || { cat "$dir/$name.log"; fail "$name: --eval_only failed"; }
  sed -n 's/^eval: step 6, val_loss \([^ ]*\) over \([0-9]*\) validation windows.*/\1 \2/p' "$dir/$name.log"
}
for eb in 3 100; do
  extra=(--eval_batches $eb)
  one=$(val one$eb env)
  dp=$(val dp$eb "${MPIRUN[@]}" 2)
  extra=(--eval_batches $eb --sp 2)
  sp=$(val sp$eb "${MPIRUN[@]}" 2)
  $PY - "$eb" "$one" "$dp" "$sp" "$dir/run/metrics.jsonl" <<'PY'
import json, sys
eb = int(sys.argv[1])
(one, n1), (dp, n2), (sp, n3) = (s.split() for s in sys.argv[2:5])
assert n1 == n2 == n3 == ("12" if eb == 3 else "31"), (n1, n2, n3)
one, dp, sp = float(one), float(dp), float(sp)
assert dp == one, f"dp 2 gives {dp!r}, one rank {one!r}"
assert abs(sp - one) <= 1e-6 * abs(one), f"sp 2 gives {sp!r}, one rank {one!r}"
if eb == 3:
    final = json.loads(open(sys.argv[5]).read().splitlines()[-1])["val_loss"]
    assert final == one, f"the run's final val_loss {final!r} != --eval_only {one!r}"
print(f"{n1} windows: one rank {one!r}, dp 2 {dp!r} (bitwise), sp 2 {sp!r}")
PY
done

# during training: the same weights on three layouts, 3 batches of 4 windows
tiny_step=(--steps 1 --lr 1e-30 --lr_min 1e-30 --weight_decay 0 --eval_batches 3)
"$GDN" train "${small[@]}" "${tiny_step[@]}" --out "$dir/t1" > /dev/null
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" "${tiny_step[@]}" --out "$dir/tdp" > /dev/null
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" "${tiny_step[@]}" --sp 2 --out "$dir/tsp" > /dev/null
$PY - "$dir/t1" "$dir/tdp" "$dir/tsp" <<'PY'
import json, sys
one, dp, sp = (json.loads(open(d + "/metrics.jsonl").read().splitlines()[-1])["val_loss"] for d in sys.argv[1:])
assert dp == one, f"training on dp 2: val_loss {dp!r}, one rank {one!r}"
assert abs(sp - one) <= 1e-6 * abs(one), f"training on sp 2: val_loss {sp!r}, one rank {one!r}"
print(f"in training: one rank {one!r}, dp 2 {dp!r} (bitwise), sp 2 {sp!r}")
PY
# every mixer kind (--mixers GDML) on sp 2, both exchanges: the same validation loss to rounding
mix=(--n_layers 4 --mixers GDML)
"$GDN" train "${small[@]}" "${tiny_step[@]}" "${mix[@]}" --out "$dir/m1" > /dev/null
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" "${tiny_step[@]}" "${mix[@]}" --sp 2 --out "$dir/msp" > /dev/null
"${MPIRUN[@]}" 2 "$GDN" train "${small[@]}" "${tiny_step[@]}" "${mix[@]}" --sp 2 --sp_exchange gather \
  --out "$dir/msg" > /dev/null
$PY - "$dir/m1" "$dir/msp" "$dir/msg" <<'PY'
import json, sys
one, sp, sg = (json.loads(open(d + "/metrics.jsonl").read().splitlines()[-1])["val_loss"] for d in sys.argv[1:])
for name, x in (("pass", sp), ("gather", sg)):
    assert abs(x - one) <= 1e-6 * abs(one), f"GDML on sp 2 ({name}): val_loss {x!r}, one rank {one!r}"
print(f"GDML: one rank {one!r}, sp 2 pass {sp!r}, gather {sg!r}")
PY
echo "train_eval_layout: ok"
