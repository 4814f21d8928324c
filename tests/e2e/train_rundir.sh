#!/usr/bin/env bash
# End-to-end: gdn train never overwrites a run directory that holds another run.
#  1. A directory with a run of d_model 64 (checkpoints, metrics, config.json) and an unrelated
#     file: a fresh run of d_model 32, the same with --resume auto, a fresh run of the same
#     shape, a directory whose config.json alone is of another shape or unreadable: each exits
#     with status 2 naming the field (or what to do), and no file changes.
#  2. --overwrite starts afresh: only the run's own files go (config.json, metrics.jsonl,
#     ckpt_*.h5), the unrelated file and folder stay, and the new run resumes normally.
#  3. --overwrite with --resume is refused.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
small=(--preset tiny --data "$SRC/data/kjv.txt.gz" --n_layers 2 --d_ff 128 --seq_len 64 --batch_size 4
       --eval_batches 2 --threads 1 --seed 2)
run="$dir/run"
"$GDN" train "${small[@]}" --d_model 64 --steps 4 --ckpt_every 2 --out "$run" > /dev/null
echo "my notes" > "$run/notes.txt"
mkdir "$run/ckpt_00000099.h5.d" "$run/plots"
snapshot() { (cd "$1" && find . -type f ! -name .lock -print0 | sort -z | xargs -0 md5sum); }
snapshot "$run" > "$dir/before"

# refused ARGS...: status 2, the message has $pat, nothing in $run changed
refused() {
  set +e; "$GDN" train "${small[@]}" "$@" > "$dir/r.log" 2> "$dir/r.err"; local st=$?; set -e
  [ $st -eq 2 ] || { cat "$dir/r.err"; fail "exit status $st, expected 2: $*"; }
  grep -q -- "$pat" "$dir/r.err" || { cat "$dir/r.err"; fail "message lacks '$pat': $*"; }
}
pat="$run holds a different run: $run/ckpt_00000004.h5: d_model: checkpoint has 64, this run has 32"
refused --d_model 32 --steps 4 --out "$run"
pat="d_model: checkpoint has 64, this run has 32"
refused --d_model 32 --steps 8 --resume auto --out "$run"
pat="$run already holds a run (2 checkpoints, the newest of step 4) and this one starts fresh (no --resume): continue it with --resume auto"
refused --d_model 64 --steps 4 --out "$run"
snapshot "$run" | cmp -s - "$dir/before" || { snapshot "$run" | diff - "$dir/before"; fail "a refused run changed files"; }

# a run that died before its first checkpoint: config.json and metrics only
mkdir "$dir/early"
cp "$run/config.json" "$run/metrics.jsonl" "$dir/early/"
pat="$dir/early/config.json: d_model: config.json has 64, this run has 32"
refused --d_model 32 --steps 4 --resume auto --out "$dir/early"
pat="$dir/early already holds a run (metrics.jsonl of"
refused --d_model 64 --steps 4 --out "$dir/early"
echo '{"d_model": 64,' > "$dir/early/config.json"
pat="cannot tell which run $dir/early holds"
refused --d_model 64 --steps 4 --resume auto --out "$dir/early"
cmp -s "$dir/early/metrics.jsonl" "$run/metrics.jsonl" || fail "a refused run changed metrics.jsonl"
# the normal requeue path: the same shape with --resume auto starts again (no checkpoint yet)
cp "$run/config.json" "$dir/early/"
"$GDN" train "${small[@]}" --d_model 64 --steps 2 --resume auto --out "$dir/early" > /dev/null

# 2. --overwrite
"$GDN" train "${small[@]}" --d_model 32 --steps 3 --overwrite --out "$run" > "$dir/ow.log"
# config.json, metrics.jsonl, the two checkpoints and the finished run's summary.json
grep -q -- "--overwrite: deleted 5 files of the previous run in $run" "$dir/ow.log" || { cat "$dir/ow.log"; fail "overwrite message"; }
[ "$(cat "$run/notes.txt")" = "my notes" ] && [ -d "$run/plots" ] && [ -d "$run/ckpt_00000099.h5.d" ] \
  || fail "--overwrite removed a file that is not the run's"
[ "$(cd "$run" && ls ckpt_*.h5)" = "ckpt_00000003.h5" ] || fail "checkpoints after --overwrite: $(ls "$run")"
"$GDN" train "${small[@]}" --d_model 32 --steps 5 --resume auto --out "$run" > "$dir/ow2.log"
grep -q "resuming from .*ckpt_00000003.h5 at step 3" "$dir/ow2.log" || fail "no resume after --overwrite"
$PY -c "
import json, sys
steps = [json.loads(l)['step'] for l in open(sys.argv[1])]
assert steps == [1, 2, 3, 4, 5], steps
" "$run/metrics.jsonl" || fail "metrics after --overwrite and resume"

# 3. --overwrite and --resume contradict each other
pat="--overwrite starts afresh and deletes the run in --out; it cannot be combined with --resume"
refused --d_model 32 --steps 6 --overwrite --resume auto --out "$run"
echo "train_rundir: ok"
