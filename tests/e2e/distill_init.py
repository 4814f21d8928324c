#!/usr/bin/env python3
"""gdn distill init on two tiny teachers (an all-softmax model trained here on the bundled corpus,
and the imported grouped-query Llama fixture): copied tensors are bit-equal (h5py), kept layers
bit-equal, k/v heads repeated, the gate zero and the convolutions the identity; with the zero
gate the student's logits equal those of the teacher with the converted layers' o_proj zeroed
(each layer then contributes only its MLP) to 1e-6, and with the default gate they do not;
--decay teacher sets dt_bias = -ln d from the teacher's mean attention distance d, checked
against a numpy recomputation of layer 0 and a one-token window (d = 0, clamped); the student
works with inspect, sample, export and train --model_from/--init_from; bad options and teachers are
refused with messages.

    python3 tests/e2e/distill_init.py BUILD/gdn
"""
import gzip
import os
import subprocess
import sys
import tempfile
import zlib

import h5py
import numpy as np

from e2e_common import check, finish, gdn_must, gdn_runner, tensors
GDN = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..")
DATA = os.path.join(SRC, "data", "kjv.txt.gz")
FIX = os.path.join(SRC, "tests", "interop", "fixtures", "llama_gqa_bf16")


run = gdn_runner(GDN)


must = gdn_must(run)


def model_attrs(path):
    with h5py.File(path, "r") as f:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["model_config"].attrs.items()}


def logits(ckpt, ids, tmp):
    inp, out = os.path.join(tmp, "ids.h5"), os.path.join(tmp, "logits.h5")
    with h5py.File(inp, "w") as f:
        f["ids"] = ids
    if os.path.exists(out):
        os.remove(out)
    must("op", "logits", "--ckpt", ckpt, "--in", inp, "--out", out)
    with h5py.File(out, "r") as f:
        return f["logits"][()]


def zero_o_proj(src, dst, layers):
    """A copy of checkpoint src with o_proj of the given layers zero (crc32 rewritten): the
    teacher whose mixers in those layers contribute nothing."""
    with open(src, "rb") as a, open(dst, "wb") as b:
        b.write(a.read())
    with h5py.File(dst, "r+") as f:
        for l in layers:
            ds = f["params"][f"model.layers.{l}.attn.o_proj.weight"]
            z = np.zeros(ds.shape, dtype="<f4")
            ds[...] = z
            ds.attrs.modify("crc32", np.uint32(zlib.crc32(z.tobytes())))


def mean_distance_layer0(t, cfg, windows):
    """Layer 0's mean attention distance per head, recomputed from the teacher's tensors."""
    H, Hkv = int(cfg["n_heads"]), int(cfg["n_kv_heads"]) or int(cfg["n_heads"])
    Da = int(cfg["attn_head_dim"]) or int(cfg["head_dim"])
    theta = float(cfg["rope_theta"]) or 10000.0
    eps = float(cfg["norm_eps"])
    acc = np.zeros(H)
    for ids in windows:
        T = len(ids)
        x = t["model.embeddings.weight"][ids].astype(np.float64)
        h = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * t["model.layers.0.attn_norm.weight"]
        q = (h @ t["model.layers.0.attn.q_proj.weight"].T).reshape(T, H, Da)
        k = (h @ t["model.layers.0.attn.k_proj.weight"].T).reshape(T, Hkv, Da)
        half = Da // 2
        ang = np.arange(T)[:, None] * theta ** (-2.0 * np.arange(half) / Da)[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        rot = lambda v: np.concatenate([v[..., :half] * c - v[..., half:] * s,
                                        v[..., half:] * c + v[..., :half] * s], -1)
        q, k = rot(q), rot(k)
        k = np.repeat(k, H // Hkv, axis=1)
        sc = np.einsum("thd,shd->hts", q, k) / np.sqrt(Da)
        sc = np.where(np.tril(np.ones((T, T), bool))[None], sc, -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        dist = np.arange(T)[:, None] - np.arange(T)[None, :]
        acc += (p * dist[None]).sum(-1).mean(-1)
    return acc / len(windows)


def check_student(name, teacher, student, kept, tmp, gqa):
    tt, st = tensors(teacher), tensors(student)
    tc, sc = model_attrs(teacher), model_attrs(student)
    nL, H = int(tc["n_layers"]), int(tc["n_heads"])
    Hkv = int(tc["n_kv_heads"]) or H
    Da = int(tc["attn_head_dim"]) or int(tc["head_dim"])
    check(int(sc["head_dim"]) == Da and int(sc["expand_v"]) == 1, f"{name}: student head shape {sc}")
    want_mixers = "".join("A" if l in kept else "G" for l in range(nL))
    got = sc["mixers"]
    check(all(got[l % len(got)] == want_mixers[l] for l in range(nL)), f"{name}: mixers {got} want {want_mixers}")
    for k in ("model.embeddings.weight", "model.norm.weight"):
        check(np.array_equal(tt[k], st[k]), f"{name}: {k} not copied bit for bit")
    if "lm_head.weight" in tt:
        check(np.array_equal(tt["lm_head.weight"], st["lm_head.weight"]), f"{name}: lm_head not copied")
    for l in range(nL):
        p = f"model.layers.{l}."
        if l in kept:
            lt = sorted(k for k in tt if k.startswith(p))
            check(lt == sorted(k for k in st if k.startswith(p)), f"{name}: kept layer {l} tensors differ")
            for k in lt:
                check(np.array_equal(tt[k], st[k]), f"{name}: kept layer {l}: {k} differs")
            continue
        for s in ("attn_norm.weight", "mlp_norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                  "mlp.down_proj.weight", "attn.q_proj.weight", "attn.o_proj.weight"):
            check(np.array_equal(tt[p + s], st[p + s]), f"{name}: layer {l} {s} not copied bit for bit")
        for s in ("attn.k_proj.weight", "attn.v_proj.weight"):
            want = np.repeat(tt[p + s].reshape(Hkv, Da, -1), H // Hkv, axis=0).reshape(H * Da, -1)
            check(np.array_equal(want, st[p + s]), f"{name}: layer {l} {s}: kv heads not repeated")
        check(not np.any(st[p + "attn.g_proj.weight"]), f"{name}: layer {l} g_proj not zero")
        for s in ("q", "k", "v"):
            w = st[p + f"attn.{s}_conv1d.weight"]
            ident = np.zeros_like(w)
            ident[..., -1] = 1
            check(np.array_equal(w, ident), f"{name}: layer {l} {s}_conv1d is not the identity")
    if gqa:
        check(Hkv < H, f"{name}: the fixture should be grouped-query")
    # the no-op property: teacher with the converted layers' o_proj zeroed
    ref = os.path.join(tmp, name + "_ref.h5")
    zero_o_proj(teacher, ref, [l for l in range(nL) if l not in kept])
    rng = np.random.default_rng(3)
    ids = rng.integers(0, int(tc["vocab_size"]), (2, 40)).astype(np.int32)
    a, b = logits(student, ids, tmp), logits(ref, ids, tmp)
    diff = float(np.abs(a - b).max())
    print(f"{name}: max |student - teacher without the converted mixers| = {diff:.3g}")
    check(diff <= 1e-6, f"{name}: zero-gate student differs from the reference by {diff}")
    return ids, ref


def refused(args, words, what):
    r = run("distill", "init", *args)
    check(r.returncode != 0, f"{what}: accepted")
    check(all(w in r.stderr for w in words), f"{what}: message lacks {words}: {r.stderr.strip()}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        j = lambda n: os.path.join(tmp, n)
        # teacher 1: an all-softmax GQA model trained a little on the bundled corpus
        must("train", "--mixers", "A", "--n_layers", "4", "--d_model", "32", "--n_heads", "4",
             "--n_kv_heads", "2", "--head_dim", "8", "--d_ff", "64", "--steps", "30", "--lr", "3e-3",
             "--warmup_steps", "2", "--seq_len", "32", "--batch_size", "4", "--val_tokens", "1000",
             "--eval_batches", "1", "--data", DATA, "--backend", "cpu", "--out", j("run"))
        t1 = j("run/ckpt_00000030.h5")
        # teacher 2: the imported grouped-query Llama fixture
        t2 = j("llama.h5")
        must("import", FIX, "--out", t2)

        must("distill", "init", "--teacher", t1, "--out", j("s1.h5"), "--keep-softmax", "2")
        ids, ref1 = check_student("trained", t1, j("s1.h5"), {2}, tmp, True)
        must("distill", "init", "--teacher", t2, "--out", j("s2.h5"))
        check_student("llama", t2, j("s2.h5"), set(), tmp, True)
        # the same through a pattern
        must("distill", "init", "--teacher", t1, "--out", j("s1p.h5"), "--mixers", "GGAG")
        check(all(np.array_equal(v, tensors(j("s1p.h5"))[k]) for k, v in tensors(j("s1.h5")).items()),
              "--mixers GGAG and --keep-softmax 2 give different students")

        # a hybrid teacher whose delta-rule layers have the attention head shape (the student above):
        # its G layers are copied whole, its last A layer converted
        must("distill", "init", "--teacher", j("s1.h5"), "--out", j("s1g.h5"))
        a, b = tensors(j("s1.h5")), tensors(j("s1g.h5"))
        for k, v in b.items():
            if not k.startswith("model.layers.2."):
                check(np.array_equal(a[k], v), f"hybrid teacher: {k} not copied bit for bit")
        check(model_attrs(j("s1g.h5"))["mixers"] == "G", "hybrid teacher: the student is not all G")
        # the default gate is not a no-op (so the check above depends on the zero gate)
        must("distill", "init", "--teacher", t1, "--out", j("s1d.h5"), "--keep-softmax", "2", "--gate", "default")
        diff = float(np.abs(logits(j("s1d.h5"), ids, tmp) - logits(ref1, ids, tmp)).max())
        check(diff > 1e-4, f"--gate default: the student still equals the reference ({diff})")
        # --gate value: g_proj = 0.01 v_proj (the repeated heads) in every converted layer, the rest as
        # with the zero gate; a small gate, so the student moves off the reference, but not far
        must("distill", "init", "--teacher", t1, "--out", j("s1v.h5"), "--keep-softmax", "2", "--gate", "value")
        z, v = tensors(j("s1.h5")), tensors(j("s1v.h5"))
        for l in (0, 1, 3):
            p = f"model.layers.{l}.attn."
            check(np.array_equal(v[p + "g_proj.weight"], np.float32(0.01) * v[p + "v_proj.weight"]),
                  f"--gate value: layer {l} g_proj is not 0.01 v_proj")
        check(all(np.array_equal(z[k], x) for k, x in v.items() if not k.endswith("g_proj.weight")),
              "--gate value changed a tensor other than g_proj")
        diff = float(np.abs(logits(j("s1v.h5"), ids, tmp) - logits(ref1, ids, tmp)).max())
        check(1e-6 < diff < 0.5, f"--gate value: logits {diff} from the reference (want small but not zero)")
        # --conv default: the fresh convolutions (U(-1/sqrt(W), 1/sqrt(W))), still a no-op with the zero gate
        must("distill", "init", "--teacher", t1, "--out", j("s1c.h5"), "--keep-softmax", "2", "--conv", "default")
        w = tensors(j("s1c.h5"))["model.layers.0.attn.q_conv1d.weight"]
        check(np.all(np.abs(w) <= 0.5) and np.ptp(w[..., 0]) > 0, f"--conv default: {w[:2]}")
        diff = float(np.abs(logits(j("s1c.h5"), ids, tmp) - logits(ref1, ids, tmp)).max())
        check(diff <= 1e-6, f"--conv default with the zero gate: not a no-op ({diff})")

        # --decay teacher: dt_bias = -ln d, A_log = 0, a_proj = 0
        r = must("distill", "init", "--teacher", t1, "--out", j("s1t.h5"), "--decay", "teacher",
                 "--data", DATA, "--windows", "3", "--seq_len", "48")
        st, tc = tensors(j("s1t.h5")), model_attrs(t1)
        raw = gzip.open(DATA).read()
        windows = [np.frombuffer(raw[w * 48:(w + 1) * 48], dtype=np.uint8).astype(np.int64) for w in range(3)]
        d0 = mean_distance_layer0(tensors(t1), tc, windows)
        dt0 = st["model.layers.0.attn.dt_bias"]
        print("layer 0 mean attention distance per head:", np.round(d0, 4), "dt_bias:", dt0)
        check(np.allclose(dt0, -np.log(d0), atol=1e-4, rtol=0), f"dt_bias {dt0} != -ln d {-np.log(d0)}")
        for l in (0, 1, 3):
            p = f"model.layers.{l}.attn."
            check(np.all(np.isfinite(st[p + "dt_bias"])), f"layer {l} dt_bias not finite")
            check(np.ptp(st[p + "dt_bias"]) > 1e-3, f"layer {l}: decays do not differ per head: {st[p + 'dt_bias']}")
            check(not np.any(st[p + "A_log"]) and not np.any(st[p + "a_proj.weight"]), f"layer {l}: A_log/a_proj not zero")
        check("layer 0:" in r.stdout, f"distances not printed: {r.stdout}")
        # a one-token window: every distance is 0, clamped to 0.05
        must("distill", "init", "--teacher", t1, "--out", j("s1z.h5"), "--decay", "teacher", "--data", DATA,
             "--windows", "2", "--seq_len", "1")
        dz = tensors(j("s1z.h5"))["model.layers.1.attn.dt_bias"]
        check(np.allclose(dz, -np.log(0.05), atol=1e-6, rtol=0), f"d = 0: dt_bias {dz}, want -ln 0.05")

        # the student is an ordinary checkpoint
        r = run("inspect", j("s1.h5"))
        check(r.returncode == 0 and "mixers=GGAG " in r.stdout, f"inspect: {r.stdout[:300]} {r.stderr}")
        r = subprocess.run([GDN, "sample", "--ckpt", j("s1.h5"), "--prompt", "ab", "--bytes", "16",
                            "--temperature", "0"], capture_output=True)
        check(r.returncode == 0 and r.stdout.startswith(b"ab") and len(r.stdout) == 19, f"sample: {r.stdout!r} {r.stderr!r}")
        r = run("export", j("s2.h5"), "--out", j("hf"))  # all G: a hybrid needs qk_norm to export
        check(r.returncode == 0 and os.path.exists(j("hf/config.json")), f"export: {r.stdout} {r.stderr}")
        # a Qwen2 teacher's q/k/v biases have no place in the delta rule: said, not silently lost
        must("import", os.path.join(FIX, "..", "qwen2_bias_fp32"), "--out", j("q2.h5"))
        r = must("distill", "init", "--teacher", j("q2.h5"), "--out", j("q2s.h5"))
        check("drop the teacher's q/k/v biases" in r.stdout, f"qkv_bias teacher: no note: {r.stdout}")
        r = run("train", "--model_from", j("s1t.h5"), "--init_from", j("s1t.h5"), "--data", DATA,
                "--seq_len", "32", "--batch_size", "2", "--val_tokens", "1000", "--eval_batches", "1",
                "--steps", "2", "--backend", "cpu", "--out", j("run_s"))
        check(r.returncode == 0 and "initialised weights from" in r.stdout + r.stderr,
              f"train --model_from/--init_from the student: {r.stdout[-300:]} {r.stderr[-500:]}")

        # refusals
        refused(["--teacher", t1, "--out", j("x.h5"), "--mixers", "GXGG"], ["--mixers", "X"], "bad pattern")
        refused(["--teacher", t1, "--out", j("x.h5"), "--keep-softmax", "4"], ["layer 4 is out of range", "4 layers"],
                "keep index out of range")
        refused(["--teacher", t1, "--out", j("x.h5"), "--keep-softmax", "1,x"], ["not a layer index"], "bad keep list")
        refused(["--teacher", t1, "--out", j("x.h5"), "--keep-softmax", "0,1,2,3"], ["keeps every softmax layer"],
                "nothing converted")
        refused(["--teacher", j("s2.h5"), "--out", j("x.h5")], ["no softmax-attention layer"], "all-G teacher")
        refused(["--teacher", t1, "--out", j("x.h5"), "--decay", "teacher"], ["--data"], "--decay teacher without data")
        refused(["--teacher", t1, "--out", j("x.h5"), "--mixers", "G", "--keep-softmax", "1"], ["not both"],
                "--mixers with --keep-softmax")
        refused(["--teacher", t1, "--out", t1], ["destroy"], "--out is the teacher")
        refused(["--teacher", j("nope.h5"), "--out", j("x.h5")], ["--teacher", "nope.h5"], "missing teacher")
        refused(["--teacher", t1, "--out", j("x.h5"), "--gate", "half"], ["--gate must be zero, default or value"],
                "bad gate")
        refused(["--teacher", t1, "--out", j("x.h5"), "--conv", "ones"], ["--conv must be identity or default"], "bad conv")
        # a hybrid teacher whose delta-rule layers have another head shape cannot map
        must("train", "--mixers", "GA", "--n_layers", "2", "--d_model", "32", "--n_heads", "2", "--head_dim", "8",
             "--expand_v", "2", "--d_ff", "32", "--steps", "1", "--seq_len", "16", "--batch_size", "1",
             "--val_tokens", "1000", "--eval_batches", "1", "--data", DATA, "--backend", "cpu", "--out", j("run_ga"))
        ga = j("run_ga/ckpt_00000001.h5")
        refused(["--teacher", ga, "--out", j("x.h5")], ["cannot map", "value head dim 16"], "unmappable shapes")
        refused(["--teacher", ga, "--out", j("x.h5"), "--mixers", "DG"], ["layer 0 is 'G' in the teacher"],
                "pattern changing a G layer")
        refused(["--teacher", ga, "--out", j("x.h5"), "--keep-softmax", "0"], ["not softmax"], "keeping a G layer")
        # linearized (S) layers carry attention's shapes: a teacher with them and another value head
        # dim maps, its S layers copied whole
        must("train", "--mixers", "SA", "--n_layers", "2", "--d_model", "32", "--n_heads", "2", "--head_dim", "8",
             "--expand_v", "2", "--d_ff", "32", "--steps", "1", "--seq_len", "16", "--batch_size", "1",
             "--val_tokens", "1000", "--eval_batches", "1", "--data", DATA, "--backend", "cpu", "--out", j("run_sa"))
        must("distill", "init", "--teacher", j("run_sa/ckpt_00000001.h5"), "--out", j("ssa.h5"))
        a, b = tensors(j("run_sa/ckpt_00000001.h5")), tensors(j("ssa.h5"))
        check(model_attrs(j("ssa.h5"))["mixers"] == "SG", "S teacher: the student is not SG")
        check(all(np.array_equal(v, b[k]) for k, v in a.items() if k.startswith("model.layers.0.")),
              "S teacher: the S layer is not copied bit for bit")
        refused(["--teacher", t1, "--out", j("x.h5"), "--decay", "teacher", "--data", j("none.txt")],
                ["--data", "none.txt"], "missing --data")
        with open(j("short.txt"), "w") as f:
            f.write("In the beginning")
        refused(["--teacher", t1, "--out", j("x.h5"), "--decay", "teacher", "--data", j("short.txt"), "--seq_len", "64"],
                ["--data", "fewer than one window"], "--data shorter than a window")
        # malformed numbers: refused (status 2) naming the option, never a crash
        for opt in ("--windows", "--seq_len", "--seed"):
            for v in ("", " 1", "+1", "1e3", "0x10", "nan", "-1", "1.5", "abc", "99999999999999999999999"):
                r = run("distill", "init", "--teacher", t1, "--out", j("x.h5"), "--decay", "teacher",
                        "--data", DATA, opt, v)
                check(r.returncode == 2 and opt in r.stderr, f"{opt} '{v}': status {r.returncode}: {r.stderr.strip()}")
        for argv in (["distill"], ["distill", "nope"], ["distill", "init"], ["distill", "init", "--teacher"],
                     ["distill", "init", "--teacher", t1, "--out", j("x.h5"), "--bogus", "1"]):
            r = run(*argv)
            check(r.returncode == 2 and r.stderr.strip(), f"gdn {' '.join(argv)}: status {r.returncode}")
        check(run("distill", "--help").returncode == 0, "gdn distill --help failed")
        check(not os.path.exists(j("x.h5")), "a refused run wrote its --out")
    finish("distill_init")


if __name__ == "__main__":
    main()
