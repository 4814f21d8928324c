#!/usr/bin/env bash
# Hardware counters (Nsight Compute) for the kernels of one forward+backward of the delta rule
# (bf16, default B4 T4096 H16 D128), then a one-line-per-kernel summary. Run after run.sh has
# built build-gpu. Usage: tests/gpu/profile.sh [B T H D]
# KERNEL=name (e.g. k_state_bwd): instead, that kernel's first launch instruction by instruction
# (Nsight Compute source counters): the instructions executed per opcode, where the warps stall
# and the busiest instructions. BENCH=path profiles another build's bench_gpu_delta the same way.
# MODEL=1: instead, the training step's memory-bound kernels (row norms, SwiGLU, convolutions,
# loss, gradient norm, AdamW): the first launch of each in `test_gpu_model --bench` (the 512M
# model), one line per kernel as above.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build-gpu/out}
mkdir -p "$out"
shape=${*:-4 4096 16 128}
# the counters of the one-line-per-kernel summaries (ncu_summary.py)
sections=(--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis
          --section ComputeWorkloadAnalysis)
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
if [ "${MODEL:-0}" = 1 ]; then
    # one run of the step benchmark per kernel, stopped once its kernel is profiled (--kill)
    kernels=(k_rmsnorm_fwd k_rmsnorm_bwd k_gated_fwd k_gated_bwd k_swiglu_fwd k_swiglu_bwd k_conv4_fwd8
             k_conv4_bwdv k_cross_entropy k_grad_norm_part k_adamw)
    rm -f "$out/ncu_model.txt"
    failed=0
    for i in "${!kernels[@]}"; do
        k=${kernels[$i]}
        echo "[$((i + 1))/${#kernels[@]}] $k" >&2
        # the run ends killed, so success is a (fresh) report that imports
        rm -f "$out/ncu_$k.ncu-rep"
        timeout 300 ncu --clock-control none --kill yes -k "regex:$k" --launch-count 1 "${sections[@]}" \
            -o "$out/ncu_$k" -f ./build-gpu/tests/gpu/test_gpu_model --bench >"$out/ncu.err" 2>&1
        if ! ncu --import "$out/ncu_$k.ncu-rep" --page raw --csv >"$out/ncu_$k.csv" 2>>"$out/ncu.err"; then
            tail -5 "$out/ncu.err"
            failed=1
            continue
        fi
        python3 tests/gpu/ncu_summary.py "$out/ncu_$k.csv" | tee -a "$out/ncu_model.txt"
    done
    exit $failed
fi
# the bench runs one forward (6 kernels: two halves of intra, state pass, output), then
# forward+backward (6 + 6): profile those 12
timeout 400 ncu --clock-control none --launch-skip 6 --launch-count 12 \
    -k 'regex:k_(intra|state|output|dv_local|grad)' "${sections[@]}" --page raw --csv \
    "$bench" 1 $shape 0 >"$out/ncu.csv" 2>"$out/ncu.err" || tail -5 "$out/ncu.err"
python3 tests/gpu/ncu_summary.py "$out/ncu.csv"
