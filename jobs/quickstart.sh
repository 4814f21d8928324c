#!/usr/bin/env bash
# The main job: installs what is missing, builds gdn, trains on the bundled King James Bible
# corpus, then prints a generated sample. On a GPU (nvidia-smi lists one and the build has the
# CUDA backend) it trains the `small` preset (11M parameters) at batch 64 x 512 into
# runs/quickstart-gpu/; otherwise the `tiny` preset on the CPU into runs/quickstart/.
# Re-running continues the same run (--resume auto) instead of starting over; extra arguments
# are passed to gdn train (e.g. --steps 2000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install_deps.sh
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > build/configure.log 2>&1 ||
  { cat build/configure.log >&2; echo "quickstart: cmake configure failed (log: build/configure.log)" >&2; exit 1; }
cmake --build build -j "$(nproc)"

gpu=0
if grep -q "gdn: CUDA backend ON" build/configure.log && command -v nvidia-smi > /dev/null 2>&1 &&
   nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
  gpu=1
fi
if [ $gpu = 1 ]; then
  # `small` at 64 x 512 (32,768 tokens a step) runs about 43 steps a second on an H200; 500
  # steps (16M tokens, about 4 passes over the corpus, 13 s) reach val_loss 1.02. Longer runs
  # overfit the 4.3 MB corpus: val_loss rises to 1.09 by step 800 and 2.4 by step 2600
  # (docs/performance.md, "Quickstart on a GPU").
  run=runs/quickstart-gpu
  args=(--preset small --batch_size 64 --seq_len 512 --steps 500 --warmup_steps 40 --eval_every 100
        --ckpt_every 250)
else
  run=runs/quickstart
  args=(--preset tiny)
fi
echo "quickstart: training ${args[1]} on the $([ $gpu = 1 ] && echo GPU || echo CPU) into $run/"
# Each preset keeps its own run folder: a run is resumed only with its own model shape.
./build/gdn train "${args[@]}" --out "$run" --resume auto "$@"
echo
echo "---- sample (gdn sample --run $run --prompt 'And God said' --bytes 400) ----"
./build/gdn sample --run "$run" --prompt "And God said" --bytes 400
echo
echo "quickstart: the run is in $run/ (metrics.jsonl, checkpoints); rerun to continue it"
