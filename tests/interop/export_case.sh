#!/usr/bin/env bash
# Makes the export cases that tests/interop/check_export.py runs through transformers:
#
#   bash tests/interop/export_case.sh BUILD_DIR/gdn OUTDIR
#   python3 tests/interop/check_export.py OUTDIR
#
# For each case it trains a tiny checkpoint for a few steps at a high learning rate (so norms,
# gates and biases are far from their initial values and a wrong mapping shows), exports it to
# OUTDIR/NAME/ (config.json + model.safetensors) and writes gdn's own fp32 logits for two
# sequences of 70 ids (longer than one 64-token chunk) to OUTDIR/NAME.expected.json. The logits
# come from `gdn op logits` when the binary has it (and python3 has h5py), else from the
# export_case_logits program built beside gdn (BUILD_DIR/tests/export_case_logits).
# Cases: gdn (Qwen3-Next), gdn_tied (Qwen3-Next, tied embeddings, 4 heads, conv width 3),
# hybrid (Qwen3-Next, G A G layers: a full-attention layer with q/k norms, biases and GQA),
# qwen3 (q/k norms, grouped-query attention), qwen2 (q/k/v biases, tied), llama, llama_bias
# (q/k/v biases with a head_dim other than d_model / n_heads: Llama's attention_bias).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 BUILD_DIR/gdn OUTDIR" >&2; exit 2; }
GDN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
OUT=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$GDN" ] || { echo "export_case.sh: $GDN is not an executable gdn" >&2; exit 2; }
mkdir -p "$OUT"
B=2 T=70 SEED=11

use_op=0
if "$GDN" op logits --help > /dev/null 2>&1 && python3 -c 'import h5py, numpy' 2> /dev/null; then
  use_op=1
else
  HELPER=""
  for h in "$(dirname "$GDN")/tests/export_case_logits" "$(dirname "$GDN")/export_case_logits"; do
    [ -x "$h" ] && HELPER=$h && break
  done
  [ -n "$HELPER" ] || { echo "export_case.sh: neither 'gdn op logits' nor export_case_logits (build the tests: cmake --build BUILD_DIR)" >&2; exit 1; }
fi

# gdn's logits of CKPT for B x T ids from SEED, as NAME.expected.json.
logits() { # logits CKPT JSON
  if [ $use_op -eq 0 ]; then
    "$HELPER" "$1" "$2" $B $T $SEED
    return
  fi
  python3 - "$GDN" "$1" "$2" $B $T $SEED <<'EOF'
import json, subprocess, sys, tempfile, os
import h5py, numpy as np
gdn, ck, out, B, T, seed = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:])
with h5py.File(ck, "r") as f:
    V = int(f["model_config"].attrs["vocab_size"])
ids = np.random.default_rng(seed).integers(0, V, size=(B, T), dtype=np.int32)
with tempfile.TemporaryDirectory() as d:
    i, o = os.path.join(d, "ids.h5"), os.path.join(d, "logits.h5")
    with h5py.File(i, "w") as f:
        f["ids"] = ids
    subprocess.run([gdn, "op", "logits", "--ckpt", ck, "--in", i, "--out", o], check=True)
    with h5py.File(o, "r") as f:
        lg = f["logits"][()].astype(np.float32)
json.dump({"ids": ids.tolist(), "logits_shape": list(lg.shape), "logits": [float(x) for x in lg.ravel()],
           "source": "gdn op logits"}, open(out, "w"))
EOF
}

common=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 48 --n_layers 2 --d_ff 96 --seq_len 64
        --batch_size 4 --steps 6 --warmup_steps 0 --lr 0.03 --eval_every 0 --backend cpu)
case_() { # case_ NAME train-options...
  local name=$1; shift
  local run="$OUT/runs/$name"
  rm -rf "$run"
  "$GDN" train "${common[@]}" --seed ${#name} --out "$run" "$@" > "$OUT/$name.train.log"
  local ck
  ck=$(ls "$run"/ckpt_*.h5 | tail -1)
  "$GDN" export "$ck" --out "$OUT/$name" --force
  logits "$ck" "$OUT/$name.expected.json"
}

case_ gdn --mixers G --n_heads 2 --head_dim 16 --expand_v 2 --conv_width 4
case_ gdn_tied --mixers G --n_heads 4 --head_dim 8 --expand_v 1 --conv_width 3 --tie_embeddings true --norm_eps 1e-5 --chunk_size 16
case_ hybrid --mixers GAG --n_layers 3 --n_heads 4 --head_dim 8 --n_kv_heads 2 --attn_head_dim 16 --qk_norm true --qkv_bias true --rope_theta 50000
case_ qwen3 --mixers A --n_heads 4 --n_kv_heads 2 --attn_head_dim 16 --qk_norm true --rope_theta 100000
case_ qwen2 --mixers A --n_heads 4 --n_kv_heads 1 --attn_head_dim 12 --qkv_bias true --tie_embeddings true
case_ llama --mixers A --n_heads 4 --n_kv_heads 2 --attn_head_dim 12
case_ llama_bias --mixers A --n_heads 2 --attn_head_dim 16 --qkv_bias true
echo "export_case.sh: wrote $(ls -d "$OUT"/*.expected.json | wc -l) cases to $OUT;" \
     "check them with: python3 $SRC/tests/interop/check_export.py $OUT"
