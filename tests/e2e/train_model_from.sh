#!/usr/bin/env bash
# End-to-end: `gdn train --model_from FILE.h5` takes every model setting from a checkpoint (here one
# `gdn import` wrote from a Qwen3 fixture), so `--init_from` the same file trains without restating
# the model; later settings still override it (and then --init_from names the differing field);
# a missing file is an error that names it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
"$GDN" import "$SRC/tests/interop/fixtures/qwen3_qknorm_fp16" --out "$dir/q.h5" > "$dir/import.log" ||
    fail "gdn import failed: $(tail -3 "$dir/import.log")"
args=(--data "$SRC/data/kjv.txt.gz" --seq_len 32 --batch_size 2 --val_tokens 1000 --eval_batches 1
      --steps 2 --backend cpu)

"$GDN" train --model_from "$dir/q.h5" --init_from "$dir/q.h5" "${args[@]}" --out "$dir/a" > "$dir/a.log" 2>&1 ||
    fail "train --model_from --init_from failed: $(tail -3 "$dir/a.log")"
grep -q "initialised weights from" "$dir/a.log" || fail "the run did not start from the imported weights"
grep -q '"qk_norm": true' "$dir/a/config.json" || fail "config.json lacks the checkpoint's qk_norm"
grep -q '"rope_theta": 1000000' "$dir/a/config.json" || fail "config.json lacks the checkpoint's rope_theta"

# without --model_from the default model differs: --init_from refuses, naming fields
if "$GDN" train --init_from "$dir/q.h5" "${args[@]}" --out "$dir/b" > "$dir/b.log" 2>&1; then
    fail "train --init_from a checkpoint of another model shape succeeded"
fi
grep -q "d_model: checkpoint has 64" "$dir/b.log" || fail "the refusal does not name d_model: $(tail -2 "$dir/b.log")"

# an override after --model_from wins (and --init_from then names it)
if "$GDN" train --model_from "$dir/q.h5" --init_from "$dir/q.h5" --rope_theta 500 "${args[@]}" --out "$dir/c" \
        > "$dir/c.log" 2>&1; then
    fail "an overridden rope_theta was ignored"
fi
grep -q "rope_theta" "$dir/c.log" || fail "the refusal does not name rope_theta: $(tail -2 "$dir/c.log")"

if "$GDN" train --model_from "$dir/nope.h5" "${args[@]}" --out "$dir/d" > "$dir/d.log" 2>&1; then
    fail "--model_from a missing file succeeded"
fi
grep -q "model_from .*nope.h5" "$dir/d.log" || fail "the error does not name the file: $(tail -2 "$dir/d.log")"
echo "PASS"
