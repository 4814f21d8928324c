#!/usr/bin/env bash
# End-to-end: one gdn train at a time per run directory.
#  1. While a trainer runs (seen by its lock file and first metrics line), a second one on the
#     same directory fails at once with status 4, naming the directory and the owner's pid and
#     host, and changes nothing; the first goes on (more lines), and every line parses.
#  2. The first is stopped with SIGUSR1 (status 75), then one killed with SIGKILL: each time
#     the lock goes with the process, and --resume auto continues the run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
small=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 64 --n_layers 2 --d_ff 128 --seq_len 64
       --batch_size 4 --eval_batches 2 --eval_every 0 --threads 1 --seed 5)
run="$dir/run"
lines() { if [ -f "$run/metrics.jsonl" ]; then wc -l < "$run/metrics.jsonl"; else echo 0; fi; }
# wait_for COMMAND...: polls (up to 10 minutes, for a loaded machine) until COMMAND succeeds
wait_for() {
  for _ in $(seq 6000); do "$@" && return 0; sleep 0.1; done
  fail "timed out waiting for: $*"
}
at_least() { [ "$(lines)" -ge "$1" ]; }
# started PID: its first metrics line is out, so it holds the lock, which names it
started() {
  wait_for at_least $(($2 + 1))
  grep -q "^pid $1 on host $(hostname) since " "$run/.lock" || fail "the lock file does not name pid $1"
}
bg=()
trap 'for p in "${bg[@]}"; do kill -9 "$p" 2> /dev/null || true; done; rm -rf "$dir"' EXIT

"$GDN" train "${small[@]}" --steps 1000000 --out "$run" > "$dir/a.log" 2>&1 &
a=$!
bg+=($a)
started $a 0
before=$(lines)
set +e; "$GDN" train "${small[@]}" --steps 10 --resume auto --out "$run" > "$dir/b.log" 2> "$dir/b.err"; st=$?; set -e
[ $st -eq 4 ] || { cat "$dir/b.err"; fail "second trainer: exit status $st, expected 4"; }
grep -q "run directory $run is in use by another gdn train (pid $a on host $(hostname)" "$dir/b.err" \
  || { cat "$dir/b.err"; fail "second trainer: message does not name the directory, pid and host"; }
grep -q "^pid $a on host " "$run/.lock" || fail "the lock file lost its owner"
# the first trainer goes on undisturbed
wait_for at_least $((before + 3))
kill -0 $a 2> /dev/null || fail "the first trainer died"
kill -USR1 $a
set +e; wait $a; st=$?; set -e
[ $st -eq 75 ] || { cat "$dir/a.log"; fail "first trainer: exit status $st after SIGUSR1, expected 75"; }
$PY - "$run/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == list(range(1, len(steps) + 1)), steps
print(f"  first trainer: {len(steps)} steps, every line parses, no foreign line")
PY

# 2. after a SIGUSR1 stop and after a SIGKILL the lock is free again: --resume auto goes on
"$GDN" train "${small[@]}" --steps 1000000 --ckpt_every 2 --resume auto --out "$run" > "$dir/c.log" 2>&1 &
c=$!
bg+=($c)
n=$(lines)
started $c $n
wait_for at_least $((n + 3))
kill -9 $c
wait $c 2> /dev/null || true
k=$(cd "$run" && ls ckpt_*.h5 | tail -1 | sed 's/ckpt_0*//; s/\.h5//')
"$GDN" train "${small[@]}" --steps $((k + 2)) --resume auto --out "$run" > "$dir/d.log"
grep -q "resuming from .*at step $k" "$dir/d.log" || { cat "$dir/d.log"; fail "no resume after SIGKILL"; }
$PY - "$run/metrics.jsonl" "$k" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
k = int(sys.argv[2])
assert steps == list(range(1, k + 3)), steps[-5:]
print(f"  after SIGKILL: resumed at step {k}, finished at {k + 2}")
PY
echo "train_lock: ok"
