#!/usr/bin/env bash
# On the GPU machine: configure with CUDA, build only the GPU targets (the rest of the tree may be
# mid-edit), run the GPU tests (fp32 and bf16 against the fp64 CPU path), compute-sanitizer
# memcheck and racecheck on a small shape, and the delta-rule benchmark. Logs go to $OUT (or
# build-gpu/out); the benchmark table is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build-gpu/out}
mkdir -p "$out"
jobs=$(nproc)
status=0

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader || true

if ! cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DGDN_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
        >"$out/configure.log" 2>&1; then
    tail -40 "$out/configure.log"
    exit 1
fi
if ! cmake --build build-gpu -j "$jobs" --target test_gpu_delta bench_gpu_delta >"$out/build.log" 2>&1; then
    grep -E "error|Error" "$out/build.log" | head -40
    exit 1
fi
# the model's tests (test_gpu_ops, test_gpu_model; run by ctest below and at the end);
# GDN_DELTA_ONLY=1 runs the delta-rule part alone
delta_only=${GDN_DELTA_ONLY:-}
if [ -z "$delta_only" ]; then
    cmake --build build-gpu -j "$jobs" --target test_gpu_ops test_gpu_model >"$out/model.log" 2>&1 || status=1
fi

echo "== correctness: relative error vs fp64 CPU (fp32 < 1e-4, bf16 < 1e-2)"
timeout 180 ./build-gpu/tests/gpu/test_gpu_delta 2>&1 | tee "$out/test.log" || status=1

echo "== ctest (the delta-rule GPU tests again; compute-sanitizer memcheck and racecheck on a small shape)"
(cd build-gpu && timeout 300 ctest -L gpu -R "^test_gpu_delta" --output-on-failure 2>&1) | tee "$out/ctest.log" | tail -15 || status=1
grep -q "100% tests passed" "$out/ctest.log" || status=1

echo "== benchmark"
timeout 240 ./build-gpu/tests/gpu/bench_gpu_delta "${GDN_BENCH_REPEATS:-20}" 2>&1 | tee "$out/bench.log" || status=1
# The model's other ops and the whole training step: CUDA vs the CPU ops and model, the 200-step loss
# curves (loss_curves.csv) and the 512M training-step benchmark. One log (model.log); summary lines shown.
if [ -n "$delta_only" ]; then
    :
elif cmake --build build-gpu -j "$jobs" --target test_gpu_ops test_gpu_model >>"$out/model.log" 2>&1; then
    echo "== model ops vs fp64 CPU (fp32 < 1e-5, bf16 < 1e-2); whole model vs CPU; loss curves"
    timeout 300 ./build-gpu/tests/gpu/test_gpu_ops >>"$out/model.log" 2>&1 || status=1
    OUT="$out" timeout 600 ./build-gpu/tests/gpu/test_gpu_model >>"$out/model.log" 2>&1 || status=1
    echo "== training-step benchmark (512M, B16 x T2048, bf16)"
    timeout 600 ./build-gpu/tests/gpu/test_gpu_model --bench >>"$out/model.log" 2>&1 || status=1
    grep -E "FAIL|PASS|^  |^(fp32|bf16) .*(K32|K64)|^training" "$out/model.log"
else
    grep -E "error|Error" "$out/model.log" | head -40
    status=1
fi
exit $status
