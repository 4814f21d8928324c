#!/usr/bin/env python3
"""gdn linearize --out end to end, on a tiny softmax teacher (grouped-query heads, q/k norm and
q/k/v biases) trained a few steps on data/kjv.txt.gz: the student's layers are the measured ones
whose best one-layer loss is a gated-delta-rule form, made S (linearized) with the measured balance
factors (attn.log_lambda = ln lambda) and every other tensor the teacher's bit for bit; gdn eval
of the student on the same windows gives the printed loss of those layers replaced (fp32 against
fp64); --keep-softmax keeps layers; the student opens in inspect and sample, trains with gdn
train and with both stages of gdn distill train (its balance factors move, the teacher's tensors
outside the converted mixers stay with --train mixers); gdn train runs layer patterns with S
from scratch (with documents too); the CUDA backend, sequence parallelism and
export refuse it with a message naming the linearized layer; bad input is refused.

    python3 tests/e2e/linearize_student.py BUILD/gdn
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from e2e_common import check, finish, gdn_runner, tensors
GDN = sys.argv[1]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KJV = os.path.join(SRC, "data", "kjv.txt.gz")

run = gdn_runner(GDN)


def ok(r, what):
    check(r.returncode == 0, f"{what} failed ({r.returncode}): {r.stdout[-800:]} {r.stderr[-1500:]}")
    return r.returncode == 0


def refused(args, words, code=None):
    r = run(*args)
    good = r.returncode != 0 and (code is None or r.returncode == code) and all(w in r.stderr for w in words)
    check(good, f"gdn {' '.join(args)}: exit {r.returncode}, stderr {r.stderr[-600:]!r} should name {words}")


def main():
    tmp = tempfile.mkdtemp(prefix="gdn_linstudent_")
    try:
        tdir = os.path.join(tmp, "teacher")
        if not ok(run("train", "--data", KJV, "--out", tdir, "--d_model", "32", "--n_heads", "4", "--head_dim", "8",
                      "--n_kv_heads", "2", "--d_ff", "64", "--seq_len", "64", "--batch_size", "4", "--val_tokens",
                      "20000", "--eval_every", "0", "--backend", "cpu", "--warmup_steps", "0", "--lr", "1e-2",
                      "--steps", "60", "--n_layers", "4", "--mixers", "AAAA", "--qk_norm", "true", "--qkv_bias",
                      "true"), "teacher"):
            return
        teacher = os.path.join(tdir, "ckpt_00000060.h5")
        student = os.path.join(tmp, "student.h5")
        common = ["--teacher", teacher, "--data", KJV, "--val_tokens", "20000", "--windows", "3"]
        r = run("linearize", *common, "--out", student, "--json")
        if not ok(r, "linearize --out"):
            return
        e = json.loads(r.stdout)
        st = e["student"]
        print("student:", st)
        chosen = []
        for L in e["layers"]:  # the rule: a layer changes when its best one-layer loss is gdn or balanced
            losses = L["loss_replaced"]
            best = min((m for m in losses if losses[m] is not None), key=lambda m: losses[m])
            if best in ("gdn", "balanced"):
                chosen.append((L["layer"], best, L["lambda"] if best == "balanced" else [1.0] * 4))
        check([(x["layer"], x["from"]) for x in st["layers"]] == [(l, b) for l, b, _ in chosen],
              f"student layers {st['layers']} vs the rule's {chosen}")
        check(len(chosen) > 1, f"fewer than two layers converted on the tiny teacher: {chosen}")
        want = "".join("S" if any(l == c[0] for c in chosen) else "A" for l in range(4))
        check(st["mixers"] in (want, want[0] if len(set(want)) == 1 else want), f"mixers {st['mixers']} vs {want}")
        # the file: the teacher's tensors bit for bit, ln lambda in the S layers
        tt, ts = tensors(teacher), tensors(student)
        check(set(ts) == set(tt) | {f"model.layers.{l}.attn.log_lambda" for l, _, _ in chosen},
              f"tensor names: {sorted(set(ts) ^ set(tt))}")
        for name, v in tt.items():
            check(np.array_equal(ts[name], v), f"{name} differs from the teacher's")
        for l, _, lam in chosen:
            got = ts[f"model.layers.{l}.attn.log_lambda"]
            check(np.allclose(got, np.log(lam).astype(np.float32), rtol=0, atol=1e-7), f"layer {l}: {got} vs {lam}")
        # gdn eval of the student on the same windows is the printed replaced loss
        r = run("eval", "--ckpt", student, "--data", KJV, "--val_tokens", "20000", "--max_windows", "3",
                "--batch_size", "1", "--json")
        if ok(r, "eval of the student"):
            ev = json.loads(r.stdout)["loss"]
            print(f"student loss: linearize {st['loss']:.7f}, gdn eval {ev:.7f}, teacher {e['loss_exact']:.7f}")
            check(abs(ev - st["loss"]) <= 2e-6 * ev, f"gdn eval {ev} vs the replaced loss {st['loss']}")
        # with every converted layer of a one-layer run, the loss is that table's
        one = run("linearize", *common, "--layers", str(chosen[0][0]), "--out", os.path.join(tmp, "one.h5"), "--json")
        if ok(one, "linearize --layers --out"):
            o1 = json.loads(one.stdout)
            check(o1["student"]["loss"] == o1["layers"][0]["loss_replaced"][chosen[0][1]],
                  f"one layer: {o1['student']} vs {o1['layers'][0]['loss_replaced']}")
        # --keep-softmax; the text output says which layers changed
        kept = os.path.join(tmp, "kept.h5")
        r = run("linearize", *common, "--out", kept, "--keep-softmax", str(chosen[0][0]))
        if ok(r, "--keep-softmax") and len(chosen) > 1:
            check(f"layer {chosen[0][0]}: stays A" in r.stdout and f"layer {chosen[1][0]}: A -> S" in r.stdout,
                  f"text output:\n{r.stdout}")
            check(f"model.layers.{chosen[0][0]}.attn.log_lambda" not in tensors(kept), "kept layer has lambda")
        # inspect, sample
        r = run("inspect", student)
        ok(r, "inspect") and check("mixers=" + st["mixers"] in r.stdout and "log_lambda" in r.stdout,
                                   f"inspect:\n{r.stdout[:1500]}")
        r = run("sample", "--ckpt", student, "--prompt", "And God said", "--bytes", "40", "--temperature", "0")
        ok(r, "sample") and check(len(r.stdout) > 40, f"sample: {r.stdout!r}")
        # gdn train and both stages of gdn distill train on the CPU
        S = ["--seq_len", "64", "--batch_size", "4", "--backend", "cpu", "--val_tokens", "20000", "--eval_every", "0",
             "--warmup_steps", "1"]
        ok(run("train", "--data", KJV, "--out", os.path.join(tmp, "tr"), "--steps", "2", "--model_from", student,
               "--init_from", student, *S), "train from the student")
        d = os.path.join(tmp, "distill")
        r = run("distill", "train", "--teacher", teacher, "--student", student, "--out", d, "--data", KJV,
                "--stage1_steps", "10", "--stage2_steps", "3", "--stage1_lr", "1e-3", *S)
        if ok(r, "distill train"):
            m1 = [json.loads(x) for x in open(os.path.join(d, "stage1", "metrics.jsonl")) if '"step"' in x]
            m2 = [json.loads(x) for x in open(os.path.join(d, "stage2", "metrics.jsonl")) if '"step"' in x]
            check(len(m1) == 10 and len(m2) == 3 and all(math.isfinite(x["loss"]) for x in m1 + m2), "metrics")
            last = sum(x["loss"] for x in m1[-3:]) / 3  # one batch per step: the mean of the last three
            check(last < m1[0]["loss"], f"stage 1 MSE {m1[0]['loss']} -> {[x['loss'] for x in m1]}")
            final = tensors(os.path.join(d, "stage2", "ckpt_00000003.h5"))
            l0 = chosen[0][0]
            name = f"model.layers.{l0}.attn.log_lambda"
            check(not np.array_equal(final[name], ts[name]), "the balance factors did not train")
            for n2, v in ts.items():  # --train mixers: only the converted layers' attn.* move
                if not any(n2.startswith(f"model.layers.{l}.attn.") for l, _, _ in chosen):
                    check(np.array_equal(final[n2], v), f"{n2} moved with --train mixers")
        # layer patterns with S from scratch (lambda starts at 1: the form as derived), with documents too
        for pat, extra in (("GGSA", []), ("SSSS", ["--documents", "true", "--eod_token", "10"])):
            rd = os.path.join(tmp, "scratch_" + pat)
            r = run("train", "--data", KJV, "--out", rd, "--steps", "3", "--d_model", "32", "--n_heads", "4",
                    "--head_dim", "8", "--n_kv_heads", "2", "--d_ff", "64", "--n_layers", "4", "--mixers", pat,
                    "--lr", "3e-3", *S, *extra)
            if ok(r, f"train --mixers {pat} {extra}"):
                m = [json.loads(x) for x in open(os.path.join(rd, "metrics.jsonl")) if '"step"' in x]
                check(len(m) == 3 and all(math.isfinite(x["loss"]) for x in m), f"{pat}: {m}")
                b = subprocess.run([GDN, "sample", "--run", rd, "--bytes", "20"], capture_output=True)  # any bytes
                check(b.returncode == 0 and len(b.stdout) >= 20, f"sample of {pat}: {b.stderr[-500:]!r}")
        # what refuses the linearized kind
        refused(["train", "--data", KJV, "--out", os.path.join(tmp, "cu"), "--steps", "1", "--mixers", "GS",
                 "--backend", "cuda"], ["layer 1 is S (linearized)", "CUDA", "--backend cpu"])
        refused(["train", "--data", KJV, "--out", os.path.join(tmp, "sp"), "--steps", "1", "--model_from", student,
                 "--init_from", student, "--backend", "cpu", "--sp", "2"], ["sp = 2", "linearized layers"])
        refused(["export", student, "--out", os.path.join(tmp, "hf")], ["'S' (linearized)"], code=1)
        refused(["linearize", *common, "--out", teacher], ["--out", "is the teacher"], code=2)
        refused(["linearize", *common, "--keep-softmax", "0"], ["--keep-softmax", "--out"], code=2)
        refused(["linearize", *common, "--out", os.path.join(tmp, "x.h5"), "--keep-softmax", "7"],
                ["--keep-softmax", "out of range"], code=2)
        refused(["linearize", *common, "--out", os.path.join(tmp, "x.h5"), "--keep-softmax", "0,1,2,3"],
                ["nothing written"], code=1)
        check(not os.path.exists(os.path.join(tmp, "x.h5")), "a refused --out was written")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish("linearize_student")


if __name__ == "__main__":
    main()
