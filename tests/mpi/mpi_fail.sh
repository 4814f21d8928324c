#!/usr/bin/env bash
# A rank that fails, hangs or is misconfigured ends a 2-rank job quickly, with a message that
# names the rank and the cause (never a hang). Usage: mpi_fail.sh MPI_FAIL_PROGRAM "MPIEXEC -n".
set -uo pipefail
PROG=$1
read -r -a MPIRUN <<< "$2"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# run MODE LIMIT_S: runs 2 ranks in MODE; sets $status, $took (seconds) and $dir/out
run() {
  local t0=$(date +%s%N)
  GDN_COMM_TIMEOUT=3 timeout 60 "${MPIRUN[@]}" 2 "$PROG" "$1" > "$dir/out" 2>&1
  status=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  took=$(printf "%d.%03d" $((ms / 1000)) $((ms % 1000)))
  [ $status -ne 124 ] || { cat "$dir/out"; fail "$1: hung until the harness timeout"; }
  [ $ms -le $(( $2 * 1000 )) ] || { cat "$dir/out"; fail "$1: took $took s (limit $2 s)"; }
}
expect() { grep -qE "$2" "$dir/out" || { cat "$dir/out"; fail "$1: no message matching '$2'"; }; }
# fails MODE MESSAGE: 2 ranks in MODE end within 20 s, with a nonzero status and MESSAGE
fails() {
  run "$1" 20
  [ $status -ne 0 ] || fail "$1: exit status 0"
  expect "$1" "$2"
  echo "$1: ended in ${took}s with status $status: $(grep -m1 'gdn: rank' "$dir/out")"
}

run ok 20
[ $status -eq 0 ] || { cat "$dir/out"; fail "ok: exit status $status"; }
expect ok "mpi_fail ok: finished normally \(sum 4\)"

fails die "gdn: rank 1: error \(.*mpi_fail.c:[0-9]+\): injected failure on the last rank"
fails hang "gdn: rank 0: no progress for 3 s in all-reduce of a test value over the world"
fails peer "gdn: rank 0: no progress for 3 s in receive of a test message with rank 1"

run grid 20
[ $status -ne 0 ] || fail "grid: exit status 0"
expect grid "sp = 3 does not divide the 2 ranks of this job"
[ "$(grep -c 'does not divide' "$dir/out")" -eq 1 ] || { cat "$dir/out"; fail "grid: message not printed once"; }
echo "grid: status $status: $(grep -m1 'does not divide' "$dir/out")"
echo "mpi_fail: ok"
