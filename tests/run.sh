#!/usr/bin/env bash
# Builds gdn and runs the whole CTest suite: a normal build, then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer, then the libFuzzer harnesses for a bounded time
# each (GDN_FUZZ_SECONDS, default 40). Installs missing system packages first, the test-only
# ones included (clang and libFuzzer for the fuzz stage, OpenMP for clang, llvm-symbolizer for
# readable reports, g++ for the CUDA model on the CPU emulator).
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install_deps.sh --tests clang-14 libclang-rt-14-dev libomp-14-dev llvm-14 g++
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -j "$jobs")
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGDN_SANITIZE=ON -DGDN_CUDA=OFF >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -L unit)
cc=$(command -v clang-14 || command -v clang) || {
  echo "tests/run.sh: clang not found after installing clang-14: the fuzz stage needs it" >&2
  exit 1
}
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER="$cc" -DGDN_FUZZ=ON -DGDN_CUDA=OFF \
  -DGDN_FUZZ_SECONDS="${GDN_FUZZ_SECONDS:-40}" >/dev/null
cmake --build build-fuzz -j "$jobs"
(cd build-fuzz && ctest --output-on-failure -j "$jobs" -L fuzz)
