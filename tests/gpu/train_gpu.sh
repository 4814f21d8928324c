#!/usr/bin/env bash
# The trainer and the op command on the GPU (run by tests/gpu/run.sh on the GPU machine):
#  - 200 steps of the tiny preset with --backend cuda (bf16) track the CPU run (final val_loss within 3%);
#  - the same seed gives bitwise-identical losses twice; 10 + resume 10 == 20 straight, bitwise;
#  - gdn op gated-delta --backend cuda (bf16, fp32) against --backend cpu --precision fp64;
#  - a GDML model (one layer of each mixer) trains on --backend cuda in bf16 and with
#    --precision fp32: the loss falls by more than 1 nat in 200 steps, the two final val_losses
#    agree within 3%, and the fp32 run's settings say fp32;
#  - a hybrid with softmax attention (GGGA: grouped-query heads 2:1, attention head dim 64, q/k
#    norm, q/k/v biases) trains on --backend cuda (bf16) tracking the CPU run (final val_loss
#    within 3%, the loss falling by more than 1 nat); 10 + resume 10 == 20 straight, bitwise; a
#    checkpoint written by the cuda backend resumes on the cpu backend (checkpoints are
#    interchangeable), its next losses within 3% of the cuda run's;
#  - distillation with --backend cuda: a softmax teacher (AAAA, head dim 64: the CUDA attention
#    kernels take 64 or 128) trained 150 steps on the GPU, its
#    GDN student (gdn distill init), both stages (stage 1 teacher-forced MSE, stage 2 KL): each
#    stage's first loss within 3% of the CPU's on the same start, the MSE and the KL falling, and
#    a run resumed from stage 2's step-10 checkpoint ending with the parameters of the straight
#    run, bitwise;
#  - packed documents (gdn data --doc_sep, gdn train --documents, several documents of every
#    length per window) in a model with every mixer kind (GDMA): --backend cuda tracks the CPU run
#    (final val_loss within 3%, the loss falling by more than 1 nat); 10 + resume 10 == 20
#    straight, bitwise.
# Usage: [ONLY=distill|docs] train_gpu.sh GDN OUT_DIR (ONLY=...: those checks alone).
# Prints "result:" lines for the summary table.
set -uo pipefail
GDN=$1
out=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
PY=python3
common=(--preset tiny --data "$SRC/data/kjv.txt.gz" --seed 5 --eval_every 100 --eval_batches 8 --log_every 50)

distill_checks() {
  tch=(--data "$SRC/data/kjv.txt.gz" --seq_len 128 --batch_size 8 --d_model 128 --n_layers 4 --n_heads 2 --n_kv_heads 1
       --head_dim 64 --d_ff 256 --mixers AAAA --lr 3e-3 --warmup_steps 20 --eval_every 0 --val_tokens 100000)
  "$GDN" train "${tch[@]}" --steps 150 --backend cuda --out "$dir/teacher" > "$out/distill_teacher.log" 2>&1 &&
    "$GDN" distill init --teacher "$dir/teacher/ckpt_00000150.h5" --out "$dir/student.h5" --decay teacher \
      --data "$SRC/data/kjv.txt.gz" --seq_len 128 > "$out/distill_init.log" 2>&1 || status=1
  dst() { # BACKEND OUT
    "$GDN" distill train --teacher "$dir/teacher/ckpt_00000150.h5" --student "$dir/student.h5" --out "$2" \
      --data "$SRC/data/kjv.txt.gz" --seq_len 128 --batch_size 8 --val_tokens 100000 --eval_every 0 \
      --stage1_steps 20 --stage2_steps 20 --stage1_lr 3e-3 --stage2_lr 3e-3 --warmup_steps 5 --ckpt_every 10 \
      --backend "$1" >> "$out/distill_$1.log" 2>&1
  }
  # resumed: stage 1 complete and stage 2's step-10 checkpoint of the first run, then the same command
  dst cuda "$dir/dg" && dst cpu "$dir/dc" && mkdir -p "$dir/dr/stage2" && cp -r "$dir/dg/stage1" "$dir/dr/" &&
    cp "$dir/dg/stage2/ckpt_00000010.h5" "$dir/dr/stage2/" && dst cuda "$dir/dr" || status=1
  $PY - "$dir/dg" "$dir/dc" "$dir/dr" <<'PY' || status=1
import json, sys, h5py, numpy as np
def m(d, s):
    return [json.loads(l) for l in open(f"{d}/stage{s}/metrics.jsonl") if '"loss"' in l]
def params(d):
    with h5py.File(f"{d}/stage2/ckpt_00000020.h5", "r") as f:
        return {k: f["params"][k][()] for k in f["params"].keys()}
g1, g2, c1, c2 = m(sys.argv[1], 1), m(sys.argv[1], 2), m(sys.argv[2], 1), m(sys.argv[2], 2)
e1 = abs(g1[0]["loss"] - c1[0]["loss"]) / c1[0]["loss"]
e2 = abs(g2[0]["kl"] - c2[0]["kl"]) / c2[0]["kl"]
a, b = params(sys.argv[1]), params(sys.argv[3])
resumed = all(np.array_equal(a[k], b[k]) for k in a)
print(f"result: distill --backend cuda: stage 1 MSE {g1[0]['loss']:.4f} -> {g1[-1]['loss']:.4f} (cpu first {c1[0]['loss']:.4f}, "
      f"rel {e1:.2%}); stage 2 KL {g2[0]['kl']:.4f} -> {g2[-1]['kl']:.4f} (cpu first {c2[0]['kl']:.4f}, rel {e2:.2%}); "
      f"10+resume 10 == 20 straight: {resumed}")
assert len(g1) == 20 and len(g2) == 20
assert e1 < 0.03 and e2 < 0.03 and g1[-1]["loss"] < g1[0]["loss"] and g2[-1]["kl"] < g2[0]["kl"] and resumed
PY
}
docs_checks() {
  $PY - "$dir/docs.txt" <<'PY'
import random, sys
random.seed(7)
words = "the of and to in a is that for it as was with be by on not he this are or his".split()
docs = []
for i in range(3000):
    n = random.choice([1, 2, 5, 9, 17, 40, 63, 64, 65, 100, 200, 300])
    s = ""
    while len(s) < n: s += random.choice(words) + " "
    docs.append(s[:n - 1] + "\n")
open(sys.argv[1], "w").write("---\n".join(docs))
PY
  "$GDN" data --in "$dir/docs.txt" --out "$dir/docs" --doc_sep --- --val-tokens 0 > "$out/docs_data.log" 2>&1 || status=1
  drun=(--data "$dir/docs_train_*.bin" --vocab_size 257 --documents --eod_token 256 --seq_len 256 --batch_size 8
        --d_model 128 --n_layers 4 --mixers GDMA --n_heads 2 --head_dim 64 --n_kv_heads 1 --attn_head_dim 64
        --d_ff 256 --val_tokens 20000 --eval_every 0 --eval_batches 8 --lr 3e-3 --warmup_steps 10 --seed 4)
  for be in cuda cpu; do
    "$GDN" train "${drun[@]}" --steps 150 --backend $be --out "$dir/docs_$be" > "$out/train_docs_$be.log" 2>&1 || status=1
  done
  "$GDN" train "${drun[@]}" --decay_steps 20 --steps 20 --backend cuda --out "$dir/docs_a" > /dev/null 2>&1 &&
    "$GDN" train "${drun[@]}" --decay_steps 20 --steps 10 --backend cuda --out "$dir/docs_b" > /dev/null 2>&1 &&
    "$GDN" train "${drun[@]}" --decay_steps 20 --steps 20 --resume auto --backend cuda --out "$dir/docs_b" \
      > /dev/null 2>&1 || status=1
  $PY - "$dir" <<'PY' || status=1
import json, sys
d = sys.argv[1]
def m(r): return [json.loads(l) for l in open(f"{d}/{r}/metrics.jsonl")]
g, c = m("docs_cuda"), m("docs_cpu")
loss = [x["loss"] for x in g if "loss" in x]
first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
vg, vc = g[-1]["val_loss"], c[-1]["val_loss"]
rel = abs(vg - vc) / vc
a, b = ([x["loss"] for x in m(r) if "loss" in x] for r in ("docs_a", "docs_b"))
print(f"result: documents GDMA 150 steps: gpu loss {first:.3f} -> {last:.3f}, val_loss gpu {vg:.4f} cpu {vc:.4f} "
      f"(rel {rel:.2%}); gpu 10+resume 10 == 20 straight: {a == b}")
assert len(loss) == 150 and last < first - 1.0, "documents on the GPU: the loss did not fall"
assert rel < 0.03, "documents: the GPU loss does not track the CPU loss"
assert len(a) == 20 and a == b, "documents on the GPU: resume is not bitwise"
PY
}
if [ "${ONLY:-}" = docs ]; then
  docs_checks
  exit $status
fi
if [ "${ONLY:-}" = distill ]; then # the distillation checks alone (kernel iteration)
  distill_checks
  exit $status
fi

"$GDN" train "${common[@]}" --steps 200 --backend cuda --out "$dir/gpu" > "$out/train_gpu.log" 2>&1 || status=1
"$GDN" train "${common[@]}" --steps 200 --backend cpu --out "$dir/cpu" > "$out/train_cpu.log" 2>&1 || status=1
cp "$dir/gpu/metrics.jsonl" "$out/metrics_gpu.jsonl" 2>/dev/null; cp "$dir/cpu/metrics.jsonl" "$out/metrics_cpu.jsonl" 2>/dev/null
$PY - "$dir/gpu/metrics.jsonl" "$dir/cpu/metrics.jsonl" <<'PY' || status=1
import json, sys
g = [json.loads(l) for l in open(sys.argv[1])]
c = [json.loads(l) for l in open(sys.argv[2])]
vg, vc = g[-1]["val_loss"], c[-1]["val_loss"]
tg = sorted(r["tokens_per_s"] for r in g[10:])[len(g[10:]) // 2]
tc = sorted(r["tokens_per_s"] for r in c[10:])[len(c[10:]) // 2]
rel = abs(vg - vc) / vc
print(f"result: tiny 200 steps val_loss gpu {vg:.4f} cpu {vc:.4f} (rel {rel:.2%}); tokens/s gpu {tg:.0f} cpu {tc:.0f}")
assert rel < 0.03, "GPU loss does not track the CPU loss"
PY

run20() { "$GDN" train "${common[@]}" --backend cuda --decay_steps 20 "$@" > /dev/null 2>&1; }
run20 --steps 20 --out "$dir/a" && run20 --steps 20 --out "$dir/b" && run20 --steps 10 --out "$dir/c" &&
  run20 --steps 20 --resume auto --out "$dir/c" || status=1
$PY - "$dir/a" "$dir/b" "$dir/c" <<'PY' || status=1
import json, sys
L = [[json.loads(l)["loss"] for l in open(d + "/metrics.jsonl")] for d in sys.argv[1:]]
assert len(L[0]) == 20
same, resumed = L[0] == L[1], L[0] == L[2]
print(f"result: gpu determinism: same seed identical={same}, 10+resume 10 == 20 straight: {resumed}")
assert same and resumed
PY

$PY - "$GDN" "$dir" <<'PY' || status=1
import subprocess, sys, h5py, numpy as np
gdn, d = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(1)
B, T, H, K, V = 2, 333, 4, 128, 128
k = rng.standard_normal((B, T, H, K)); k /= np.linalg.norm(k, axis=-1, keepdims=True)
q = rng.standard_normal((B, T, H, K)); q /= np.linalg.norm(q, axis=-1, keepdims=True)
with h5py.File(d + "/in.h5", "w") as f:
    f["q"], f["k"], f["v"] = q, k, rng.standard_normal((B, T, H, V))
    f["g"], f["beta"] = -rng.uniform(0.01, 0.5, (B, T, H)), rng.uniform(0.1, 0.9, (B, T, H))
    f["h0"], f["do"] = rng.standard_normal((B, H, K, V)), rng.standard_normal((B, T, H, V))
    f["dht"] = rng.standard_normal((B, H, K, V))
def op(name, *args):
    subprocess.run([gdn, "op", "gated-delta", "--in", d + "/in.h5", "--out", d + f"/{name}.h5", *args], check=True,
                   capture_output=True)
    with h5py.File(d + f"/{name}.h5", "r") as f:
        return {n: f[n][()].astype(np.float64) for n in f}
ref = op("cpu", "--backend", "cpu", "--precision", "fp64")
for prec, tol in (("fp32", 1e-4), ("bf16", 1e-2)):
    got = op(prec, "--backend", "cuda", "--precision", prec)
    errs = {n: np.linalg.norm(got[n] - ref[n]) / np.linalg.norm(ref[n]) for n in ref}
    worst = max(errs, key=errs.get)
    print(f"result: gdn op gated-delta cuda {prec} B{B} T{T} H{H} K{K} V{V} vs cpu fp64: worst {worst} {errs[worst]:.2e}")
    assert errs[worst] < tol
PY
for prec in bf16 fp32; do
  "$GDN" train "${common[@]}" --steps 200 --backend cuda --mixers GDML --precision $prec --out "$dir/mix_$prec" \
    > "$out/train_gdml_$prec.log" 2>&1 || status=1
done
grep -q "precision  *fp32" "$out/train_gdml_fp32.log" || { echo "result: FAIL the fp32 run does not say precision fp32"; status=1; }
$PY - "$dir/mix_bf16/metrics.jsonl" "$dir/mix_fp32/metrics.jsonl" <<'PY' || status=1
import json, sys
runs = [[json.loads(l) for l in open(p)] for p in sys.argv[1:]]
for name, r in zip(("bf16", "fp32"), runs):
    loss = [x["loss"] for x in r if "loss" in x]
    first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
    print(f"result: gpu GDML {name} 200 steps: loss {first:.3f} -> {last:.3f}, val_loss {r[-1]['val_loss']:.4f}")
    assert len(loss) == 200 and last < first - 1.0, f"GDML {name}: the loss did not fall"
vb, vf = runs[0][-1]["val_loss"], runs[1][-1]["val_loss"]
assert abs(vb - vf) / vf < 0.03, f"GDML: bf16 val_loss {vb} and fp32 {vf} differ by more than 3%"
PY

hyb=(--mixers GGGA --n_kv_heads 1 --attn_head_dim 64 --qk_norm true --qkv_bias true)
"$GDN" train "${common[@]}" "${hyb[@]}" --steps 200 --backend cuda --out "$dir/hyb_gpu" > "$out/train_hybrid_gpu.log" 2>&1 \
  || status=1
"$GDN" train "${common[@]}" "${hyb[@]}" --steps 200 --backend cpu --out "$dir/hyb_cpu" > "$out/train_hybrid_cpu.log" 2>&1 \
  || status=1
$PY - "$dir/hyb_gpu/metrics.jsonl" "$dir/hyb_cpu/metrics.jsonl" <<'PY' || status=1
import json, sys
g, c = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
loss = [x["loss"] for x in g if "loss" in x]
first, last = sum(loss[:5]) / 5, sum(loss[-5:]) / 5
vg, vc = g[-1]["val_loss"], c[-1]["val_loss"]
rel = abs(vg - vc) / vc
print(f"result: GGGA (attention) 200 steps: gpu loss {first:.3f} -> {last:.3f}, val_loss gpu {vg:.4f} cpu {vc:.4f} (rel {rel:.2%})")
assert len(loss) == 200 and last < first - 1.0, "GGGA on the GPU: the loss did not fall"
assert rel < 0.03, "GGGA: the GPU loss does not track the CPU loss"
PY
run20 "${hyb[@]}" --steps 20 --out "$dir/ha" && run20 "${hyb[@]}" --steps 10 --out "$dir/hc" &&
  cp -r "$dir/hc" "$dir/hx" && run20 "${hyb[@]}" --steps 20 --resume auto --out "$dir/hc" || status=1
"$GDN" train "${common[@]}" "${hyb[@]}" --backend cpu --decay_steps 20 --steps 20 --resume auto --out "$dir/hx" \
  > "$out/train_hybrid_resume_cpu.log" 2>&1 || status=1
$PY - "$dir/ha" "$dir/hc" "$dir/hx" <<'PY' || status=1
import json, sys
L = [[json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l] for d in sys.argv[1:]]
assert len(L[0]) == 20 and len(L[2]) == 20, [len(x) for x in L]
resumed = L[0] == L[1]
worst = max(abs(a - b) / b for a, b in zip(L[2][10:], L[0][10:]))
print(f"result: GGGA gpu 10+resume 10 == 20 straight: {resumed}; cuda checkpoint resumed on cpu: steps 11-20 "
      f"within {worst:.2%} of the cuda run")
assert resumed and worst < 0.03
PY

distill_checks
docs_checks
exit $status
