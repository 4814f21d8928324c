#!/usr/bin/env bash
# End-to-end: a model with one layer of each mixer kind (--mixers GDML) trains on the bundled
# corpus, samples, and shows its pattern in `gdn inspect`; its layers hold only the tensors of
# their gates; resuming with another pattern is refused naming `mixers`; --backend cuda without
# a GPU is a usage error, and the cuda backend refuses softmax-attention layers. Softmax
# attention (A): a hybrid GGGA and a softmax-only model train with the loss falling, sample, and
# show their settings in inspect.
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
expect_usage "sequence parallelism of attention layers (mixer A in mixers \"GA\") runs on the CPU backend only" --mixers GA --sp 2 --backend cuda

# softmax attention (mixer A): a hybrid GGGA and a softmax-only model train (the loss falls),
# sample, and show the attention settings in `gdn inspect`; the cuda backend refuses them
loss_falls() { # loss_falls RUNDIR: the last step's loss is below the first's
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY' || fail "the loss did not fall in $1"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
first, last = rows[0]["loss"], rows[-1]["loss"]
print(f"{sys.argv[1]}: loss {first:.4f} -> {last:.4f}")
assert last < first - 0.1, (first, last)
PY
}
attn=(--lr 1e-2 --n_heads 4 --n_kv_heads 2 --attn_head_dim 8 --qk_norm true --qkv_bias true --steps 12)
"$GDN" train "${args[@]}" "${attn[@]}" --mixers GGGA --out "$dir/h" > "$dir/h.log" || fail "GGGA training failed"
loss_falls "$dir/h"
"$GDN" train "${args[@]}" "${attn[@]}" --mixers A --rope_theta 500 --out "$dir/s" > "$dir/s.log" \
  || fail "softmax-only training failed"
loss_falls "$dir/s"
"$GDN" inspect "$dir/h/ckpt_00000012.h5" > "$dir/inspect_h.txt" || fail "gdn inspect failed on GGGA"
for want in "mixers=GGGA" "n_kv_heads=2" "attn_head_dim=8" "qk_norm=1" "qkv_bias=1" "rope_theta=10000"; do
  grep -q "$want" "$dir/inspect_h.txt" || { cat "$dir/inspect_h.txt"; fail "gdn inspect does not show $want"; }
done
hh() { grep -q "model\.layers\.$1\.attn\.$2 " "$dir/inspect_h.txt"; }
hh 3 q_norm.weight && hh 3 k_proj.bias && ! hh 3 g_proj.weight && ! hh 3 A_log && ! hh 2 q_norm.weight \
  && hh 2 g_proj.weight || fail "the attention layer's tensors are wrong"
"$GDN" sample --run "$dir/h" --prompt "And" --bytes 30 --seed 2 > "$dir/sample_h.txt" 2> "$dir/sample_h.err" \
  || { cat "$dir/sample_h.err"; fail "gdn sample failed on a GGGA model"; }
[ "$(wc -c < "$dir/sample_h.txt")" -eq $((3 + 30 + 1)) ] || fail "gdn sample wrote the wrong number of bytes (GGGA)"
expect_usage "use --backend cpu" --mixers GGGA --backend cuda
echo "GDML: trained, sampled, inspected; other pattern refused on resume; cuda refused"
echo "GGGA and A: trained (loss falls), sampled, inspected; sp > 1 and cuda refused"
