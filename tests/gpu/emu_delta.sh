#!/usr/bin/env bash
# The CUDA gated delta rule on the CPU, for machines without a GPU, with the CPU emulator of
# tests/gpu/emu (each CUDA thread a coroutine, real barriers and warp shuffles, bf16 rounding,
# the mma.sync / ldmatrix fragments): small cases of tests/gpu/test_gpu_delta.c (every mixer
# kind, both precisions, host and device paths, with and without documents, and a packed row
# against its documents one by one) against the fp64 CPU op, with the test's own limits.
# The delta kernels' tf32 products (the bf16 triangular inverse) are computed element by element
# from shared memory with tf32-rounded operands; cp.async copies at once; blocks run one after
# another, so the forward's two pipelined halves and the backward's two streams run in order.
# It checks index math, masks, buffer sizes and barriers; it says nothing about speed.
# Built with AddressSanitizer and UBSan (the emulated device buffers are exact-size host
# allocations, so an access outside a buffer is reported) and -fno-strict-aliasing: the kernels
# read bf16 and fp32 tiles as 16-byte words (tile_dot, the tile copies), which C++ on the host
# leaves undefined; with strict aliasing GCC reordered those reads (dg of the decaying mixers
# came out wrong at -O2).
# Usage: emu_delta.sh BUILD_DIR  (BUILD_DIR: a CPU or CUDA build of this tree with
# libgdn_model.a, libgdn_real64.a, libgdn_real32.a, tests/libgdn_testref.a). x86-64 Linux with
# g++, gcc, python3, OpenBLAS. Exit 0: every comparison passed; 77: no g++.
set -euo pipefail
command -v g++ > /dev/null || { echo "SKIP: emu_delta.sh needs g++"; exit 77; }
export ASAN_OPTIONS=detect_leaks=0 # the emulator's coroutine stacks live until exit on purpose
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: emu_delta.sh BUILD_DIR}" && pwd)
emu="$root/tests/gpu/emu"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags="-O1 -g -fno-strict-aliasing -fsanitize=address,undefined -fno-sanitize-recover=undefined"
inc=(-I"$work/inc" -I"$emu" -I"$work/gen" -I"$root")
mkdir -p "$work/inc" "$work/obj"
printf '#include "cuda_runtime.h"\n#define CUDART_CB\n' > "$work/inc/cuda_runtime_api.h"

python3 "$emu/gen.py" "$root" "$work/gen" # mma_common.cuh with the emulator's cp.async, ldmatrix, mma
python3 "$root/tests/gpu/emu_delta_gen.py" "$root" "$work/gen" # delta_common.cuh (tf32), delta_*.cu
cuda=(delta_fwd delta_bwd delta_launch delta_hostio)
objs=()
for f in "${cuda[@]}"; do
  g++ -std=c++17 $flags -w "${inc[@]}" -c "$work/gen/model/cuda/$f.cpp" -o "$work/obj/$f.o" &
  objs+=("$work/obj/$f.o")
done
g++ -std=c++17 $flags -Wall -I"$emu" -c "$emu/emu_rt.cpp" -o "$work/obj/emu_rt.o" &
gcc -std=gnu11 $flags -Wall -I"$root" -c "$root/model/check.c" -o "$work/obj/check.o" &
gcc -std=gnu11 $flags -w "${inc[@]}" -c "$root/tests/gpu/emu_delta_main.c" -o "$work/main.o" &
wait
g++ $flags "$work/main.o" "${objs[@]}" "$work/obj/emu_rt.o" "$work/obj/check.o" "$build/tests/libgdn_testref.a" \
    "$build/libgdn_real64.a" "$build/libgdn_real32.a" "$build/libgdn_model.a" -lopenblas -lm -fopenmp -o "$work/emu_delta"
"$work/emu_delta"
