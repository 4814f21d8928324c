#!/usr/bin/env bash
# Documents under data and sequence parallelism: packed documents (several per window, some
# longer than a window) train to the same losses on one rank with batch 4, on dp = 2 ranks with
# batch 2 each (the same global samples: rank r takes g = s * 2 + r) and on sp = 2 ranks (each
# rank gets its segment's starts; a document open across the segment edge continues), to
# rounding; the validation loss of the final checkpoint is bitwise the same on dp 2 and to
# rounding on sp 2. Threads are fixed at 1 per rank.
# Usage: train_documents_layout.sh GDN "MPIEXEC -n"
set -euo pipefail
source "$(dirname "$0")/lib.sh"
read -r -a MPIRUN <<< "$2"
PY=/usr/bin/python3

$PY - "$dir/c.txt" <<'PY'
import random, sys
random.seed(9)
words = "the of and to in a is that for it as was with be by on not he this are or his".split()
docs = []
for i in range(300):
    n = random.choice([2, 5, 9, 17, 30, 45, 80])
    s = ""
    while len(s) < n: s += random.choice(words) + " "
    docs.append(s[:n - 1] + "\n")
open(sys.argv[1], "w").write("---\n".join(docs))
PY
"$GDN" data --in "$dir/c.txt" --out "$dir/c" --doc_sep --- --val-tokens 0 > /dev/null
run=(--preset tiny --data "$dir/c_train_*.bin" --vocab_size 257 --documents --eod_token 256
     --seq_len 32 --d_model 32 --n_layers 2 --head_dim 16 --d_ff 64 --threads 1 --val_tokens 800
     --eval_every 0 --eval_batches 3 --warmup_steps 1 --steps 4 --seed 4)
train() { # train NAME BATCH launcher...
  local name=$1 b=$2; shift 2
  "$@" "$GDN" train "${run[@]}" --batch_size "$b" "${extra[@]}" --out "$dir/$name" > "$dir/$name.log" 2>&1 \
    || { cat "$dir/$name.log"; fail "$name: gdn train failed"; }
}
extra=()
train one 4 env
train dp 2 "${MPIRUN[@]}" 2
extra=(--sp 2)
train sp 4 "${MPIRUN[@]}" 2
$PY - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
m = {k: [json.loads(l) for l in open(f"{d}/{k}/metrics.jsonl")] for k in ("one", "dp", "sp")}
for k in ("dp", "sp"):
    for a, b in zip(m["one"], m[k]):
        assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (k, a["step"], a["loss"], b["loss"])
va, vb = m["one"][-1]["val_loss"], m["sp"][-1]["val_loss"] # dp's batch of 2 validates 6 windows
assert abs(va - vb) <= 1e-5 * abs(va), (va, vb)
print("documents: one rank == dp 2 == sp 2 (losses to rounding; val_loss of sp 2 too)")
PY
# one checkpoint evaluated on each layout
val() {
  local name=$1; shift
  "$@" "$GDN" train "${run[@]}" --batch_size 4 "${extra[@]}" --eval_only --resume auto --out "$dir/one" \
    > "$dir/$name.log" 2>&1 || { cat "$dir/$name.log"; fail "$name: --eval_only failed"; }
  sed -n 's/^eval: step 4, val_loss \([^ ]*\) over.*/\1/p' "$dir/$name.log"
}
extra=()
one=$(val e1 env)
dp=$(val e2 "${MPIRUN[@]}" 2)
extra=(--sp 2)
sp=$(val e3 "${MPIRUN[@]}" 2)
$PY - "$one" "$dp" "$sp" <<'PY'
import sys
one, dp, sp = (float(x) for x in sys.argv[1:4])
assert dp == one, (dp, one)
assert abs(sp - one) <= 1e-6 * abs(one), (sp, one)
print(f"documents: val_loss {one!r} on one rank, bitwise on dp 2, {sp!r} on sp 2")
PY
echo "train_documents_layout: ok"
