#!/usr/bin/env bash
# The main job: installs missing packages, builds gdn, trains the `tiny` preset on the bundled
# King James Bible corpus into runs/quickstart/, then prints a generated sample.
# Re-running continues the same run (--resume auto) instead of starting over.
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
./build/gdn train --preset tiny --out runs/quickstart --resume auto "$@"
echo
echo "---- sample (gdn sample --run runs/quickstart --prompt 'And God said' --bytes 400) ----"
./build/gdn sample --run runs/quickstart --prompt "And God said" --bytes 400
