#!/usr/bin/env bash
# The GPU check, in one call on the GPU machine: build with CUDA for sm_90, run the GPU tests
# (ctest -L gpu: delta rule, causal attention, compute-sanitizer memcheck/racecheck, model ops,
# whole model and loss curves vs the CPU), the trainer and op command on the GPU (train_gpu.sh),
# the benchmarks (gdn bench --backend cuda, bench_attention next to PyTorch SDPA), and print a
# short table last. Logs and JSON go to $OUT (or build-gpu/out). Exit status 0 when everything passed. QUICK=1: the op
# and model-gradient checks and the benchmarks only, for kernel iteration; BUILD_ONLY=1:
# configure and build, nothing else.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build-gpu/out}
mkdir -p "$out"
jobs=$(nproc)
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt" || true

# NCCL: the CUDA toolkit's copy, else the one pip's nvidia-nccl package ships (e.g. with torch).
if [ -z "${NCCL_ROOT:-}" ] && [ ! -e /usr/local/cuda/include/nccl.h ]; then
    NCCL_ROOT=$(python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))" 2>/dev/null) || true
    [ -n "$NCCL_ROOT" ] && export NCCL_ROOT
fi
if ! cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90 -DGDN_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
        >"$out/configure.log" 2>&1; then
    tail -40 "$out/configure.log"
    exit 1
fi
if ! cmake --build build-gpu -j "$jobs" --target gdn test_gpu_delta test_gpu_ops test_gpu_model bench_gpu_delta bench_gemm \
        test_gpu_attention bench_attention \
        $(grep -q "^NCCL_LIBRARY:.*-NOTFOUND" build-gpu/CMakeCache.txt || echo test_nccl_ops test_seqpar_cuda) \
        >"$out/build.log" 2>&1; then
    grep -E "error|Error" "$out/build.log" | head -40
    exit 1
fi

[ "${BUILD_ONLY:-0}" = 1 ] && exit 0

if [ "${QUICK:-0}" = 1 ]; then
    # Kernel iteration: the op-level checks, the whole-model gradients and the benchmarks only
    # (no sanitizers, loss curves, trainer or multi-GPU runs). Not a substitute for the full run.
    echo "== quick GPU checks (QUICK=1)"
    for t in "test_gpu_delta" "test_gpu_attention" "test_gpu_ops" "test_gpu_model --grads"; do
        log="$out/$(echo "$t" | tr ' ' '_').log"
        if timeout 600 ./build-gpu/tests/gpu/$t > "$log" 2>&1; then echo "  PASS $t"
        else echo "  FAIL $t"; tail -15 "$log"; status=1; fi
    done
    ./build-gpu/tests/gpu/bench_gpu_delta 20 2>&1 | tee "$out/bench_delta.txt" || status=1
    ./build-gpu/tests/gpu/bench_attention 20 2>&1 | tee "$out/bench_attention.txt" || status=1
    python3 tests/gpu/bench_sdpa.py 20 2>&1 | tee "$out/bench_sdpa.txt"   # the reference; 77: no torch
    python3 tests/gpu/attention_vs_sdpa.py "$out/bench_attention.txt" "$out/bench_sdpa.txt"
    ./build-gpu/gdn bench --backend cuda --what step --preset gdn512m --repeats 5 2>&1 | tail -4
    ./build-gpu/gdn bench --backend cuda --what step --preset gdn512m-hybrid --repeats 5 2>&1 | tail -4
    timeout 300 ./build-gpu/tests/gpu/test_gpu_model --bench > "$out/model_bench.txt" 2>&1 || status=1
    tail -30 "$out/model_bench.txt"
    echo "status: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
    exit $status
fi

echo "== GPU tests (ctest -L gpu)"
(cd build-gpu && OUT="$out" timeout 900 ctest -L gpu --output-on-failure 2>&1) > "$out/ctest.log"
grep -E "Test +#|tests passed|tests failed" "$out/ctest.log"
grep -q "100% tests passed" "$out/ctest.log" || status=1

echo "== trainer and op command on the GPU"
timeout 900 bash tests/gpu/train_gpu.sh ./build-gpu/gdn "$out" 2>&1 | tee "$out/train_gpu.txt" | grep -v "^result:"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "== data parallel over NCCL (needs 2 GPUs; skipped otherwise)"
timeout 900 bash tests/gpu/test_gpu_dp.sh build-gpu "$out" > "$out/dp.txt" 2>&1
dp_status=$?
grep -E "^result:|FAIL|skipped" "$out/dp.txt" | grep -v "^result:"
[ $dp_status -eq 0 ] || [ $dp_status -eq 77 ] || status=1

echo "== sequence parallel over NCCL (needs 2 GPUs; skipped otherwise; RUN_SP=0 skips it)"
if [ "${RUN_SP:-1}" = 1 ]; then
    timeout 900 bash tests/gpu/test_gpu_sp.sh build-gpu "$out" > "$out/sp.txt" 2>&1
    sp_status=$?
    grep -E "FAIL|skipped|probe:" "$out/sp.txt"
    [ $sp_status -eq 0 ] || [ $sp_status -eq 77 ] || status=1
fi

echo "== benchmarks"
./build-gpu/tests/gpu/bench_gpu_delta 20 > "$out/bench_delta.txt" 2>&1 || status=1
cat "$out/bench_delta.txt"
./build-gpu/tests/gpu/bench_attention 20 > "$out/bench_attention.txt" 2>&1 || status=1
cat "$out/bench_attention.txt"
python3 tests/gpu/bench_sdpa.py 20 > "$out/bench_sdpa.txt" 2>&1 # PyTorch's SDPA beside it (77: no torch)
cat "$out/bench_sdpa.txt"
./build-gpu/tests/gpu/bench_gemm 21 2 > "$out/bench_gemm.txt" 2>&1 || status=1
cat "$out/bench_gemm.txt"
./build-gpu/gdn bench --backend cuda --what delta --repeats 20 --json > "$out/bench.jsonl" || status=1
./build-gpu/gdn bench --backend cuda --what step --preset tiny --repeats 20 --json >> "$out/bench.jsonl" || status=1
./build-gpu/gdn bench --backend cuda --what step --preset gdn512m --repeats 5 --json >> "$out/bench.jsonl" || status=1
./build-gpu/gdn bench --backend cuda --what step --preset gdn512m-hybrid --repeats 5 --json >> "$out/bench.jsonl" || status=1

echo
echo "== summary ($(head -1 "$out/gpu.txt" | cut -d, -f1), $(date -u +%F))"
grep -E "tests passed|tests failed" "$out/ctest.log" | tail -1
grep -h "^result:" "$out/train_gpu.txt" "$out/dp.txt" "$out/sp.txt" 2>/dev/null | sed 's/^result: /  /'
python3 - "$out/bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"  {'benchmark':<44} {'fwd ms':>8} {'fwd+bwd ms':>11} {'step ms':>9} {'tokens/s':>10} {'MFU':>6} {'GiB':>6}")
for r in rows:
    if r["bench"] == "delta":
        print(f"  delta rule bf16 B{r['B']} T{r['T']} H{r['H']} K{r['K']} V{r['V']:<14} {r['fwd_ms']:8.3f} {r['fwdbwd_ms']:11.3f}")
    else:
        name = f"training step {r['params']/1e6:.1f}M B{r['B']}xT{r['T']}"
        print(f"  {name:<44} {'':>8} {'':>11} {r['step_ms']:9.2f} {r['tokens_per_s']:10.0f} {100*r['mfu']:5.1f}% {r['device_used_gib']:6.1f}")
PY
python3 tests/gpu/attention_vs_sdpa.py "$out/bench_attention.txt" "$out/bench_sdpa.txt"
echo "status: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
