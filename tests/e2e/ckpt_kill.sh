#!/usr/bin/env bash
# Kills a checkpoint writer with SIGKILL at random moments after its first save, many times, and checks after every
# kill that each file under a final name loads with valid checksums and the exact contents of
# its step, that resume finds the newest, and that the next writer resumes from it.
# Usage: ckpt_kill.sh CKPT_STRESS [ITERATIONS] [SEED]
set -euo pipefail
stress=$1
iters=${2:-30}
seed=${3:-$(date +%s)}
RANDOM=$seed
echo "ckpt_kill: $iters kills, seed $seed (rerun: $0 $stress $iters $seed)"
dir=$(mktemp -d "${TMPDIR:-/tmp}/gdn_ckpt_kill.XXXXXX")
trap 'rm -rf "$dir"' EXIT

newest_step() { ls "$dir" | sed -n 's/^ckpt_0*\([0-9][0-9]*\)\.h5$/\1/p' | sort -n | tail -1; }

mid_write=0   # kills that left a temp file, i.e. hit a save in progress
prev=0
for i in $(seq 1 "$iters"); do
  "$stress" write "$dir" --keep 3 >"$dir/progress.log" 2>"$dir/writer.log" &
  pid=$!
  # Progress, not time: wait (up to 300 s, however busy the machine) for this writer's first
  # save, then kill at a random moment of the saves that follow.
  for _ in $(seq 3000); do
    grep -q '^saved' "$dir/progress.log" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -q '^saved' "$dir/progress.log"; then
    # how it ended (a status over 128 is a signal), so that a silent death shows what it was
    if kill -0 "$pid" 2>/dev/null; then st="still running after 300 s"; else
      rc=0; wait "$pid" || rc=$?; st="exit status $rc"; fi
    echo "ckpt_kill: writer $i made no save ($st); its stderr:"; cat "$dir/writer.log"; exit 1
  fi
  ms=$((RANDOM % 300))
  sleep "0.$(printf '%03d' "$ms")"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null && { echo "ckpt_kill: writer exited by itself:"; cat "$dir/writer.log"; exit 1; }
  if ls "$dir" | grep -q '\.tmp\.'; then mid_write=$((mid_write + 1)); fi
  if ! out=$("$stress" verify "$dir" 2>&1); then
    echo "ckpt_kill: FAILED after kill $i (${ms} ms):"; echo "$out"; ls -l "$dir"; exit 1
  fi
  now=$(newest_step); now=${now:-0}
  if [ "$now" -le "$prev" ]; then # this writer saved at least once: the newest step moved on
    echo "ckpt_kill: FAILED after kill $i: newest step went from $prev to $now"; exit 1
  fi
  prev=$now
done
# A last, clean run resumes and, pruning, removes every temp file the killed writers left.
"$stress" write "$dir" --keep 3 --steps 1 > /dev/null
"$stress" verify "$dir"
if ls "$dir" | grep -q '\.tmp\.'; then echo "ckpt_kill: FAILED: stale temp files remain"; ls -l "$dir"; exit 1; fi
echo "ckpt_kill: $iters kills, $mid_write during a save, reached step $(newest_step)"
if [ "$mid_write" -eq 0 ]; then echo "ckpt_kill: FAILED: no kill hit a save in progress"; exit 1; fi
# every writer saved at least once before its kill
if [ "$(newest_step)" -lt "$iters" ]; then echo "ckpt_kill: FAILED: writers made too little progress"; exit 1; fi
