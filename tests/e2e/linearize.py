#!/usr/bin/env python3
"""gdn linearize end to end: on a tiny softmax-only teacher (grouped-query heads, q/k norm)
trained a few steps on data/kjv.txt.gz it prints a finite table and JSON with every layer and
head; its exact loss is gdn eval's on the same windows; a layer's numbers do not depend on which
other layers are measured; with one layer measured, replacing "all" is replacing that layer. On an
imported Llama whose keys are scaled up 256 times, the raw form diverges and is reported as
"diverged" / null while the balanced form and the baseline stay finite. Bad input is refused
with a message.

    python3 tests/e2e/linearize.py BUILD/gdn
"""
import json
import math
import os
import shutil
import struct
import sys
import tempfile

import numpy as np

from e2e_common import check, finish, gdn_runner
GDN = sys.argv[1]
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KJV = os.path.join(SRC, "data", "kjv.txt.gz")
FIX = os.path.join(SRC, "tests", "interop", "fixtures", "llama_gqa_bf16")
METHODS = ["gdn", "balanced", "vala"]


run = gdn_runner(GDN)


def linearize(*args):
    r = run("linearize", *args, "--json")
    check(r.returncode == 0, f"gdn linearize {' '.join(args)} failed: {r.stderr}")
    return json.loads(r.stdout) if r.returncode == 0 else None


def train(out, *extra):
    r = run("train", "--data", KJV, "--out", out, "--d_model", "32", "--n_heads", "4", "--head_dim", "8",
            "--d_ff", "64", "--seq_len", "64", "--batch_size", "4", "--val_tokens", "20000", "--eval_every", "0",
            "--backend", "cpu", "--warmup_steps", "0", "--lr", "1e-2", *extra)
    check(r.returncode == 0, f"gdn train {' '.join(extra)} failed: {r.stderr[-2000:]}")
    return r.returncode == 0


def finite(x):
    return isinstance(x, float) and math.isfinite(x)


def check_report(e, layers, H, what):
    """Every layer and head present with finite numbers; nothing diverged."""
    check([L["layer"] for L in e["layers"]] == layers, f"{what}: layers {[L['layer'] for L in e['layers']]}")
    check(e["methods"] == METHODS and e["precision"] == "fp64", f"{what}: {e['methods']} {e['precision']}")
    check(finite(e["loss_exact"]) and e["diverged"] == {m: 0 for m in METHODS},
          f"{what}: loss {e['loss_exact']} diverged {e['diverged']}")
    for L in e["layers"]:
        check(len(L["lambda"]) == H and all(finite(x) and x > 0 for x in L["lambda"]), f"{what}: lambda {L}")
        for m in METHODS:
            errs = L["rel_err"][m]
            check(len(errs) == H and all(finite(x) and x >= 0 for x in errs), f"{what}: layer {L['layer']} {m} {errs}")
            check(abs(L["mean_rel_err"][m] - sum(errs) / H) <= 1e-12 * max(1, L["mean_rel_err"][m]),
                  f"{what}: mean of layer {L['layer']} {m}")
            check(finite(L["loss_replaced"][m]), f"{what}: loss with layer {L['layer']} replaced by {m}")
    for m in METHODS:
        check(finite(e["mean_rel_err"][m]) and finite(e["loss_all_replaced"][m]), f"{what}: means {m}")


def scaled_llama(tmp):
    """The llama_gqa_bf16 fixture with every k_proj weight times 256 (exact in bf16: the exponent)."""
    d = os.path.join(tmp, "llama_bigk")
    shutil.copytree(FIX, d)
    p = os.path.join(d, "model.safetensors")
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    hdr, data = json.loads(b[8:8 + n]), bytearray(b[8 + n:])
    for name, v in hdr.items():
        if name.endswith("k_proj.weight"):
            assert v["dtype"] == "BF16", v
            lo, hi = v["data_offsets"]
            x = (np.frombuffer(bytes(data[lo:hi]), dtype="<u2").astype(np.uint32) << 16).view(np.float32) * 256
            data[lo:hi] = (x.view(np.uint32) >> 16).astype("<u2").tobytes()
    open(p, "wb").write(b[:8 + n] + bytes(data))
    out = os.path.join(tmp, "llama_bigk.h5")
    r = run("import", d, "--out", out)
    check(r.returncode == 0, f"gdn import of the scaled fixture failed: {r.stderr}")
    return out if r.returncode == 0 else None


def refused(args, words, code=2):
    r = run("linearize", *args)
    ok = r.returncode == code and all(w in r.stderr for w in words)
    check(ok, f"gdn linearize {' '.join(args)}: exit {r.returncode} (want {code}), stderr {r.stderr!r} "
          f"should name {words}")


def main():
    tmp = tempfile.mkdtemp(prefix="gdn_linearize_")
    try:
        run_dir = os.path.join(tmp, "teacher")
        if not train(run_dir, "--steps", "20", "--n_layers", "3", "--mixers", "AAA", "--n_kv_heads", "2",
                     "--qk_norm", "true"):
            return
        teacher = os.path.join(run_dir, "ckpt_00000020.h5")
        common = ["--teacher", teacher, "--data", KJV, "--val_tokens", "20000", "--windows", "3"]

        e = linearize(*common)
        if e:
            check_report(e, [0, 1, 2], 4, "all layers")
            print("mean relative error:", e["mean_rel_err"], "exact loss", e["loss_exact"])
            check(e["seq_len"] == 64 and e["windows"] == 3 and e["tokens"] == 3 * 64, f"windows: {e}")
            # the exact loss is gdn eval's (fp32) on the same windows
            r = run("eval", "--ckpt", teacher, "--data", KJV, "--val_tokens", "20000", "--max_windows", "3",
                    "--batch_size", "1", "--json")
            check(r.returncode == 0, f"gdn eval failed: {r.stderr}")
            if r.returncode == 0:
                ev = json.loads(r.stdout)["loss"]
                check(abs(ev - e["loss_exact"]) <= 1e-5 * ev, f"exact loss {e['loss_exact']} vs gdn eval {ev}")
            # a subset: the same numbers for its layers; "all" is the one layer when it is alone
            s = linearize(*common, "--layers", "2,0")
            if s:
                check_report(s, [0, 2], 4, "layers 2,0")
                for a, b in ((s["layers"][0], e["layers"][0]), (s["layers"][1], e["layers"][2])):
                    check(a == b, f"layer {a['layer']} measured with other layers differs: {a} vs {b}")
            one = linearize(*common, "--layers", "1")
            if one:
                check(one["loss_all_replaced"] == one["layers"][0]["loss_replaced"], f"one layer: {one}")
            # the text table: a row per (layer, head), a mean per layer, the losses
            r = run("linearize", *common)
            check(r.returncode == 0, f"text run failed: {r.stderr}")
            rows = [l.split() for l in r.stdout.splitlines()]
            heads = [(int(w[0]), int(w[1])) for w in rows if len(w) == 6 and w[0].isdigit() and w[1].isdigit()]
            check(heads == [(l, h) for l in range(3) for h in range(4)], f"text rows: {heads}\n{r.stdout}")
            check(sum(1 for w in rows if len(w) >= 2 and w[1] == "mean") == 4, f"mean rows:\n{r.stdout}")
            check("diverged" not in r.stdout and "exact" in r.stdout, f"text:\n{r.stdout}")
            print(r.stdout)

        # the raw form diverging on keys 256 times too large: reported, never a number
        big = scaled_llama(tmp)
        if big:
            args = ["--teacher", big, "--data", KJV, "--seq_len", "128", "--windows", "2"]
            b = linearize(*args)
            if b:
                print("scaled keys:", b["mean_rel_err"], "diverged", b["diverged"])
                check(b["diverged"]["gdn"] > 0 and b["diverged"]["vala"] == 0, f"diverged: {b['diverged']}")
                check(b["mean_rel_err"]["gdn"] is None, f"mean of a diverged form: {b['mean_rel_err']}")
                for L in b["layers"]:
                    check(all(finite(x) for x in L["rel_err"]["vala"]), f"vala not finite: {L}")
                    for m in METHODS:  # null exactly where a window of that head diverged
                        check(all(x is None or finite(x) for x in L["rel_err"][m]), f"{m}: {L}")
                        check((L["mean_rel_err"][m] is None) == (None in L["rel_err"][m]), f"{m} mean: {L}")
                    check(L["rel_err"]["gdn"].count(None) > 0, f"no null gdn error in layer {L['layer']}")
            r = run("linearize", *args)
            check(r.returncode == 0 and "diverged" in r.stdout, f"text of a diverged form:\n{r.stdout}{r.stderr}")

        # refusals
        hybrid = os.path.join(tmp, "hybrid")
        gonly = os.path.join(tmp, "gonly")
        if train(hybrid, "--steps", "2", "--n_layers", "2", "--mixers", "GA") and \
           train(gonly, "--steps", "2", "--n_layers", "1", "--mixers", "G"):
            hy = os.path.join(hybrid, "ckpt_00000002.h5")
            refused(["--teacher", hy, "--data", KJV, "--layers", "0"], ["layer 0", "not a softmax attention layer"])
            refused(["--teacher", hy, "--data", KJV, "--layers", "5"], ["--layers", "0..1"])
            refused(["--teacher", hy, "--data", KJV, "--layers", "1,1"], ["layer 1", "twice"])
            refused(["--teacher", hy, "--data", KJV, "--layers", "1,"], ["--layers", "commas"])
            refused(["--teacher", os.path.join(gonly, "ckpt_00000002.h5"), "--data", KJV],
                    ["no softmax attention layer"], code=1)
        refused(["--teacher", teacher, "--data", KJV, "--out", teacher], ["--out", "is the teacher"])
        refused(["--teacher", teacher, "--data", KJV, "--keep-softmax", "0"], ["--keep-softmax", "--out"])
        refused(["--data", KJV], ["--teacher", "required"])
        refused(["--teacher", teacher, "--data", KJV, "--windows", "0"], ["--windows"])
        refused(["--teacher", teacher, "--data", os.path.join(tmp, "missing.txt")], ["missing.txt"], code=1)
        refused(["--teacher", os.path.join(tmp, "missing.h5"), "--data", KJV], ["missing.h5"], code=1)
        h = run("linearize", "--help")
        check(h.returncode == 0 and "--out" in h.stdout and "--keep-softmax" in h.stdout, "help")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish("linearize")


if __name__ == "__main__":
    main()
