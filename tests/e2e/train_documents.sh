#!/usr/bin/env bash
# End-to-end documents: gdn data --doc_sep writes the delimiters; gdn train --documents trains,
# a stop + resume gives bitwise the losses and weights of a straight run; a resume with changed
# document settings is refused; gdn eval reproduces the run's validation loss over the packed
# validation windows; gdn sample of a documents run works.
#   train_documents.sh GDN aligned  documents of exactly seq_len tokens: every window starts at a
#                                   document start and holds no other (runs on any backend)
#   train_documents.sh GDN packed   documents of every length, several per window: needs a CPU
#                                   model that honours document starts; exits 77 (CTest: skipped)
#                                   while the backend refuses starts inside a row
set -euo pipefail
source "$(dirname "$0")/lib.sh"
mode=${2:-aligned}
PY=/usr/bin/python3
T=32

$PY - "$dir/c.txt" "$mode" $T <<'PY'
import random, sys
random.seed(5)
path, mode, T = sys.argv[1], sys.argv[2], int(sys.argv[3])
words = "the of and to in a is that for it as was with be by on not he this are or his".split()
docs = []
for i in range(400):
    # aligned: T - 1 bytes, so with its delimiter a document is exactly one window
    n = T - 1 if mode == "aligned" else random.choice([1, 2, 5, 9, 17, 30, 31, 32, 45, 80])
    s = ""
    while len(s) < n: s += random.choice(words) + " "
    docs.append(s[:n - 1] + "\n")
open(path, "w").write("---\n".join(docs))
PY
"$GDN" data --in "$dir/c.txt" --out "$dir/c" --doc_sep --- --val-tokens 0 > "$dir/data.log"
grep -q '"eod_token": 256' "$dir/c_data.json" || fail "c_data.json lacks the delimiter"

val=$((T * 24)) # held out by gdn train: a whole number of aligned documents
run=(--preset tiny --data "$dir/c_train_*.bin" --vocab_size 257 --documents --eod_token 256
     --seq_len $T --batch_size 4 --d_model 32 --n_layers 2 --head_dim 16 --d_ff 64 --threads 2
     --val_tokens $val --eval_every 6 --eval_batches 3 --warmup_steps 2 --decay_steps 12 --seed 3)

if ! "$GDN" train "${run[@]}" --steps 12 --ckpt_every 6 --out "$dir/straight" > "$dir/straight.log" 2>&1; then
  if [ "$mode" = packed ] && grep -q "cannot run documents packed into one row" "$dir/straight.log"; then
    echo "SKIPPED: the CPU backend does not honour document starts inside a row yet"
    exit 77
  fi
  cat "$dir/straight.log" >&2
  fail "gdn train --documents failed"
fi
grep -q "^documents: 3.. in the training data" "$dir/straight.log" || { cat "$dir/straight.log" >&2; fail "no documents line"; }
"$GDN" train "${run[@]}" --steps 6 --out "$dir/resumed" > /dev/null
"$GDN" train "${run[@]}" --steps 12 --resume auto --out "$dir/resumed" > "$dir/resume.log"
grep -q "resuming from .*ckpt_00000006.h5 at step 6" "$dir/resume.log" || fail "did not resume at step 6"

$PY "$SRC/tests/e2e/same_run.py" "$dir/straight" "$dir/resumed" 12
$PY - "$dir/straight" <<'PY'
import json, sys, h5py
a = sys.argv[1]
la = [json.loads(l) for l in open(a + "/metrics.jsonl")]
assert all(x == x for x in (r["loss"] for r in la)), "NaN loss"
fa = h5py.File(a + "/ckpt_00000012.h5", "r")
c = fa.attrs["config"]
cfg = json.loads(c.decode() if isinstance(c, bytes) else c) # the checkpoint records the setting
assert cfg["documents"] is True and cfg["eod_token"] == 256, cfg
print("documents: straight 12 steps == 6 + resume 6, bitwise")
PY

# a changed document setting is refused on resume, naming both
if "$GDN" train "${run[@]}" --steps 14 --resume auto --out "$dir/resumed" --eod_token 10 > /dev/null 2> "$dir/err.txt"; then
  fail "resume with a changed eod_token was accepted"
fi
grep -q "eod_token 256.*eod_token 10" "$dir/err.txt" || { cat "$dir/err.txt" >&2; fail "refusal does not name the settings"; }
if "$GDN" train "${run[@]}" --steps 14 --resume auto --out "$dir/resumed" --doc_fill > /dev/null 2> "$dir/err.txt"; then
  fail "resume with a changed doc_fill was accepted"
fi
grep -q "doc_fill false.*doc_fill true" "$dir/err.txt" || { cat "$dir/err.txt" >&2; fail "refusal does not name doc_fill"; }

# doc_fill: every window full (documents cut at window ends)
"$GDN" train "${run[@]}" --doc_fill --steps 2 --out "$dir/fill" > "$dir/fill.log" 2>&1 || { cat "$dir/fill.log" >&2; fail "--doc_fill failed"; }
grep -Eq "windows of $T tokens; (99\.[5-9]|100\.0)% of their positions" "$dir/fill.log" \
  || { grep documents: "$dir/fill.log" >&2; fail "--doc_fill windows are not full"; }

# gdn eval over the run's held-out part = the run's final val_loss
"$GDN" eval --ckpt "$dir/straight/ckpt_00000012.h5" --data "$dir/c_train_*.bin" --val_tokens $val \
  --max_windows 12 --json > "$dir/eval.json"
$PY - "$dir/straight/metrics.jsonl" "$dir/eval.json" <<'PY'
import json, sys
last = [json.loads(l) for l in open(sys.argv[1])][-1]
ev = json.load(open(sys.argv[2]))
assert ev["documents"] is True, ev
assert abs(ev["loss"] - last["val_loss"]) <= 1e-9 * abs(last["val_loss"]), (ev["loss"], last["val_loss"])
print(f"gdn eval {ev['loss']:.9f} == val_loss {last['val_loss']:.9f}")
PY

# gdn sample starts a document: the prompt, then at most --bytes bytes
"$GDN" sample --run "$dir/straight" --prompt "the" --bytes 20 --seed 1 > "$dir/sample.txt" 2> "$dir/sample.err"
head -c 3 "$dir/sample.txt" | grep -q "the" || fail "sample does not start with the prompt"
n=$(wc -c < "$dir/sample.txt")
[ "$n" -le $((3 + 20 + 1)) ] || fail "gdn sample wrote $n bytes"
echo "train_documents ($mode): ok"
