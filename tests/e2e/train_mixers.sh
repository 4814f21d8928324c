#!/usr/bin/env bash
# End-to-end: a model with one layer of each mixer kind (--mixers GDML) trains on the bundled
# corpus, samples, and shows its pattern in `gdn inspect`; its layers hold only the tensors of
# their gates; resuming with another pattern is refused naming `mixers`; --backend cuda without
# a GPU is a usage error.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
args=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 32 --n_layers 4 --n_heads 2 --head_dim 16
      --d_ff 64 --seq_len 32 --batch_size 4 --warmup_steps 2 --eval_every 3 --eval_batches 1 --seed 5
      --backend cpu)

"$GDN" train "${args[@]}" --mixers GDML --steps 6 --out "$dir/a" > "$dir/a.log"
grep -q "mixers  *GDML" "$dir/a.log" || fail "the resolved settings do not show mixers GDML"
grep -q '"mixers": "GDML"' "$dir/a/config.json" || fail "config.json lacks the pattern"
ck="$dir/a/ckpt_00000006.h5"
[ -f "$ck" ] || fail "no final checkpoint"

"$GDN" inspect "$ck" > "$dir/inspect.txt" || fail "gdn inspect failed"
grep -q "mixers=GDML" "$dir/inspect.txt" || fail "gdn inspect does not show mixers=GDML"
# layer 0 (G) has every gate; 1 (D) no decay; 2 (M) no beta; 3 (L) neither
has() { grep -q "model\.layers\.$1\.attn\.$2 " "$dir/inspect.txt"; }
has 0 A_log && has 0 dt_bias && has 0 a_proj.weight && has 0 b_proj.weight || fail "layer 0 (G) lacks a gate tensor"
! has 1 A_log && ! has 1 a_proj.weight && has 1 b_proj.weight || fail "layer 1 (D) tensors wrong"
has 2 A_log && has 2 a_proj.weight && ! has 2 b_proj.weight || fail "layer 2 (M) tensors wrong"
! has 3 A_log && ! has 3 dt_bias && ! has 3 a_proj.weight && ! has 3 b_proj.weight || fail "layer 3 (L) tensors wrong"
"$GDN" inspect --json "$ck" | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["model"]["mixers"] == "GDML", r["model"]'

"$GDN" sample --run "$dir/a" --prompt "And" --bytes 40 --seed 2 > "$dir/sample.txt" 2> "$dir/sample.err" \
  || { cat "$dir/sample.err"; fail "gdn sample failed on a GDML model"; }
[ "$(wc -c < "$dir/sample.txt")" -eq $((3 + 40 + 1)) ] || fail "gdn sample wrote the wrong number of bytes"

# resume with another pattern: refused, naming the field and both patterns
if "$GDN" train "${args[@]}" --mixers GGML --steps 8 --resume auto --out "$dir/a" > "$dir/r.out" 2> "$dir/r.err"; then
  fail "resume with a different pattern was accepted"
fi
grep -q 'mixers: .*"GDML".*"GGML"' "$dir/r.err" "$dir/r.out" || { cat "$dir/r.err"; fail "resume refusal does not name mixers"; }
# the same pattern resumes
"$GDN" train "${args[@]}" --mixers GDML --steps 8 --resume auto --out "$dir/a" > "$dir/r2.log" \
  || fail "resume with the same pattern failed"

# bad patterns and the cuda backend: usage errors (status 2) with a clear message
expect_usage() { # expect_usage PATTERN args...
  local pat=$1; shift
  set +e; "$GDN" train "${args[@]}" --steps 1 --out "$dir/x" "$@" > "$dir/e.out" 2> "$dir/e.err"; local st=$?; set -e
  [ $st -eq 2 ] || { cat "$dir/e.err"; fail "status $st for $*, expected 2"; }
  grep -q -- "$pat" "$dir/e.err" || { cat "$dir/e.err"; fail "message for $* lacks '$pat'"; }
}
expect_usage "'X' at position 2 is not a mixer; valid letters: G (gdn), D (deltanet)" --mixers GX
expect_usage "mixers is empty" --mixers ""
expect_usage "only n_layers = 4" --mixers GDMLG
expect_usage "use --backend cpu" --mixers GD --backend cuda
[ ! -e "$dir/x/metrics.jsonl" ] || fail "a refused run wrote metrics"
echo "GDML: trained, sampled, inspected; other pattern refused on resume; cuda without a GPU refused"
