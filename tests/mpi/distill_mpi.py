#!/usr/bin/env python3
"""gdn distill train under mpiexec follows one rank on the same windows (each step 4 sequences):
  - dp 2: micro-batches of 2 sequences per rank (each rank runs the teacher on its own tokens)
    against one rank with 2 micro-batches of 2: per-step losses, per-layer MSE, KL and validation
    losses agree to a relative 1e-5, and the checkpoints record the stage;
  - sp 2 (pass exchange) and, on 4 ranks, dp 2 x sp 2: every rank holds its half of each
    sequence, the teacher runs its forward on the same halves with its own sequence-parallel
    hooks, stage 1 fits each converted mixer on its segment (the mixer's halo and state from the
    rank before), stage 2's KL and CE are summed over the segments: the same per-step values,
    within a relative 1e-5 (as dp 2; gdn train's sequence-parallel curves, tests/mpi/train_mpi.sh,
    allow 1e-4 over 50 steps; measured here ~4e-8), and the final parameters within 1e-5 of the
    one-rank run's (measured ~3e-8);
  - a hybrid: a teacher with a delta-rule layer (mixers AGA) and a student that keeps softmax
    attention in layer 0 (AGG), every tensor training in stage 2, sp 2 with either exchange:
    the teacher's and the student's attention keys and values and delta-rule states cross the
    ranks; the same comparison.

    python3 tests/mpi/distill_mpi.py BUILD/gdn "MPIEXEC -n"
"""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from e2e_common import check, finish, tensors  # noqa: E402

GDN, MPIEXEC = sys.argv[1], sys.argv[2].split()
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "kjv.txt.gz")


def must(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}: {r.stdout[-800:]} {r.stderr[-1500:]}")
    return r


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def close(a, b, what, tol):
    check(abs(a - b) <= tol * (abs(a) + abs(b) + 1e-12), f"{what}: one rank {a}, several ranks {b}")


def same_run(one, other, label, tol, steps=(4, 4)):
    """Every stage's per-step values of run `other` equal `one`'s within a relative tol."""
    worst = 0.0
    for s in (1, 2):
        a, b = metrics(os.path.join(one, f"stage{s}", "metrics.jsonl")), \
            metrics(os.path.join(other, f"stage{s}", "metrics.jsonl"))
        check(len(a) == len(b) == steps[s - 1], f"{label} stage {s}: {len(a)} and {len(b)} lines")
        for x, y in zip(a, b):
            pairs = [("loss", x["loss"], y["loss"])]
            check(("val_loss" in x) == ("val_loss" in y), f"{label} stage {s} step {x['step']}: val_loss")
            if "val_loss" in x:
                pairs.append(("val_loss", x["val_loss"], y["val_loss"]))
            if s == 1:
                for l, (u, v) in enumerate(zip(x["mse_layer"], y["mse_layer"])):
                    check((u is None) == (v is None), f"{label} step {x['step']} layer {l}: MSE {u} vs {v}")
                    if u is not None:
                        pairs.append((f"layer {l} MSE", u, v))
            else:
                pairs += [("KL", x["kl"], y["kl"]), ("CE", x["ce"], y["ce"])]
            for what, u, v in pairs:
                close(u, v, f"{label} stage {s} step {x['step']} {what}", tol)
                worst = max(worst, abs(u - v) / (abs(u) + 1e-12))
    return worst


def same_params(one, other, label, steps, tol):
    a = tensors(os.path.join(one, "stage2", f"ckpt_{steps:08d}.h5"))
    b = tensors(os.path.join(other, "stage2", f"ckpt_{steps:08d}.h5"))
    check(sorted(a) == sorted(b), f"{label}: tensor names differ")
    worst = max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
    check(worst <= tol, f"{label}: final parameters differ from one rank's by up to {worst:.3g} (> {tol})")
    return worst


with tempfile.TemporaryDirectory() as tmp:
    j = lambda *p: os.path.join(tmp, *p)
    tiny = ["--d_model", "32", "--n_heads", "4", "--n_kv_heads", "2", "--head_dim", "8",
            "--expand_v", "1", "--d_ff", "64", "--lr", "1e-2", "--seq_len", "32", "--batch_size", "8",
            "--val_tokens", "1000", "--eval_batches", "1", "--eval_every", "0", "--data", DATA, "--backend", "cpu",
            "--threads", "1"]
    must([GDN, "train", "--mixers", "A", "--n_layers", "2", *tiny, "--steps", "40", "--out", j("teacher")])
    teacher = j("teacher", "ckpt_00000040.h5")
    must([GDN, "distill", "init", "--teacher", teacher, "--out", j("s.h5")])
    def distill(teacher, student, steps):
        return ["distill", "train", "--teacher", teacher, "--student", student, "--data", DATA, "--stage1_steps",
                str(steps), "--stage2_steps", str(steps), "--seq_len", "32", "--val_tokens", "1000", "--eval_batches",
                "2", "--eval_every", "2", "--lr", "3e-3", "--tau", "2", "--ce_weight", "0.5", "--threads", "1",
                "--batch_size", "2"]

    args = distill(teacher, j("s.h5"), 4)
    must([GDN, *args, "--batch_tokens", "128", "--out", j("one")])

    # data parallel
    r = must([*MPIEXEC, "2", GDN, *args, "--out", j("two")])
    check("dp 2 x sp 1" in r.stdout, f"two data-parallel ranks: {r.stdout[-400:]}")
    same_run(j("one"), j("two"), "dp 2", 1e-5)
    for s in (1, 2):
        with h5py.File(j("two", f"stage{s}", "ckpt_00000004.h5"), "r") as f:
            check(int(f["state"].attrs["distill_stage"]) == s, f"dp 2: stage {s}'s checkpoint records its stage")

    # sequence parallel: halves of each sequence, 2 micro-batches per step; dp 2 x sp 2
    r = must([*MPIEXEC, "2", GDN, *args, "--batch_tokens", "128", "--sp", "2", "--out", j("sp2")])
    check("dp 1 x sp 2" in r.stdout, f"two sequence-parallel ranks: {r.stdout[-400:]}")
    w = same_run(j("one"), j("sp2"), "sp 2", 1e-5)
    p = same_params(j("one"), j("sp2"), "sp 2", 4, 1e-5)
    print(f"sp 2: per-step values within a relative {w:.1e}, parameters within {p:.1e}")
    r = must([*MPIEXEC, "4", GDN, *args, "--sp", "2", "--out", j("dp2sp2")])
    check("dp 2 x sp 2" in r.stdout, f"four ranks: {r.stdout[-400:]}")
    w = same_run(j("one"), j("dp2sp2"), "dp 2 x sp 2", 1e-5)
    p = same_params(j("one"), j("dp2sp2"), "dp 2 x sp 2", 4, 1e-5)
    print(f"dp 2 x sp 2: per-step values within a relative {w:.1e}, parameters within {p:.1e}")

    # a hybrid: teacher AGA (a delta-rule layer), student AGG (softmax attention kept in layer 0)
    must([GDN, "train", "--mixers", "AGA", "--n_layers", "3", *tiny, "--steps", "10", "--out", j("teacher_h")])
    teacher_h = j("teacher_h", "ckpt_00000010.h5")
    must([GDN, "distill", "init", "--teacher", teacher_h, "--out", j("h.h5"), "--keep-softmax", "0"])
    hargs = distill(teacher_h, j("h.h5"), 3) + ["--batch_tokens", "128", "--train", "all"]
    must([GDN, *hargs, "--out", j("h_one")])
    for mode in ("pass", "gather"):
        must([*MPIEXEC, "2", GDN, *hargs, "--sp", "2", "--sp_exchange", mode, "--out", j(f"h_{mode}")])
        w = same_run(j("h_one"), j(f"h_{mode}"), f"hybrid sp 2 ({mode})", 1e-5, steps=(3, 3))
        p = same_params(j("h_one"), j(f"h_{mode}"), f"hybrid sp 2 ({mode})", 3, 1e-5)
        print(f"hybrid AGA -> AGG, sp 2 ({mode}): per-step values within a relative {w:.1e}, parameters within {p:.1e}")

finish("distill_mpi")
