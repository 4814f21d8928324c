#!/usr/bin/env python3
"""gdn op attention through its HDF5 interface, against an independent NumPy float64 causal
softmax attention that materialises each T x T matrix, and its backward through the softmax
Jacobian (itself checked by directional finite differences): o, lse, dq, dk, dv on shapes with
grouped kv heads (H/Hkv = 1, 2, 4), T = 1, odd T and T across the kernel's 64-row blocks, in fp64
and fp32, with the default and an explicit scale. Also: forward only without do, and the clear
refusals (missing datasets, H not a multiple of Hkv, mismatched B/T/D, non-finite inputs, an
overflow in fp32, --backend cuda without CUDA, bad options).
With --backend cuda (ctest op_attention_cuda, label gpu): the CUDA kernels (head dims 64 and 128)
against the same reference in fp32 and bf16 (inputs rounded to bf16 for its reference, as the
op rounds them), with the limits of tests/gpu/test_gpu_attention.c; exit 77 (skip) where the
build has no CUDA backend or there is no GPU.
Usage: op_attention.py PATH/TO/gdn [--backend cuda]"""
import os, subprocess, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from op_common import check, directional_derivative, finish, rel, run_op  # noqa: E402

gdn = sys.argv[1]
cuda_mode = sys.argv[2:] == ["--backend", "cuda"]
tmp = tempfile.mkdtemp()
rng = np.random.default_rng(15)


def expand(kv, H):
    """[B,T,Hkv,D] -> [B,T,H,D]: query head h reads kv head h // (H // Hkv)."""
    return np.repeat(kv, H // kv.shape[2], axis=2)


def forward(x, scale):
    """o [B,T,H,D], lse [B,H,T] and the probabilities P [B,H,T,T]."""
    q, H = x["q"], x["q"].shape[2]
    k, v = expand(x["k"], H), expand(x["v"], H)
    T = q.shape[1]
    s = scale * np.einsum("bthd,buhd->bhtu", q, k)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    lse = (m + np.log(e.sum(-1, keepdims=True)))[..., 0]
    P = e / e.sum(-1, keepdims=True)
    return np.einsum("bhtu,buhd->bthd", P, v), lse, P


def backward(x, scale):
    """Gradients of sum(o * do); dk, dv summed over the query heads of each group."""
    q, do, H, Hkv = x["q"], x["do"], x["q"].shape[2], x["k"].shape[2]
    k, v = expand(x["k"], H), expand(x["v"], H)
    o, lse, P = forward(x, scale)
    dv = np.einsum("bhtu,bthd->buhd", P, do)
    dP = np.einsum("bthd,buhd->bhtu", do, v)
    dS = P * (dP - (P * dP).sum(-1, keepdims=True))
    dq = scale * np.einsum("bhtu,buhd->bthd", dS, k)
    dk = scale * np.einsum("bhtu,bthd->buhd", dS, q)
    fold = lambda a: a.reshape(a.shape[0], a.shape[1], Hkv, H // Hkv, a.shape[3]).sum(3)
    return o, lse, {"q": dq, "k": fold(dk), "v": fold(dv)}


def inputs(B, T, H, Hkv, D, amp=1.5):
    return dict(q=rng.uniform(-amp, amp, (B, T, H, D)), k=rng.uniform(-amp, amp, (B, T, Hkv, D)),
                v=rng.standard_normal((B, T, Hkv, D)), do=rng.standard_normal((B, T, H, D)))


def run(arrays, args=(), attrs=None):
    """The output datasets, or the finished process when the op failed."""
    r, out = run_op(gdn, tmp, arrays, args, attrs, op="attention")
    check(r.returncode >= 0, f"gdn op attention {args} died by signal {-r.returncode}")
    return r if out is None else out


# ---- the reference backward against finite differences of the reference forward ---------------
for (B, T, H, Hkv, D) in [(2, 9, 4, 2, 8), (1, 6, 4, 1, 16), (1, 5, 2, 2, 8)]:
    x = inputs(B, T, H, Hkv, D)
    scale = 0.4
    _, _, d = backward(x, scale)
    u = {n: rng.standard_normal(x[n].shape) for n in ["q", "k", "v"]}
    analytic = sum(float(np.sum(d[n] * u[n])) for n in u)
    numeric = directional_derivative(lambda y: np.sum(forward(y, scale)[0] * x["do"]), x, u)
    e = abs(analytic - numeric) / abs(numeric)
    check(e < 1e-7, f"reference backward B{B} T{T} H{H} Hkv{Hkv}: directional derivative off by {e:.2e}")

def bf16(a):
    """a rounded to bfloat16 (nearest, ties to even) and widened back, as the GPU reads it."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def check_cuda():
    """The CUDA kernels through the op: fp32 within 1e-4 and bf16 within 1e-2 (relative, against
    the reference on bf16-rounded inputs; lse within 1e-3 absolute). 77 when there is no GPU."""
    probe = run(inputs(1, 5, 2, 2, 64), ["--backend", "cuda", "--precision", "fp32"])
    if not isinstance(probe, dict):
        if "no CUDA device" in probe.stderr or "no CUDA backend" in probe.stderr:
            print("SKIP: " + probe.stderr.strip())
            return 77
        check(False, f"--backend cuda probe: exit {probe.returncode}: {probe.stderr}")
        return 1
    for (B, T, H, Hkv, D) in [(1, 1, 2, 1, 64), (2, 17, 4, 2, 64), (1, 130, 4, 1, 128), (2, 70, 2, 2, 128)]:
        for prec, tol in [("fp32", 1e-4), ("bf16", 1e-2)]:
            x = inputs(B, T, H, Hkv, D)
            xr = {n: bf16(a) for n, a in x.items()} if prec == "bf16" else x
            sc = 1 / np.sqrt(D)
            o, lse, d = backward(xr, sc)
            out = run(x, ["--backend", "cuda", "--precision", prec])
            label = f"cuda B{B} T{T} H{H} Hkv{Hkv} D{D} {prec}"
            if not isinstance(out, dict):
                check(False, f"{label}: exit {out.returncode}: {out.stderr}")
                continue
            errs = {"o": rel(out["o"], o)}
            for n in ["q", "k", "v"]:
                ref = d[n]
                errs["d" + n] = (rel(out["d" + n], ref) if np.any(ref)
                                 else np.linalg.norm(out["d" + n]) / np.linalg.norm(xr["do"]))
            e_lse = float(np.max(np.abs(out["lse"] - lse)))
            print(f"{label}: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()) + f", lse {e_lse:.1e}")
            check(all(e < tol for e in errs.values()) and e_lse < 1e-3, f"{label}: {errs}, lse {e_lse}")
    refused(inputs(1, 5, 2, 2, 32), ["--backend", "cuda"], ["head dims 64 and 128", "D=32"], "cuda D=32",
            code=2)
    return 0


# ---- the op against the reference ---------------------------------------------------------------
# Outputs are written as fp32 (relative rounding 6e-8: measured 3e-8 in fp64); in fp32 the inputs
# are rounded too and the sums of up to T terms run in float (measured 3e-7).
SHAPES = [(1, 1, 2, 1, 8), (2, 37, 4, 2, 16), (1, 70, 4, 1, 8), (2, 13, 4, 4, 16), (1, 130, 2, 2, 32)]
worst = {}
for (B, T, H, Hkv, D) in SHAPES:
    for prec, tol in [("fp64", 2e-7), ("fp32", 2e-6)]:
        for scale in [None, 0.3]:
            x = inputs(B, T, H, Hkv, D)
            sc = 1 / np.sqrt(D) if scale is None else scale
            o, lse, d = backward(x, sc)
            out = run(x, ["--precision", prec], None if scale is None else {"scale": scale})
            label = f"B{B} T{T} H{H} Hkv{Hkv} D{D} {prec} scale {'default' if scale is None else scale}"
            if not isinstance(out, dict):
                check(False, f"{label}: exit {out.returncode}: {out.stderr}")
                continue
            check(sorted(out) == ["dk", "dq", "dv", "lse", "o"], f"{label}: datasets {sorted(out)}")
            check(out["lse"].shape == (B, H, T) and out["dk"].shape == (B, T, Hkv, D), f"{label}: shapes")
            errs = {"o": rel(out["o"], o), "lse": rel(out["lse"], lse)}
            for n in ["q", "k", "v"]:
                # dq, dk are exactly zero at T = 1 (one key takes all the weight): compare to |do|
                ref = d[n]
                errs["d" + n] = (rel(out["d" + n], ref) if np.any(ref)
                                 else np.linalg.norm(out["d" + n]) / np.linalg.norm(x["do"]))
            w = max(errs, key=errs.get)
            worst[prec] = max(worst.get(prec, 0), errs[w])
            print(f"{label}: worst {w} {errs[w]:.2e}")
            check(all(e < tol for e in errs.values()), f"{label}: {errs} (limit {tol})")
print("op vs numpy: worst relative error " + ", ".join(f"{p} {e:.2e}" for p, e in worst.items()))

# An integer scale attribute (h5py writes int64) is a number like any other.
x = inputs(1, 9, 2, 1, 8)
out = run(x, [], {"scale": 1})
check(isinstance(out, dict) and rel(out["o"], forward(x, 1.0)[0]) < 1e-5, "integer scale attribute")

# Forward only: without do, o and lse alone.
x = inputs(1, 20, 4, 2, 8)
del x["do"]
out = run(x, ["--precision", "fp64"])
if isinstance(out, dict):
    o, lse, _ = forward(x, 1 / np.sqrt(8))
    check(sorted(out) == ["lse", "o"], f"forward only: {sorted(out)}")
    check(rel(out["o"], o) < 1e-6 and rel(out["lse"], lse) < 1e-6, "forward only: values")
else:
    check(False, f"forward only: exit {out.returncode}: {out.stderr}")

# ---- refusals ---------------------------------------------------------------------------------


def refused(arrays, args, needles, what, code=None, attrs=None):
    r = run(arrays, args, attrs)
    ok = not isinstance(r, dict) and r.returncode != 0 and (code is None or r.returncode == code)
    ok = ok and all(n in r.stderr for n in needles)
    check(ok, f"{what}: {'accepted' if isinstance(r, dict) else (r.returncode, r.stderr)}")


if cuda_mode:
    if check_cuda() == 77:
        sys.exit(77)
    finish("op_attention --backend cuda")
    sys.exit(0)

x = inputs(2, 10, 4, 2, 8)
for n in ["q", "k", "v"]:
    refused({k: a for k, a in x.items() if k != n}, [], [f"missing dataset '{n}'"], f"without {n}")
refused(dict(x, k=rng.standard_normal((2, 10, 3, 8)), v=rng.standard_normal((2, 10, 3, 8))), [],
        ["4 heads", "3", "multiple"], "H not a multiple of Hkv")
for i, what in enumerate(["B", "T", None, "D"]):
    if what is None:
        continue
    shape = list(x["k"].shape)
    shape[i] += 1
    refused(dict(x, k=rng.standard_normal(shape)), [], ["'k'", "[2,10,Hkv,8]"], f"k with another {what}")
refused(dict(x, v=rng.standard_normal((2, 10, 1, 8))), [], ["'v'", "the shape of k"], "v unlike k")
refused(dict(x, do=rng.standard_normal((2, 10, 4, 7))), [], ["'do'", "the shape of q"], "do unlike q")
refused(dict(x, q=rng.standard_normal((2, 10, 8))), [], ["'q'", "3 dimensions"], "q of rank 3")
for n, val, word in [("q", np.nan, "NaN"), ("v", np.inf, "infinity"), ("do", -np.inf, "infinity")]:
    bad = dict(x)
    bad[n] = x[n].copy()
    bad[n][1, 3, 1, 2] = val
    refused(bad, [], [f"'{n}'", word, "[1,3,1,2]"], f"{word} in {n}")
refused(x, [], ["'scale'", "finite"], "NaN scale", attrs={"scale": np.nan})
# finite inputs whose scores overflow float (and lse the fp32 output): refused, in either precision
big = dict(x, q=x["q"] * 1e20, k=x["k"] * 1e20)
for prec in ["fp32", "fp64"]:
    refused(big, ["--precision", prec], ["not finite", prec], f"{prec} overflow", code=1)
# scores of ~1e19: the softmax is one-hot and nothing overflows
large = dict(x, q=x["q"] * 1e9, k=x["k"] * 1e9)
o, lse, _ = forward(large, 1 / np.sqrt(8))
for prec in ["fp32", "fp64"]:
    out = run(large, ["--precision", prec])
    check(isinstance(out, dict) and rel(out["o"], o) < 1e-6 and rel(out["lse"], lse) < 1e-6 and
          all(np.all(np.isfinite(a)) for a in out.values()), f"{prec} with scores ~1e19")
refused(x, ["--precision", "bf16"], ["--precision bf16"], "bf16 on cpu", code=2)
refused(x, ["--chunk", "16"], ["unknown option '--chunk'"], "--chunk", code=2)
# --backend cuda without CUDA: refused before the input is opened (a CUDA build reads it first)
r = subprocess.run([gdn, "op", "attention", "--in", os.path.join(tmp, "absent.h5"), "--out",
                    os.path.join(tmp, "o.h5"), "--backend", "cuda"], capture_output=True, text=True)
check((r.returncode == 2 and "no CUDA backend" in r.stderr and "absent.h5" not in r.stderr) or
      (r.returncode == 1 and "absent.h5" in r.stderr), f"--backend cuda: {r.returncode} {r.stderr}")
refused(x, ["--backend", "cuda", "--precision", "fp64"], ["--precision fp64 is not available on cuda"],
        "fp64 on cuda", code=2)
r = subprocess.run([gdn, "op", "attention", "--in", os.path.join(tmp, "in.h5"), "--out",
                    os.path.join(tmp, "in.h5")], capture_output=True, text=True)
check(r.returncode == 2 and "the same file" in r.stderr, f"--out = --in: {r.returncode} {r.stderr}")
r = subprocess.run([gdn, "op", "attention", "--help"], capture_output=True, text=True)
check(r.returncode == 0 and "[B,T,Hkv,D]" in r.stdout, "--help")
r = subprocess.run([gdn, "op", "nope"], capture_output=True, text=True)
check(r.returncode == 2 and "gated-delta, attention" in r.stderr, f"unknown op: {r.stderr}")

finish("op_attention")
