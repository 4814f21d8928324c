#!/usr/bin/env bash
# The CUDA model on the CPU, for machines without a GPU, with the CPU emulator of tests/gpu/emu
# (each CUDA thread a coroutine, real barriers and warp shuffles, bf16 rounding, the tensor-core
# fragments of the attention and delta-rule kernels):
#   ops:   test_gpu_ops.c's checks against the fp64 CPU ops in both precisions (emu_ops_main.c
#          lists them: the attention layers' ops, embedding, norms, gated norm, SwiGLU, gates,
#          cross-entropy, gradient norm, head packing, the short convolution with and without
#          documents);
#   model: cases of test_gpu_model.c (emu_model_main.c lists them: hybrids of delta-rule and
#          attention layers, softmax only, the delta rule with its value heads split, the GDML
#          pattern, documents, segments through the sequence-parallel hooks): loss, logits and
#          every gradient of the CUDA model (its host code, ops and kernels as they are; the
#          GEMMs on the host in place of cuBLASLt, tests/gpu/emu_gemm.cpp) against the fp64 CPU
#          model, fp32 and bf16; and the teacher-forced mixer fed by a teacher model's own stream
#          against the same through the host (distillation's stage 1), bitwise, through the CUDA
#          backend table (model/backend/cuda.c).
# emu_gen.py, emu_delta_gen.py and tests/gpu/emu/gen.py turn the sources into host C++;
# everything is built with AddressSanitizer and UBSan (the emulated device buffers are exact-size
# host allocations, so an access outside a buffer is reported). It checks index math, buffer sizes, strides, reductions,
# barrier placement and the gradients' plumbing; it says nothing about speed.
# Usage: [EMU_CASES="FIRST END"] emu_attn.sh BUILD_DIR [ops|model|all]  (EMU_CASES: the model
# check's cases FIRST .. END-1 of 0..8, default all; BUILD_DIR: a CPU or CUDA build of this tree,
# for the CPU model and references: libgdn_model.a, libgdn_real64.a, libgdn_real32.a,
# tests/libgdn_testref.a). x86-64 Linux with g++, gcc, python3, OpenBLAS and zlib.
# Exit 0: every comparison passed; 77: no g++.
set -euo pipefail
command -v g++ > /dev/null || { echo "SKIP: emu_attn.sh needs g++"; exit 77; }
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: emu_attn.sh BUILD_DIR [ops|model|all]}" && pwd)
what=${2:-all}
emu="$root/tests/gpu/emu"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=detect_leaks=0 # the emulator's coroutine stacks live until exit on purpose
flags="-O1 -g -fno-strict-aliasing -fsanitize=address,undefined -fno-sanitize-recover=undefined" # see emu_delta.sh
inc=(-I"$work/inc" -I"$emu" -I"$work/gen" -I"$root")
mkdir -p "$work/inc" "$work/obj"
printf '#include "cuda_runtime.h"\n#define CUDART_CB\n' > "$work/inc/cuda_runtime_api.h"

python3 "$emu/gen.py" "$root" "$work/gen" # the attention kernels (and mma_common.cuh)
for f in attention_fwd attention_bwd attention_host; do
  sed -i '1i #include "tests/gpu/emu_shim.h"' "$work/gen/model/cuda/$f.cpp"
done
cuda=(ops_rope ops_bias ops_mem ops_norm ops_act ops_conv ops_embed ops_loss ops_distill ops_optim ops_pack model_cuda_setup
      model_cuda_fwd model_cuda_bwd model_cuda_attn model_cuda_bench)
python3 "$root/tests/gpu/emu_gen.py" "$root" "$work/gen" "${cuda[@]/%/.cu}"
python3 "$root/tests/gpu/emu_delta_gen.py" "$root" "$work/gen" # the delta-rule kernels and host code
objs=()
for f in "${cuda[@]}" attention_fwd attention_bwd attention_host delta_fwd delta_bwd delta_launch delta_hostio; do
  g++ -std=c++17 $flags -w "${inc[@]}" -c "$work/gen/model/cuda/$f.cpp" -o "$work/obj/$f.o" &
  objs+=("$work/obj/$f.o")
done
g++ -std=c++17 $flags -Wall -Wno-unknown-pragmas "${inc[@]}" -c "$root/tests/gpu/emu_gemm.cpp" -o "$work/obj/gemm.o" &
g++ -std=c++17 $flags -Wall -I"$emu" -c "$emu/emu_rt.cpp" -o "$work/obj/emu_rt.o" &
g++ -std=c++17 $flags -w "${inc[@]}" -include "$root/tests/gpu/emu_shim.h" -c "$emu/sm90a_stub.cpp" -o "$work/obj/sm90a_stub.o" &
gcc -std=gnu11 $flags -Wall -I"$root" -c "$root/model/check.c" -o "$work/obj/check.o" &
gcc -std=gnu11 $flags -Wall -I"$root" -c "$root/model/backend/cuda.c" -o "$work/obj/backend_cuda.o" &
wait
objs+=("$work/obj/gemm.o" "$work/obj/emu_rt.o" "$work/obj/check.o" "$work/obj/sm90a_stub.o" "$work/obj/backend_cuda.o")
libs=("$build/tests/libgdn_testref.a" "$build/libgdn_real64.a" "$build/libgdn_real32.a" "$build/libgdn_model.a")

# prog NAME MAIN.c: the test program, its unemulated calls (never made) as stubs
prog() {
  local name=$1 main=$2
  gcc -std=gnu11 $flags -w "${inc[@]}" -c "$main" -o "$work/$name.o"
  local defined
  defined=$(nm --defined-only "${objs[@]}" "${libs[@]}" 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u)
  {
    echo '#include <stdio.h>'
    echo '#include <stdlib.h>'
    nm -u "$work/$name.o" "${objs[@]}" | awk 'NF == 2 { print $2 }' | grep -E '^(gdn_|cuda)' | sort -u |
      comm -23 - <(echo "$defined") |
      while read -r s; do echo "void $s(void) { fprintf(stderr, \"emu_attn: $s is not emulated\\n\"); abort(); }"; done
  } > "$work/stubs_$name.c"
  gcc -std=gnu11 -w -c "$work/stubs_$name.c" -o "$work/stubs_$name.o"
  g++ $flags "$work/$name.o" "${objs[@]}" "$work/stubs_$name.o" "${libs[@]}" -lopenblas -lz -lm -fopenmp \
      -o "$work/$name"
}
status=0
if [ "$what" = ops ] || [ "$what" = all ]; then
  prog emu_ops "$root/tests/gpu/emu_ops_main.c"
  "$work/emu_ops" | grep -v " ok$" || status=1
fi
if [ "$what" = model ] || [ "$what" = all ]; then
  prog emu_model "$root/tests/gpu/emu_model_main.c"
  "$work/emu_model" ${EMU_CASES:-} || status=1
fi
exit $status
