#!/usr/bin/env bash
# Runs one libFuzzer harness for a bounded time over a scratch copy of its seed corpus.
# Usage: run_fuzz.sh HARNESS CORPUS_DIR ARTIFACT_DIR SECONDS [libFuzzer flags...]
# Exit 0 when the run ends with no finding; otherwise the libFuzzer status, the offending input
# saved in ARTIFACT_DIR and a command that reproduces it. New inputs the run discovers stay in
# the scratch copy (removed on exit): the committed corpus changes only by hand.
set -uo pipefail
harness=${1:?usage: run_fuzz.sh HARNESS CORPUS_DIR ARTIFACT_DIR SECONDS [flags...]}
corpus=${2:?} artifacts=${3:?} seconds=${4:?}
shift 4
[ -d "$corpus" ] || { echo "run_fuzz: no seed corpus at $corpus" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/tmp" "$artifacts"
cp -R "$corpus"/. "$work/corpus/"
name=$(basename "$harness")
# -timeout: seconds for one input (a hang or a quadratic blow-up fails); -rss_limit_mb and
# -malloc_limit_mb: memory; leaks are reported by AddressSanitizer at the end of each input.
# -jobs is not used: one process, so the time is the test's own and ctest -j spreads harnesses.
echo "run_fuzz: $name for ${seconds}s over $(ls "$work/corpus" | wc -l) seed inputs"
# a symbolizer turns sanitizer stack traces into file:line (Debian: llvm-14)
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && ! command -v llvm-symbolizer >/dev/null; then
    for s in /usr/lib/llvm-*/bin/llvm-symbolizer; do [ -x "$s" ] && export ASAN_SYMBOLIZER_PATH=$s; done
fi
TMPDIR="$work/tmp" ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
"$harness" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$@" "$work/corpus" \
    >"$work/log" 2>&1
rc=$?
# keep the log short on success; all of it on failure
if [ "$rc" -eq 0 ]; then
    grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs)" \
        "$work/log" || tail -5 "$work/log"
    echo "run_fuzz: $name: no crash, leak or timeout"
    exit 0
fi
cat "$work/log"
echo "run_fuzz: $name FAILED (exit $rc). Inputs that fail are in $artifacts:" >&2
ls -l "$artifacts" >&2
echo "run_fuzz: reproduce one with: $harness $artifacts/FILE" >&2
exit "$rc"
