#!/usr/bin/env bash
# The distillation experiment of docs/distillation.md ("On the GPU"): a softmax-attention teacher
# trained here, its pure GDN student and its hybrid student (one softmax layer in six) distilled
# with a tenth of the teacher's tokens, and GDN / hybrid models of the same shapes trained from
# scratch on as many tokens; then every model evaluated on the same held-out windows.
#
#   jobs/distill_experiment.sh OUT_DIR
#
# Environment (defaults in brackets): GDN [build/gdn], DATA [data/kjv.txt.gz], BACKEND [cuda],
# D_MODEL [384], LAYERS [6], HEADS [6] (head dim 64), KV_HEADS [2], D_FF [1024], SEQ [256],
# BATCH [32], TEACHER_STEPS [1000], FRACTION [10] (percent of the teacher's tokens for each
# student), STAGE1_PERCENT [20] (of the student's steps spent in stage 1), LR [2e-3],
# STUDENT_LR [3e-3], TAU [1], CE_WEIGHT [0], VAL_TOKENS [200000], EVAL_WINDOWS [256]. A teacher
# checkpoint already in OUT_DIR/teacher is used as it is (variants of the students share one).
# Prints one table line per model (held-out loss in nats per token, and its gap to the teacher),
# also written to OUT_DIR/results.json. Every command is echoed, so the run can be repeated by hand.
set -euo pipefail
[ $# -eq 1 ] || { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
out=$1
GDN=${GDN:-$src/build/gdn} DATA=${DATA:-$src/data/kjv.txt.gz} BACKEND=${BACKEND:-cuda}
D_MODEL=${D_MODEL:-384} LAYERS=${LAYERS:-6} HEADS=${HEADS:-6} KV_HEADS=${KV_HEADS:-2} D_FF=${D_FF:-1024}
SEQ=${SEQ:-256} BATCH=${BATCH:-32} TEACHER_STEPS=${TEACHER_STEPS:-1000} FRACTION=${FRACTION:-10}
STAGE1_PERCENT=${STAGE1_PERCENT:-20} LR=${LR:-2e-3} STUDENT_LR=${STUDENT_LR:-3e-3}
TAU=${TAU:-1} CE_WEIGHT=${CE_WEIGHT:-0} VAL_TOKENS=${VAL_TOKENS:-200000} EVAL_WINDOWS=${EVAL_WINDOWS:-256}
[ -x "$GDN" ] || { echo "distill_experiment: no gdn at $GDN (build it or set GDN)" >&2; exit 2; }
[ "$LAYERS" -ge 2 ] || { echo "distill_experiment: LAYERS must be at least 2 (the hybrid keeps one)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
say() { echo "+ $*" >&2; "$@"; }

steps=$((TEACHER_STEPS * FRACTION / 100))
s1=$((steps * STAGE1_PERCENT / 100))
[ "$steps" -ge 2 ] && [ "$s1" -ge 1 ] && [ "$s1" -lt "$steps" ] ||
  { echo "distill_experiment: TEACHER_STEPS x FRACTION gives $steps student steps; need room for both stages" >&2; exit 2; }
hd=$((D_MODEL / HEADS))
pattern=$(printf 'A%.0s' $(seq "$LAYERS"))
hybrid=$(printf 'G%.0s' $(seq $((LAYERS - 1))))A # the last layer stays softmax
common=(--data "$DATA" --seq_len "$SEQ" --batch_size "$BATCH" --val_tokens "$VAL_TOKENS" --eval_every 0
        --backend "$BACKEND")

# the teacher
tckpt=$out/teacher/$(printf 'ckpt_%08d.h5' "$TEACHER_STEPS")
[ -s "$tckpt" ] || say "$GDN" train "${common[@]}" --out "$out/teacher" --steps "$TEACHER_STEPS" --mixers "$pattern" \
  --d_model "$D_MODEL" --n_layers "$LAYERS" --n_heads "$HEADS" --n_kv_heads "$KV_HEADS" --head_dim "$hd" \
  --d_ff "$D_FF" --lr "$LR" --warmup_steps $((TEACHER_STEPS / 20 + 1)) --resume auto > "$out/teacher.log"

# the students: every softmax layer a gated delta rule layer, and all but the last
say "$GDN" distill init --teacher "$tckpt" --out "$out/student_G.h5" --decay teacher --data "$DATA" --seq_len "$SEQ" \
  > "$out/init_G.log"
say "$GDN" distill init --teacher "$tckpt" --out "$out/student_H.h5" --keep-softmax $((LAYERS - 1)) --decay teacher \
  --data "$DATA" --seq_len "$SEQ" > "$out/init_H.log"
for k in G H; do
  say "$GDN" distill train --teacher "$tckpt" --student "$out/student_$k.h5" --out "$out/distill_$k" "${common[@]}" \
    --stage1_steps "$s1" --stage2_steps $((steps - s1)) --stage1_lr "$STUDENT_LR" --stage2_lr "$STUDENT_LR" \
    --warmup_steps $((steps / 20 + 1)) --tau "$TAU" --ce_weight "$CE_WEIGHT" --train all > "$out/distill_$k.log"
  # the same shape from scratch on the same number of tokens
  say "$GDN" train "${common[@]}" --out "$out/scratch_$k" --steps "$steps" --model_from "$out/student_$k.h5" \
    --lr "$STUDENT_LR" --warmup_steps $((steps / 20 + 1)) --resume auto > "$out/scratch_$k.log"
done

ev() { "$GDN" eval --ckpt "$1" --data "$DATA" --val_tokens "$VAL_TOKENS" --seq_len "$SEQ" --batch_size "$BATCH" \
  --max_windows "$EVAL_WINDOWS" --json; }
last() { ls "$1"/ckpt_*.h5 | tail -1; }
{
  echo "{\"teacher_tokens\": $((TEACHER_STEPS * BATCH * SEQ)), \"student_tokens\": $((steps * BATCH * SEQ)),"
  echo " \"models\": {"
  echo "  \"teacher ($pattern)\": $(ev "$tckpt"),"
  echo "  \"GDN student ($(printf 'G%.0s' $(seq "$LAYERS")))\": $(ev "$(last "$out/distill_G/stage2")"),"
  echo "  \"GDN from scratch\": $(ev "$(last "$out/scratch_G")"),"
  echo "  \"hybrid student ($hybrid)\": $(ev "$(last "$out/distill_H/stage2")"),"
  echo "  \"hybrid from scratch\": $(ev "$(last "$out/scratch_H")")"
  echo " }}"
} > "$out/results.json"
python3 - "$out/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
models = r["models"]
t = next(v["loss"] for k, v in models.items() if k.startswith("teacher"))
print(f"teacher trained on {r['teacher_tokens']:,} tokens; students and from-scratch runs on {r['student_tokens']:,} "
      f"({100 * r['student_tokens'] / r['teacher_tokens']:.0f}%)")
print(f"{'model':<36} {'held-out loss':>13} {'vs teacher':>11}")
for k, v in models.items():
    print(f"{k:<36} {v['loss']:13.4f} {100 * (v['loss'] - t) / t:+10.2f}%")
PY
