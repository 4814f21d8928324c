#!/usr/bin/env bash
# Damaged checkpoints and failed saves, through the gdn commands:
#  - files with HDF5 metadata bytes that crash libhdf5 itself: gdn inspect refuses them (as
#    "damaged" where libhdf5 crashed in the checking child, which depends on what its heap held:
#    the same bytes may instead read as a missing group), sample and train --resume PATH /
#    --init_from refuse them; all exit 1, never by a signal;
#    --resume auto skips such a file and resumes from the next newest;
#  - a save that fails on a full file system (RLIMIT_FSIZE, SIGXFSZ ignored): gdn train
#    reports it and exits 1 (not 139), leaving no temp file.
# Usage: ckpt_errors.sh GDN CKPT_STRESS
set -euo pipefail
stress=$2
source "$(dirname "$0")/lib.sh"
args=(--preset tiny --data "$SRC/data/kjv.txt.gz" --seq_len 16 --eval_every 0 --val_tokens 4096)

# no_signal STATUS WHAT: a status above 128 is a death by a signal.
no_signal() { [ "$1" -lt 128 ] || fail "$2 died by signal $(($1 - 128))"; }
expect_refused() { # expect_refused PATTERN WHAT cmd...: exit 1 with PATTERN on stderr
  local pat=$1 what=$2; shift 2
  set +e; "$@" > "$dir/out.txt" 2> "$dir/err.txt"; local rc=$?; set -e
  no_signal "$rc" "$what"
  [ "$rc" -eq 1 ] || { cat "$dir/err.txt" >&2; fail "$what: exit $rc, expected 1"; }
  grep -q -- "$pat" "$dir/err.txt" || { cat "$dir/err.txt" >&2; fail "$what: no '$pat' in the message"; }
}

# Single flipped bytes that make libhdf5 1.10 segfault (found by ckpt_mutate.py on this file).
"$stress" known "$dir/known.h5"
n=0
for flip in 16454:255 16110:1 104734:1 16750:255; do
  off=${flip%%:*} mask=${flip##*:}
  cp "$dir/known.h5" "$dir/crash$n.h5"
  /usr/bin/env python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek($off); b=f.read(1); f.seek($off); f.write(bytes([b[0]^$mask]))" "$dir/crash$n.h5"
  expect_refused "gdn inspect: .*crash$n.h5" "inspect crash$n.h5" "$GDN" inspect "$dir/crash$n.h5"
  grep -q "damaged: .*crashed the HDF5 library" "$dir/err.txt" && crashed=$((${crashed:-0} + 1))
  n=$((n + 1))
done
echo "libhdf5 crashed (in the checking child) on ${crashed:-0} of the $n files; every one was refused"
# the crash path itself must have been taken: at least one file crashed libhdf5 and was reported
# as damaged (a libhdf5 that no longer crashes on any of them needs new bytes here)
[ "${crashed:-0}" -gt 0 ] || fail "libhdf5 crashed on none of the $n files: the damaged-file path went untested"
# (The other readers read less of the file; what matters is a clear refusal, never a signal.)
expect_refused "crash0.h5" "sample --ckpt" "$GDN" sample --ckpt "$dir/crash0.h5" --prompt x --bytes 1
expect_refused "crash0.h5" "train --resume PATH" "$GDN" train "${args[@]}" --steps 1 --out "$dir/r0" --resume "$dir/crash0.h5"
expect_refused "crash0.h5" "train --init_from" "$GDN" train "${args[@]}" --steps 1 --out "$dir/r1" --init_from "$dir/crash0.h5"

# A named pipe or a directory given as a checkpoint is refused at once (a pipe would block
# libhdf5's open until a writer appears); timeout turns a hang into a failure, not a stuck test.
mkfifo "$dir/pipe.h5"
mkdir "$dir/folder.h5"
for p in pipe.h5 folder.h5; do
  expect_refused "not a regular file" "inspect $p" timeout -k 5 60 "$GDN" inspect "$dir/$p"
  expect_refused "not a regular file" "sample --ckpt $p" timeout -k 5 60 "$GDN" sample --ckpt "$dir/$p" --prompt x --bytes 1
done

# --resume auto skips a damaged newest file and resumes from the one before.
"$GDN" train "${args[@]}" --steps 2 --ckpt_every 1 --out "$dir/run" > "$dir/train.log"
cp "$dir/crash0.h5" "$dir/run/ckpt_00000003.h5"
set +e; "$GDN" train "${args[@]}" --steps 3 --ckpt_every 1 --out "$dir/run" --resume auto \
  > "$dir/resume.log" 2> "$dir/resume.err"; rc=$?; set -e
no_signal "$rc" "train --resume auto"
grep -q "skipping .*ckpt_00000003.h5" "$dir/resume.err" || { cat "$dir/resume.err"; fail "damaged file not skipped"; }
grep -q "resuming from .*ckpt_00000002.h5 at step 2" "$dir/resume.log" || { cat "$dir/resume.log"; fail "did not resume from step 2"; }
[ "$rc" -eq 0 ] || { cat "$dir/resume.err"; fail "resume auto exited $rc"; }

# A full file system during a save: a clear message, exit 1, no temp file, no crash at exit.
set +e
(trap '' XFSZ; ulimit -f 2000; exec "$GDN" train "${args[@]}" --steps 1 --out "$dir/full") \
  > "$dir/full.log" 2> "$dir/full.err"
rc=$?
set -e
no_signal "$rc" "train with a full file system"
[ "$rc" -eq 1 ] || { cat "$dir/full.err"; fail "train with a full file system exited $rc, expected 1"; }
grep -q "checkpoint not written: .*File too large" "$dir/full.err" || { cat "$dir/full.err"; fail "no message"; }
! ls "$dir/full" | grep -q '\.tmp\.' || fail "a temp file was left"
! ls "$dir/full" | grep -q '\.h5$' || fail "a checkpoint appeared despite the failed save"
echo "ckpt_errors: ok"
