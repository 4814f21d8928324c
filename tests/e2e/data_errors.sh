#!/usr/bin/env bash
# gdn data end to end: bad invocations fail with the right exit status and a message naming the
# problem; good input (plain and gzip) gives shards whose tokens are the input's bytes.
# Usage: data_errors.sh PATH/TO/gdn
set -uo pipefail
gdn=${1:?usage: data_errors.sh PATH/TO/gdn}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# expect STATUS NEEDLE -- ARGS...: runs gdn data ARGS, checks the exit status and that stderr
# (or stdout for status 0) contains NEEDLE.
expect() {
    local want=$1 needle=$2
    shift 3
    "$gdn" data "$@" >"$work/out" 2>"$work/err"
    local got=$?
    local stream="$work/err"
    [ "$want" -eq 0 ] && stream="$work/out"
    if [ "$got" -ne "$want" ]; then
        fail "gdn data $*: exit status $got, expected $want; stderr: $(cat "$work/err")"
    elif ! grep -qF -- "$needle" "$stream"; then
        fail "gdn data $*: output does not mention '$needle': $(cat "$stream")"
    fi
}

# ---- bad invocations -----------------------------------------------------------------------
expect 0 "usage: gdn data --in" -- --help
expect 1 "$work/missing.txt: cannot open: No such file or directory" -- \
    --in "$work/missing.txt" --out "$work/x"
expect 2 "unknown argument '--bogus'" -- --bogus
expect 2 "option --in needs a value" -- --in
expect 2 "missing --in" -- --out "$work/x"
expect 2 "missing --out" -- --in "$work/missing.txt"
expect 2 "--dtype must be u16 or u32, got 'u8'" -- --in a --out b --dtype u8
expect 2 "--shard-tokens needs a count from 1 to 2147483647, got '0'" -- \
    --in a --out b --shard-tokens 0
expect 2 "--val-tokens needs a count of tokens (0 or more), got '-5'" -- \
    --in a --out b --val-tokens -5
: >"$work/empty.txt"
expect 1 "$work/empty.txt: the input is empty" -- --in "$work/empty.txt" --out "$work/x"
expect 1 "output directory '$work/no_such_dir'" -- --in "$work/empty.txt" \
    --out "$work/no_such_dir/x"
printf 'not gzip after all' | cat <(printf '\x1f\x8b\x08\x00') - >"$work/broken.gz"
expect 1 "$work/broken.gz: " -- --in "$work/broken.gz" --out "$work/x"
ls "$work"/x_* >/dev/null 2>&1 && fail "failed runs left output files: $(ls "$work"/x_*)"

# ---- inputs that are not regular files: refused at once, never waited on --------------------
# A named pipe with no writer would block open() forever; `timeout` bounds the test itself (exit
# 124 = the old hang), the checks want the refusal naming the path.
# refuse NEEDLE -- CMD...: CMD must exit 1 (or 2) quickly with NEEDLE in its stderr.
refuse() {
    local needle=$1
    shift 2
    timeout -k 5 60 "$@" >"$work/out" 2>"$work/err"
    local got=$?
    if [ "$got" -eq 124 ] || [ "$got" -eq 137 ]; then
        fail "$*: still blocked after 60 s (waiting on a named pipe?)"
    elif [ "$got" -eq 0 ]; then
        fail "$*: exit status 0 for an input that is not a regular file"
    elif ! grep -qF -- "$needle" "$work/err"; then
        fail "$*: stderr does not mention '$needle': $(cat "$work/err")"
    fi
}
mkfifo "$work/pipe.txt" "$work/pipe.bin" "$work/pipe.json"
mkdir "$work/dir.bin"
train=(train --preset tiny --steps 1 --out "$work/run")
refuse "$work/pipe.bin: not a regular file (a named pipe (FIFO))" -- \
    "$gdn" "${train[@]}" --data "$work/pipe.bin"
refuse "$work/pipe.txt: not a regular file (a named pipe (FIFO))" -- \
    "$gdn" "${train[@]}" --data "$work/pipe.txt"
refuse "$work/pipe.txt: not a regular file (a named pipe (FIFO))" -- \
    "$gdn" "${train[@]}" --data "$work/empty.txt,$work/pipe.txt"
refuse "$work/pipe.json: not a regular file (a named pipe (FIFO))" -- \
    "$gdn" "${train[@]}" --data "$work/empty.txt" --config "$work/pipe.json"
refuse "$work/dir.bin: not a regular file (a directory)" -- \
    "$gdn" "${train[@]}" --data "$work/dir.bin"
refuse "/dev/null: not a regular file (a character device)" -- \
    "$gdn" "${train[@]}" --data /dev/null
# /dev/zero read as text never ends (memory runs out first)
refuse "/dev/zero: not a regular file (a character device)" -- \
    "$gdn" "${train[@]}" --data /dev/zero
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$work/sock.bin"
refuse "$work/sock.bin: not a regular file (a socket)" -- \
    "$gdn" "${train[@]}" --data "$work/sock.bin"
refuse "$work/pipe.txt: not a regular file (a named pipe (FIFO))" -- \
    "$gdn" data --in "$work/pipe.txt" --out "$work/x"
[ -e "$work/run/metrics.jsonl" ] && fail "a refused input still started a run"

# ---- good input ----------------------------------------------------------------------------
python3 - "$work/corpus.txt" <<'EOF'
import sys
data = bytes(range(256)) + "In the beginning God created the heaven and the earth.\n".encode() * 200
data += "Ἐν ἀρχῇ ἦν ὁ λόγος\n".encode() * 20
open(sys.argv[1], "wb").write(data)
EOF
gzip -c "$work/corpus.txt" >"$work/corpus.txt.gz"
n=$(stat -c %s "$work/corpus.txt")
expect 1 "--val-tokens $n leaves no training data" -- --in "$work/corpus.txt" \
    --out "$work/x" --val-tokens "$n"

expect 0 "wrote $work/plain_val_000000.bin: 1000 tokens (uint16, 3024 bytes)" -- \
    --in "$work/corpus.txt" --out "$work/plain" --val-tokens 1000 --shard-tokens 4000
grep -qF "train: $((n - 1000)) tokens in 3 shards; val: 1000 tokens in 1 shard" "$work/out" ||
    fail "summary line missing: $(cat "$work/out")"
expect 0 "read $work/corpus.txt.gz: $n bytes = $n tokens" -- \
    --in "$work/corpus.txt.gz" --out "$work/gz" --val-tokens=1000 --shard-tokens=4000
for f in train_000000 train_000001 train_000002 val_000000; do
    cmp -s "$work/plain_$f.bin" "$work/gz_$f.bin" || fail "gzip and plain input differ in $f"
done
[ -e "$work/plain_train_000003.bin" ] && fail "an extra train shard was written"

python3 - "$work" "$n" <<'EOF' || fail "shard contents do not match the input"
import glob, struct, sys
work, n = sys.argv[1], int(sys.argv[2])
text = open(work + "/corpus.txt", "rb").read()
tokens = []
for kind in ("train", "val"):
    for path in sorted(glob.glob(f"{work}/plain_{kind}_*.bin")):
        raw = open(path, "rb").read()
        magic, version, count = struct.unpack("<3i", raw[:12])
        assert magic == 20240520 and version == 1, (path, magic, version)
        assert len(raw) == 1024 + 2 * count, (path, len(raw), count)
        assert raw[12:1024] == bytes(1012), path  # the rest of the header is zero
        tokens += struct.unpack(f"<{count}H", raw[1024:])
assert len(tokens) == n and bytes(tokens) == text, "token stream != input bytes"
EOF

# uint32 shards (version 2), default split (1% held out)
expect 0 "(uint32," -- --in "$work/corpus.txt" --out "$work/wide" --dtype u32
python3 - "$work" "$n" <<'EOF' || fail "uint32 shard contents do not match the input"
import struct, sys
work, n = sys.argv[1], int(sys.argv[2])
text = open(work + "/corpus.txt", "rb").read()
val = round(0.01 * n)
out = []
for kind in ("train", "val"):
    raw = open(f"{work}/wide_{kind}_000000.bin", "rb").read()
    magic, version, count = struct.unpack("<3i", raw[:12])
    assert magic == 20240520 and version == 2 and len(raw) == 1024 + 4 * count
    out += struct.unpack(f"<{count}I", raw[1024:])
    if kind == "val":
        assert count == val, (count, val)
assert bytes(out) == text
EOF

# rewriting a prefix with fewer shards warns about the stale ones
"$gdn" data --in "$work/corpus.txt" --out "$work/plain" --val-tokens 1000 >/dev/null \
    2>"$work/err" || fail "rewrite failed: $(cat "$work/err")"
grep -qF "warning: $work/plain_train_000001.bin is left from an earlier run" "$work/err" ||
    fail "no warning about stale shards: $(cat "$work/err")"

if [ "$failures" -ne 0 ]; then
    echo "data_errors: $failures check(s) failed" >&2
    exit 1
fi
echo "data_errors: all checks passed"
