#!/usr/bin/env bash
# End-to-end: a metrics.jsonl that cannot be written stops gdn train with status 1 and a
# message naming the file and the cause; no line is lost silently:
#  1. metrics.jsonl is a link to /dev/full (every write fails: "No space left on device").
#  2. a file-size limit (ulimit -f, SIGXFSZ ignored) stops the writes after a few lines: the
#     file keeps whole lines only, steps 1..k, and the message names the step k+1.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
small=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 64 --n_layers 2 --d_ff 128 --seq_len 64
       --batch_size 4 --eval_batches 2 --eval_every 0 --ckpt_every 0 --threads 1 --seed 4)

mkdir "$dir/full"
ln -s /dev/full "$dir/full/metrics.jsonl"
set +e; "$GDN" train "${small[@]}" --steps 5 --out "$dir/full" > "$dir/full.log" 2> "$dir/full.err"; st=$?; set -e
[ $st -eq 1 ] || { cat "$dir/full.err"; fail "/dev/full: exit status $st, expected 1"; }
grep -q "step 1: cannot write $dir/full/metrics.jsonl: No space left on device" "$dir/full.err" \
  || { cat "$dir/full.err"; fail "/dev/full: message"; }
ls "$dir/full"/ckpt_*.h5 > /dev/null 2>&1 && fail "/dev/full: a checkpoint ahead of the metrics was written"

# 2. 2 KiB per file: config.json (under 1 KiB) fits, metrics.jsonl fills up after a few lines
set +e
( trap '' XFSZ; ulimit -f 2; exec "$GDN" train "${small[@]}" --steps 40 --out "$dir/limit" ) \
  > "$dir/limit.log" 2> "$dir/limit.err"
st=$?
set -e
[ $st -eq 1 ] || { cat "$dir/limit.err"; fail "ulimit -f: exit status $st, expected 1"; }
k=$($PY - "$dir/limit/metrics.jsonl" <<'PY'
import json, sys
data = open(sys.argv[1]).read()
assert data.endswith("\n"), "metrics.jsonl ends mid-line"
steps = [json.loads(l)["step"] for l in data.splitlines()]
assert steps == list(range(1, len(steps) + 1)) and 1 < len(steps) < 40, steps
print(len(steps))
PY
) || fail "ulimit -f: metrics.jsonl is not whole lines of steps 1..k"
grep -q "step $((k + 1)): cannot write $dir/limit/metrics.jsonl: File too large" "$dir/limit.err" \
  || { cat "$dir/limit.err"; fail "ulimit -f: message does not name step $((k + 1))"; }
echo "train_metrics_fail: ok ($k whole lines before the limit)"
