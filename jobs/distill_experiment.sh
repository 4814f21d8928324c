#!/usr/bin/env bash
# The distillation experiment of docs/distillation.md ("On the GPU"): a softmax-attention teacher,
# its pure GDN student and its hybrid student (one softmax layer in six) distilled with a tenth
# of the teacher's tokens, and GDN / hybrid models of the same shapes trained from scratch on as
# many tokens; then every model evaluated on the same held-out windows, the teacher's attention
# layers measured against their training-free linearisations (gdn linearize), and the curves
# drawn (jobs/distill_plot.py).
#
#   jobs/distill_experiment.sh OUT_DIR
#
# The teacher: trained by gdn train (the default; runs in OUT_DIR), or with TEACHER_HF=1 a
# LlamaForCausalLM of the same shape trained by transformers (jobs/hf_teacher.py, into
# OUT_DIR/hf/teacher), or with TEACHER_HF=DIR the Hugging Face model in DIR; either is brought in
# by gdn import, and its students and from-scratch runs go to OUT_DIR/hf (the same layout).
#
# Environment (defaults in brackets): GDN [build/gdn], DATA [data/kjv.txt.gz], BACKEND [cuda],
# PYTHON [python3] (results table, plots, and with TEACHER_HF=1 torch and transformers),
# VOCAB [256] (the teacher's vocabulary: 256 for text read as bytes, the tokenizer's size for token
# shards), D_MODEL [384], LAYERS [6], HEADS [6] (head dim 64), KV_HEADS [2], D_FF [1024], SEQ [256],
# BATCH [32], TEACHER_STEPS [1000], FRACTION [10] (percent of the teacher's tokens for each
# student), STUDENT_BATCH [BATCH] (the students' and from-scratch runs' batch: their steps are
# their tokens over STUDENT_BATCH x SEQ), STAGE1_PERCENT [20] (of the student's steps spent in
# stage 1), LR [2e-3], STUDENT_LR [3e-3], TAU [1], CE_WEIGHT [0], TRAIN [all] (stage 2's
# --train), KEEP [LAYERS-1] (the layer the hybrid keeps softmax, 0-based), STUDENTS [G H] (G:
# the pure GDN student, H: the hybrid; each with its from-scratch run), VAL_TOKENS [200000],
# EVAL_WINDOWS [256],
# TEACHER_EVAL_EVERY [TEACHER_STEPS/20] and EVAL_EVERY [student steps/10] (validation passes for
# the curves), LIN_WINDOWS [16] (held-out windows for gdn linearize; 0 skips it), TEACHER_HF [unset].
# A teacher already in place (OUT_DIR/teacher/ckpt_<TEACHER_STEPS>.h5, OUT_DIR/hf/teacher.h5) is used
# as it is (variants of the students share one). With a DIR, the shapes come from its config.json
# and TEACHER_STEPS still sets the students' budget. Prints one table line per model (held-out
# loss in nats per token, and its gap to the teacher), also written to results.json; writes
# linearize.json and, when PYTHON has matplotlib, loss_curves.png and distill_stages.png beside
# it. Every command is echoed, so the run can be repeated by hand.
set -euo pipefail
[ $# -eq 1 ] || { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
out=$1
GDN=${GDN:-$src/build/gdn} DATA=${DATA:-$src/data/kjv.txt.gz} BACKEND=${BACKEND:-cuda} PYTHON=${PYTHON:-python3}
D_MODEL=${D_MODEL:-384} LAYERS=${LAYERS:-6} HEADS=${HEADS:-6} KV_HEADS=${KV_HEADS:-2} D_FF=${D_FF:-1024}
VOCAB=${VOCAB:-256} SEQ=${SEQ:-256} BATCH=${BATCH:-32} TEACHER_STEPS=${TEACHER_STEPS:-1000} FRACTION=${FRACTION:-10}
STAGE1_PERCENT=${STAGE1_PERCENT:-20} LR=${LR:-2e-3} STUDENT_LR=${STUDENT_LR:-3e-3}
STUDENT_BATCH=${STUDENT_BATCH:-$BATCH} TRAIN=${TRAIN:-all} STUDENTS=${STUDENTS:-G H}
TAU=${TAU:-1} CE_WEIGHT=${CE_WEIGHT:-0} VAL_TOKENS=${VAL_TOKENS:-200000} EVAL_WINDOWS=${EVAL_WINDOWS:-256}
LIN_WINDOWS=${LIN_WINDOWS:-16} TEACHER_HF=${TEACHER_HF:-}
[ -x "$GDN" ] || { echo "distill_experiment: no gdn at $GDN (build it or set GDN)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
say() { echo "+ $*" >&2; "$@"; }

steps=$((TEACHER_STEPS * BATCH * FRACTION / (100 * STUDENT_BATCH)))
s1=$((steps * STAGE1_PERCENT / 100))
[ "$steps" -ge 2 ] && [ "$s1" -ge 1 ] && [ "$s1" -lt "$steps" ] ||
  { echo "distill_experiment: TEACHER_STEPS x FRACTION gives $steps student steps; need room for both stages" >&2; exit 2; }
TEACHER_EVAL_EVERY=${TEACHER_EVAL_EVERY:-$(( TEACHER_STEPS / 20 > 0 ? TEACHER_STEPS / 20 : 1 ))}
EVAL_EVERY=${EVAL_EVERY:-$(( steps / 10 > 0 ? steps / 10 : 1 ))}
# validation passes on the first EVAL_WINDOWS held-out windows, the ones the table evaluates
common=(--data "$DATA" --seq_len "$SEQ" --batch_size "$BATCH" --val_tokens "$VAL_TOKENS" --backend "$BACKEND"
        --eval_batches $(( EVAL_WINDOWS / BATCH > 0 ? EVAL_WINDOWS / BATCH : 1 )))
scommon=(--data "$DATA" --seq_len "$SEQ" --batch_size "$STUDENT_BATCH" --val_tokens "$VAL_TOKENS" --backend "$BACKEND"
         --eval_batches $(( EVAL_WINDOWS / STUDENT_BATCH > 0 ? EVAL_WINDOWS / STUDENT_BATCH : 1 )))
for k in $STUDENTS; do
  case $k in G | H) ;; *) echo "distill_experiment: STUDENTS: '$k' is not G or H" >&2; exit 2 ;; esac
done
[ -n "${STUDENTS// /}" ] || { echo "distill_experiment: STUDENTS is empty (give G, H or both)" >&2; exit 2; }

# the teacher: $tckpt, its name in the table, and the directory of this run ($root)
case $TEACHER_HF in
"" | 0)
  root=$out
  [ "$LAYERS" -ge 2 ] || { echo "distill_experiment: LAYERS must be at least 2 (the hybrid keeps one)" >&2; exit 2; }
  pattern=$(printf 'A%.0s' $(seq "$LAYERS"))
  tname="teacher ($pattern)"
  tckpt=$out/teacher/$(printf 'ckpt_%08d.h5' "$TEACHER_STEPS")
  [ -s "$tckpt" ] || say "$GDN" train "${common[@]}" --out "$out/teacher" --steps "$TEACHER_STEPS" --mixers "$pattern" \
    --vocab_size "$VOCAB" --d_model "$D_MODEL" --n_layers "$LAYERS" --n_heads "$HEADS" --n_kv_heads "$KV_HEADS" --head_dim $((D_MODEL / HEADS)) \
    --d_ff "$D_FF" --lr "$LR" --warmup_steps $((TEACHER_STEPS / 20 + 1)) --eval_every "$TEACHER_EVAL_EVERY" \
    --resume auto > "$out/teacher.log"
  ;;
*)
  root=$out/hf
  mkdir -p "$root"
  if [ "$TEACHER_HF" = 1 ]; then
    hf=$root/teacher
    tname="teacher (Llama by transformers"
    [ -s "$hf/model.safetensors" ] || say env DATA="$DATA" VOCAB="$VOCAB" D_MODEL="$D_MODEL" LAYERS="$LAYERS" HEADS="$HEADS" \
      KV_HEADS="$KV_HEADS" D_FF="$D_FF" SEQ="$SEQ" BATCH="$BATCH" STEPS="$TEACHER_STEPS" LR="$LR" \
      WARMUP=$((TEACHER_STEPS / 20 + 1)) VAL_TOKENS="$VAL_TOKENS" EVAL_EVERY="$TEACHER_EVAL_EVERY" \
      EVAL_WINDOWS="$EVAL_WINDOWS" "$PYTHON" "$src/jobs/hf_teacher.py" "$hf" > "$root/teacher.log"
  else
    hf=$(cd "$TEACHER_HF" 2>/dev/null && pwd) && [ -s "$hf/config.json" ] ||
      { echo "distill_experiment: TEACHER_HF=$TEACHER_HF: not a Hugging Face model directory (no config.json); give 1 to train one" >&2; exit 2; }
    tname="teacher (imported from $(basename "$hf")"
  fi
  tckpt=$root/teacher.h5
  [ -s "$tckpt" ] || say "$GDN" import "$hf" --out "$tckpt" > "$root/import.log"
  LAYERS=$("$GDN" inspect --json "$tckpt" | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["model"]["n_layers"])')
  [ "$LAYERS" -ge 2 ] || { echo "distill_experiment: the teacher has $LAYERS layer(s); the hybrid student needs at least 2" >&2; exit 2; }
  pattern=$(printf 'A%.0s' $(seq "$LAYERS"))
  tname="$tname, $pattern)"
  ;;
esac
KEEP=${KEEP:-$((LAYERS - 1))}
[[ $KEEP =~ ^[0-9]+$ ]] && [ "$KEEP" -lt "$LAYERS" ] ||
  { echo "distill_experiment: KEEP=$KEEP is not a layer of the $LAYERS-layer teacher (0 to $((LAYERS - 1)))" >&2; exit 2; }
hybrid=$(for i in $(seq 0 $((LAYERS - 1))); do [ "$i" -eq "$KEEP" ] && printf A || printf G; done)

# the students: every softmax layer a gated delta rule layer (G), and all but layer KEEP (H)
for k in $STUDENTS; do
  keep=(); [ "$k" = H ] && keep=(--keep-softmax "$KEEP")
  say "$GDN" distill init --teacher "$tckpt" --out "$root/student_$k.h5" "${keep[@]}" --decay teacher --data "$DATA" \
    --seq_len "$SEQ" > "$root/init_$k.log"
  say "$GDN" distill train --teacher "$tckpt" --student "$root/student_$k.h5" --out "$root/distill_$k" "${scommon[@]}" \
    --stage1_steps "$s1" --stage2_steps $((steps - s1)) --stage1_lr "$STUDENT_LR" --stage2_lr "$STUDENT_LR" \
    --warmup_steps $((steps / 20 + 1)) --tau "$TAU" --ce_weight "$CE_WEIGHT" --train "$TRAIN" \
    --eval_every "$EVAL_EVERY" > "$root/distill_$k.log"
  # the same shape from scratch on the same number of tokens
  say "$GDN" train "${scommon[@]}" --out "$root/scratch_$k" --steps "$steps" --model_from "$root/student_$k.h5" \
    --lr "$STUDENT_LR" --warmup_steps $((steps / 20 + 1)) --eval_every "$EVAL_EVERY" --resume auto > "$root/scratch_$k.log"
done

ev() { "$GDN" eval --ckpt "$1" --data "$DATA" --val_tokens "$VAL_TOKENS" --seq_len "$SEQ" --batch_size "$BATCH" \
  --max_windows "$EVAL_WINDOWS" --json; }
last() { ls "$1"/ckpt_*.h5 | tail -1; }
{
  echo "{\"teacher_tokens\": $((TEACHER_STEPS * BATCH * SEQ)), \"student_tokens\": $((steps * STUDENT_BATCH * SEQ)),"
  echo " \"models\": {"
  echo -n "  \"$tname\": $(ev "$tckpt")"
  for k in $STUDENTS; do
    if [ "$k" = G ]; then name="GDN student ($(printf 'G%.0s' $(seq "$LAYERS")))" sname="GDN from scratch"
    else name="hybrid student ($hybrid)" sname="hybrid from scratch"; fi
    echo ","
    echo "  \"$name\": $(ev "$(last "$root/distill_$k/stage2")"),"
    echo -n "  \"$sname\": $(ev "$(last "$root/scratch_$k")")"
  done
  echo
  echo " }}"
} > "$root/results.json"

status=0
# the teacher's attention layers against their training-free linearisations (CPU, fp64)
if [ "$LIN_WINDOWS" != 0 ]; then
  say "$GDN" linearize --teacher "$tckpt" --data "$DATA" --val_tokens "$VAL_TOKENS" --seq_len "$SEQ" \
    --windows "$LIN_WINDOWS" --json > "$root/linearize.json.tmp" && mv "$root/linearize.json.tmp" "$root/linearize.json" ||
    { echo "distill_experiment: gdn linearize failed (the command is above); no linearize.json" >&2; status=1; }
fi
if "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
  say "$PYTHON" "$src/jobs/distill_plot.py" "$root" || status=1
  # after a transformers teacher, gdn's run (when there is one) gets teachers.png: both teachers
  if [ "$root" != "$out" ] && [ -d "$out/teacher" ]; then say "$PYTHON" "$src/jobs/distill_plot.py" "$out" || status=1; fi
else
  echo "distill_experiment: $PYTHON cannot import matplotlib: no curves (install python3-matplotlib, or run" \
       "jobs/distill_plot.py $root with a python that has it)" >&2
fi

# the table of each teacher run so far: gdn's in OUT_DIR, the transformers one in OUT_DIR/hf
"$PYTHON" - "$out/results.json" "$out/hf/results.json" <<'PY'
import json, os, sys
for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    r = json.load(open(path))
    models = r["models"]
    t = next(v["loss"] for k, v in models.items() if k.startswith("teacher"))
    print(f"{path}: teacher trained on {r['teacher_tokens']:,} tokens; students and from-scratch runs on "
          f"{r['student_tokens']:,} ({100 * r['student_tokens'] / r['teacher_tokens']:.0f}%)")
    print(f"{'model':<44} {'held-out loss':>13} {'vs teacher':>11}")
    for k, v in models.items():
        print(f"{k:<44} {v['loss']:13.4f} {100 * (v['loss'] - t) / t:+10.2f}%")
PY
exit $status
