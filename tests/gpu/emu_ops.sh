#!/usr/bin/env bash
# Runs the attention layers' CUDA ops (model/cuda/ops_rope.cu, ops_bias.cu) on the CPU, for
# machines without a GPU, with the CPU emulator of tests/gpu/emu (each CUDA thread a coroutine,
# real barriers and warp shuffles, bf16 rounding): emu_ops_gen.py turns the sources into host C++,
# emu_ops_main.c runs test_gpu_ops.c's attention_layer_ops cases (fp64 CPU references, the same
# limits) in both precisions. Built with AddressSanitizer and UBSan (the emulated device buffers
# are exact-size host allocations, so an access outside a buffer is reported). It checks index
# math, masking, reductions and barrier placement; it says nothing about speed.
# Usage: emu_ops.sh BUILD_DIR (a CPU or CUDA build of this tree: its libgdn_real64.a and
# tests/libgdn_testref.a provide the CPU references). x86-64 Linux with g++, gcc and python3.
# Exit 0: every comparison passed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: emu_ops.sh BUILD_DIR}" && pwd)
emu="$root/tests/gpu/emu"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$root/tests/gpu/emu_ops_gen.py" "$root" "$work/gen"
printf '#include "tests/gpu/emu_ops_shim.h"\n#include "model/cuda/ops_rope.cpp"\n#include "model/cuda/ops_bias.cpp"\n#include "model/cuda/ops_mem.cpp"\n' \
  > "$work/kernels.cpp"
flags="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined"
export ASAN_OPTIONS=detect_leaks=0 # the emulator's coroutine stacks live until exit on purpose
g++ -std=c++17 $flags -Wall -Wno-unused-function -Wno-unknown-pragmas -I"$emu" -I"$work/gen" -I"$root" \
    -c "$work/kernels.cpp" -o "$work/kernels.o"
g++ -std=c++17 $flags -Wall -I"$emu" -c "$emu/emu_rt.cpp" -o "$work/emu_rt.o"
# the rest of test_gpu_ops.c is compiled but never called: its other ops become stubs below
gcc -std=gnu11 $flags -Wall -Wno-implicit-function-declaration -I"$emu" -I"$root" \
    -c "$root/tests/gpu/emu_ops_main.c" -o "$work/main.o"
gcc -std=gnu11 $flags -Wall -I"$root" -c "$root/model/check.c" -o "$work/check.o"
libs=("$build/tests/libgdn_testref.a" "$build/libgdn_real64.a")
defined=$(nm --defined-only "$work/kernels.o" "$work/emu_rt.o" "$work/check.o" "${libs[@]}" 2>/dev/null |
  awk 'NF == 3 { print $3 }' | sort -u)
{
  echo '#include <stdio.h>'
  echo '#include <stdlib.h>'
  nm -u "$work/main.o" | awk '{ print $2 }' | grep -E '^(gdn_|cuda)' | sort -u | comm -23 - <(echo "$defined") |
    while read -r s; do echo "void $s(void) { fprintf(stderr, \"emu_ops: $s is not emulated\\n\"); abort(); }"; done
} > "$work/stubs.c"
gcc -std=gnu11 -w -c "$work/stubs.c" -o "$work/stubs.o"
g++ $flags "$work/main.o" "$work/kernels.o" "$work/emu_rt.o" "$work/check.o" "$work/stubs.o" "${libs[@]}" \
    -lopenblas -lm -fopenmp -o "$work/emu_ops"
"$work/emu_ops"
