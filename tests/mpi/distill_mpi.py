#!/usr/bin/env python3
"""gdn distill train data-parallel under mpiexec: 2 ranks with micro-batches of 2 sequences (each
rank runs the teacher on its own tokens) follow one rank with 2 micro-batches of 2 per step (the
same windows): the per-step losses, per-layer MSE, KL and validation losses agree to rounding, and
the checkpoints record the stage.

    python3 tests/mpi/distill_mpi.py BUILD/gdn "MPIEXEC -n"
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from e2e_common import check, finish  # noqa: E402

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


def close(a, b, what, tol=1e-5):
    check(abs(a - b) <= tol * (abs(a) + abs(b) + 1e-12), f"{what}: one rank {a}, two ranks {b}")


with tempfile.TemporaryDirectory() as tmp:
    j = lambda *p: os.path.join(tmp, *p)
    must([GDN, "train", "--mixers", "A", "--n_layers", "2", "--d_model", "32", "--n_heads", "4", "--n_kv_heads", "2",
          "--head_dim", "8", "--expand_v", "1", "--d_ff", "64", "--steps", "40", "--lr", "1e-2", "--seq_len", "32",
          "--batch_size", "8", "--val_tokens", "1000", "--eval_batches", "1", "--eval_every", "0", "--data", DATA,
          "--backend", "cpu", "--out", j("teacher")])
    teacher = j("teacher", "ckpt_00000040.h5")
    must([GDN, "distill", "init", "--teacher", teacher, "--out", j("s.h5")])
    args = ["distill", "train", "--teacher", teacher, "--student", j("s.h5"), "--data", DATA, "--stage1_steps", "4",
            "--stage2_steps", "4", "--seq_len", "32", "--val_tokens", "1000", "--eval_batches", "2", "--eval_every",
            "2", "--lr", "3e-3", "--tau", "2", "--ce_weight", "0.5", "--threads", "1", "--batch_size", "2"]
    must([GDN, *args, "--batch_tokens", "128", "--out", j("one")])
    r = must([*MPIEXEC, "2", GDN, *args, "--out", j("two")])
    check("dp 2 x sp 1" in r.stdout, f"two data-parallel ranks: {r.stdout[-400:]}")
    for s in (1, 2):
        a, b = metrics(j("one", f"stage{s}", "metrics.jsonl")), metrics(j("two", f"stage{s}", "metrics.jsonl"))
        check(len(a) == len(b) == 4, f"stage {s}: {len(a)} and {len(b)} lines")
        for x, y in zip(a, b):
            close(x["loss"], y["loss"], f"stage {s} step {x['step']} loss")
            if "val_loss" in x:
                close(x["val_loss"], y["val_loss"], f"stage {s} step {x['step']} val_loss")
            if s == 1:
                for l, (u, v) in enumerate(zip(x["mse_layer"], y["mse_layer"])):
                    close(u, v, f"step {x['step']} layer {l} MSE")
            else:
                close(x["kl"], y["kl"], f"step {x['step']} KL")

finish("distill_mpi")
