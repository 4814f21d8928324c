#!/usr/bin/env bash
# Builds gdn and runs the whole CTest suite: a normal build, then the unit tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer. Installs missing system packages first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install_deps.sh --tests
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure -j "$jobs")
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGDN_SANITIZE=ON -DGDN_CUDA=OFF >/dev/null
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -L unit)
