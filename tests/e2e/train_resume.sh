#!/usr/bin/env bash
# End-to-end checkpoint behaviour of gdn train:
#  1. 2N steps straight == N steps, stop, resume, N more: identical losses and final weights.
#  2. SIGUSR1 mid-run: checkpoint, exit status 75, resume continues at the right step.
#  3. SIGKILL at random moments (often inside a checkpoint write): every file under a final name
#     verifies, and the run always resumes from a good checkpoint and finishes.
#  4. Resuming with a different model shape names the field and both values.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
small=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 64 --n_layers 2 --d_ff 128 --seq_len 64
       --batch_size 8 --warmup_steps 4 --eval_every 10 --eval_batches 2 --seed 11)

# 1. straight vs stop + resume (the schedule length is fixed with decay_steps).
"$GDN" train "${small[@]}" --steps 20 --decay_steps 20 --ckpt_every 10 --out "$dir/straight" > /dev/null
"$GDN" train "${small[@]}" --steps 10 --decay_steps 20 --out "$dir/resumed" > /dev/null
"$GDN" train "${small[@]}" --steps 20 --decay_steps 20 --resume auto --out "$dir/resumed" > "$dir/resume.log"
grep -q "resuming from .*ckpt_00000010.h5 at step 10" "$dir/resume.log" || fail "did not resume at step 10"
grep -q "changed on resume: \"steps\": 20" "$dir/resume.log" || fail "changed setting not reported"
$PY "$SRC/tests/e2e/same_run.py" "$dir/straight" "$dir/resumed" 20
echo "straight 20 steps == 10 + resume 10: losses and weights bitwise identical"

# 2. SIGUSR1: checkpoint at the current step, exit 75, resume continues.
"$GDN" train "${small[@]}" --steps 100000 --out "$dir/sig" > "$dir/sig.log" 2>&1 &
pid=$!
# progress, not time: the signal comes after 3 steps (bound: 300 s on a busy machine)
for _ in $(seq 3000); do
  [ -s "$dir/sig/metrics.jsonl" ] && [ "$(wc -l < "$dir/sig/metrics.jsonl")" -ge 3 ] && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
[ "$(wc -l < "$dir/sig/metrics.jsonl" 2>/dev/null || echo 0)" -ge 3 ] || { cat "$dir/sig.log"; fail "no 3 steps before SIGUSR1"; }
kill -USR1 $pid
set +e; wait $pid; status=$?; set -e
[ $status -eq 75 ] || { cat "$dir/sig.log"; fail "exit status $status after SIGUSR1, expected 75"; }
k=$($PY -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['step'])" "$dir/sig/metrics.jsonl")
[ -f "$dir/sig/$(printf 'ckpt_%08d.h5' "$k")" ] || fail "no checkpoint at step $k after SIGUSR1"
"$GDN" train "${small[@]}" --steps $((k + 3)) --resume auto --out "$dir/sig" > "$dir/sig2.log"
$PY - "$dir/sig/metrics.jsonl" "$k" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
k = int(sys.argv[2])
assert steps == list(range(1, k + 4)), f"steps after resume: {steps[-6:]}"
print(f"SIGUSR1 at step {k}: exit 75, resumed and finished at step {k + 3}")
PY

# 3. SIGKILL at random moments with a checkpoint every step: each run is killed after it saved a
# new checkpoint (progress, not time; bound 300 s), at a random moment of the saves that follow.
kill_dir="$dir/kill"
newest_ckpt() { { ls "$kill_dir" 2>/dev/null || true; } | sed -n 's/^ckpt_0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n | tail -1; }
for i in $(seq 8); do
  before=$(newest_ckpt); before=${before:-0}
  "$GDN" train "${small[@]}" --steps 400 --ckpt_every 1 --keep 2 --resume auto --out "$kill_dir" > "$dir/kill$i.log" 2>&1 &
  pid=$!
  for _ in $(seq 3000); do
    n=$(newest_ckpt); [ "${n:-0}" -gt "$before" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  n=$(newest_ckpt); [ "${n:-0}" -gt "$before" ] || { cat "$dir/kill$i.log"; fail "run $i saved no new checkpoint"; }
  sleep "$($PY -c "import random; print(round(random.uniform(0, 0.5), 2))")"
  kill -9 $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  for f in "$kill_dir"/ckpt_*.h5; do
    [ -e "$f" ] || continue
    "$GDN" inspect "$f" > /dev/null 2>&1 || fail "unreadable checkpoint under a final name after kill $i: $f"
  done
done
n_final=$(ls "$kill_dir"/ckpt_*.h5 | wc -l)
[ "$n_final" -ge 1 ] || fail "no checkpoint survived the kills"
last=$(ls "$kill_dir"/ckpt_*.h5 | tail -1)
"$GDN" train "${small[@]}" --ckpt_every 0 --resume auto --eval_every 0 --out "$kill_dir" --steps \
  "$(( $(basename "$last" .h5 | sed 's/ckpt_0*//') + 2 ))" > "$dir/kill.log"
grep -q "resuming from" "$dir/kill.log" || fail "no resume after the kills"
echo "8 random SIGKILLs: every final-named checkpoint verified; resumed from $(basename "$last")"

# 4. A different model shape is refused with the field and both values.
if "$GDN" train "${small[@]}" --d_model 96 --steps 30 --resume auto --out "$dir/straight" > /dev/null 2> "$dir/mm.err"; then
  fail "resume with another d_model succeeded"
fi
grep -q "d_model: checkpoint has 64, this run has 96" "$dir/mm.err" || { cat "$dir/mm.err"; fail "mismatch message"; }
echo "train_resume: ok"
