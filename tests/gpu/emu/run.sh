#!/usr/bin/env bash
# Runs the CUDA attention kernels (model/cuda/attention_*.cu) on the CPU, for machines without a
# GPU: gen.py turns the sources into host C++ (inline PTX and launches replaced, everything
# else unchanged), emu_rt.cpp runs every CUDA thread as a coroutine with real barriers and
# warp-collective semantics, and emu_test.c runs the GPU test's fp64 comparisons on small
# shapes. It checks index math, masking, fragment layouts and barrier placement (a shared-memory
# access by another warp between the same two barriers aborts with the address); it says
# nothing about speed. Exit 0: every case passed.
# x86-64 Linux with g++ (C++17), gcc and python3. Usage: run.sh [first [end]]  (case indices)
# SANITIZE=1 builds with AddressSanitizer and UBSan: the emulated device buffers are exact-size
# host allocations, so any kernel access outside a buffer is reported (the role memcheck plays
# on the GPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
here="$root/tests/gpu/emu"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/gen.py" "$root" "$work/gen"
printf '#include "model/cuda/attention_fwd.cpp"\n#include "model/cuda/attention_bwd.cpp"\n#include "model/cuda/attention_host.cpp"\n#include "tests/gpu/emu/sm90a_stub.cpp"\n' > "$work/kernels.cpp"
flags="-O2"
if [ "${SANITIZE:-0}" = 1 ]; then
    flags="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined"
    export ASAN_OPTIONS=detect_leaks=0 # the coroutine stacks live until exit on purpose
fi
g++ -std=c++17 $flags -Wall -Wno-unused-function -Wno-unknown-pragmas -I"$here" -I"$work/gen" -I"$root" \
    -c "$work/kernels.cpp" -o "$work/kernels.o"
g++ -std=c++17 $flags -Wall -I"$here" -c "$here/emu_rt.cpp" -o "$work/emu_rt.o"
gcc -std=gnu11 $flags -Wall -I"$here" -I"$root" -c "$here/emu_test.c" -o "$work/emu_test.o"
# the launchers' fatal errors (GDN_CUDA_DIE) go through gdn_die_at
gcc -std=gnu11 $flags -Wall -I"$root" -c "$root/model/check.c" -o "$work/check.o"
g++ $flags "$work/emu_test.o" "$work/kernels.o" "$work/emu_rt.o" "$work/check.o" -o "$work/emu_test" -lm
"$work/emu_test" "$@"
