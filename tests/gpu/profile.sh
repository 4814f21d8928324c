#!/usr/bin/env bash
# Hardware counters (Nsight Compute) for the kernels of one forward+backward of the delta rule
# (bf16, default B4 T4096 H16 D128), then a one-line-per-kernel summary. Run after run.sh has
# built build-gpu. Usage: tests/gpu/profile.sh [B T H D]
# KERNEL=name (e.g. k_state_bwd): instead, that kernel's first launch instruction by instruction
# (Nsight Compute source counters): the instructions executed per opcode, where the warps stall
# and the busiest instructions. BENCH=path profiles another build's bench_gpu_delta the same way.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build-gpu/out}
mkdir -p "$out"
shape=${*:-4 4096 16 128}
bench=${BENCH:-./build-gpu/tests/gpu/bench_gpu_delta}
if [ -n "${KERNEL:-}" ]; then
    rep="$out/ncu_$KERNEL"
    timeout 300 ncu --clock-control none -k "regex:$KERNEL" --launch-count 1 --section WarpStateStats \
        --section SourceCounters --section SpeedOfLight -o "$rep" -f "$bench" 1 $shape 0 >"$out/ncu.err" 2>&1 ||
        { tail -5 "$out/ncu.err"; exit 1; }
    ncu --import "$rep.ncu-rep" --page source --print-source sass --csv >"$rep.csv" 2>>"$out/ncu.err"
    python3 tests/gpu/ncu_source_summary.py "$rep.csv"
    exit $?
fi
# the bench runs one forward (6 kernels: two halves of intra, state pass, output), then
# forward+backward (6 + 6): profile those 12
timeout 400 ncu --clock-control none --launch-skip 6 --launch-count 12 \
    -k 'regex:k_(intra|state|output|dv_local|grad)' \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --page raw --csv \
    "$bench" 1 $shape 0 >"$out/ncu.csv" 2>"$out/ncu.err" || tail -5 "$out/ncu.err"
python3 tests/gpu/ncu_summary.py "$out/ncu.csv"
