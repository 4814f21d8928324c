#!/usr/bin/env python3
"""gdn op gated-delta --variant gdn|deltanet|gla|linear through its HDF5 interface, against an
independent NumPy float64 implementation of each recurrence, token by token, and of its
backpropagation through time (itself checked by directional finite differences). Inputs a variant
ignores (g for deltanet and linear, beta for gla and linear) may be absent; present, they change
nothing, are still checked (finite, shape), and their gradients are written as exact zeros.
Also: the default variant is gdn, an unknown variant is refused with exit status 2 before any
input is read, and --backend cuda accepts every variant.
With --backend cuda (ctest op_variants_cuda, label gpu): each variant on the GPU in fp32 and bf16
against the same reference instead (T not a multiple of the GPU's chunk of 64, h0 and dht, the
ignored inputs absent and present); exit 77 (skip) where the build has no CUDA backend or there
is no GPU.
Usage: op_variants.py PATH/TO/gdn [--backend cuda]"""
import os, subprocess, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from op_common import check, directional_derivative, finish, inputs as draw_inputs, rel, run_op  # noqa: E402

gdn = sys.argv[1]
cuda_mode = sys.argv[2:] == ["--backend", "cuda"]
tmp = tempfile.mkdtemp()
rng = np.random.default_rng(14)

# which inputs each variant reads (model/mixer.h)
VARIANTS = {"gdn": dict(decay=True, beta=True, delta=True),
            "deltanet": dict(decay=False, beta=True, delta=True),
            "gla": dict(decay=True, beta=False, delta=False),
            "linear": dict(decay=False, beta=False, delta=False)}


def forward(var, x, scale, keep=False):
    """S' = a_t S; u = b_t (v_t - S'^T k_t) with the delta term, else b_t v_t; S = S' + k_t u^T;
    o_t = scale S^T q_t. a_t = exp(g_t) or 1, b_t = beta_t or 1."""
    m = VARIANTS[var]
    q, k, v = x["q"], x["k"], x["v"]
    B, T, H, K = q.shape
    o = np.zeros(v.shape)
    S = x["h0"].copy()
    saved = []
    for t in range(T):
        a = np.exp(x["g"][:, t]) if m["decay"] else np.ones((B, H))
        b = x["beta"][:, t] if m["beta"] else np.ones((B, H))
        Sa = S * a[:, :, None, None]
        kt, vt = k[:, t], v[:, t]
        pred = np.einsum("bhk,bhkv->bhv", kt, Sa)
        r = vt - pred if m["delta"] else vt
        u = b[:, :, None] * r
        if keep:
            saved.append((S, a, b, Sa, r, u))
        S = Sa + np.einsum("bhk,bhv->bhkv", kt, u)
        o[:, t] = scale * np.einsum("bhk,bhkv->bhv", q[:, t], S)
    return (o, S, saved) if keep else (o, S)


def backward(var, x, scale):
    """Gradients of L = sum(o * do) + sum(ht * dht) by backpropagation through time."""
    m = VARIANTS[var]
    q, k, do = x["q"], x["k"], x["do"]
    o, S_end, saved = forward(var, x, scale, keep=True)
    d = {n: np.zeros(x[n].shape) for n in ["q", "k", "v", "g", "beta"]}
    dS = x["dht"].copy()
    for t in reversed(range(q.shape[1])):
        S_prev, a, b, Sa, r, u = saved[t]
        S = Sa + np.einsum("bhk,bhv->bhkv", k[:, t], u)
        d["q"][:, t] = scale * np.einsum("bhkv,bhv->bhk", S, do[:, t])
        dS = dS + scale * np.einsum("bhk,bhv->bhkv", q[:, t], do[:, t])
        dSa = dS.copy()
        d["k"][:, t] = np.einsum("bhkv,bhv->bhk", dS, u)
        du = np.einsum("bhkv,bhk->bhv", dS, k[:, t])
        dr = b[:, :, None] * du
        if m["beta"]:
            d["beta"][:, t] = np.sum(du * r, axis=-1)
        d["v"][:, t] = dr
        if m["delta"]:  # r = v - Sa^T k
            dSa -= np.einsum("bhk,bhv->bhkv", k[:, t], dr)
            d["k"][:, t] -= np.einsum("bhkv,bhv->bhk", Sa, dr)
        if m["decay"]:
            d["g"][:, t] = a * np.einsum("bhkv,bhkv->bh", dSa, S_prev)
        dS = dSa * a[:, :, None, None]
    d["h0"] = dS
    return o, S_end, d


def inputs(B, T, H, K, V):
    return draw_inputs(rng, B, T, H, K, V)


def run(arrays, args=(), attrs=None):
    """The output datasets, or the finished process when the op failed."""
    r, out = run_op(gdn, tmp, arrays, args, attrs)
    check(r.returncode >= 0, f"gdn op {args} died by signal {-r.returncode}")
    return r if out is None else out


GRAD = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "beta": "dbeta", "h0": "dh0"}


def compare(var, out, o, ht, d, ignored, tol, what):
    """The op's outputs against the reference; the gradients of ignored inputs exact zeros."""
    check(sorted(out) == sorted(["o", "ht"] + list(GRAD.values())), f"{var}: datasets {sorted(out)}")
    errs = {"o": rel(out["o"], o), "ht": rel(out["ht"], ht)}
    for n, dn in GRAD.items():
        if n in ignored:
            check(out[dn].shape == d[n].shape and not np.any(out[dn]),
                  f"{var} {what}: {dn} of an ignored input is not all zeros")
        else:
            errs[dn] = rel(out[dn].astype(np.float64), d[n])
    worst = max(errs, key=errs.get)
    print(f"{var:8s} {what}: worst {worst} {errs[worst]:.2e}")
    check(all(e < tol for e in errs.values()), f"{var} {what}: {errs}")


def bf16_round(a):
    """float64 -> the nearest bfloat16 (ties to even), as float64."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def check_cuda():
    """Every variant through --backend cuda (K = V = 64, the GPU's smallest head), fp32 and bf16,
    against the float64 BPTT reference, with the relative tolerances of tests/gpu/test_gpu_delta.c;
    an ignored input changes nothing, bit for bit. Returns 77 when there is no GPU to run on."""
    probe = run(inputs(1, 5, 1, 64, 64), ["--backend", "cuda", "--precision", "fp32"])
    if not isinstance(probe, dict):
        if "no CUDA device" in probe.stderr or "no CUDA backend" in probe.stderr:
            print("SKIP: " + probe.stderr.strip())
            return 77
        check(False, f"--backend cuda probe: exit {probe.returncode}: {probe.stderr}")
    for var, m in VARIANTS.items():
        ignored = ([] if m["decay"] else ["g"]) + ([] if m["beta"] else ["beta"])
        x0 = inputs(2, 100, 2, 64, 64)
        scale = 0.125
        for prec, tol in (("fp32", 1e-4), ("bf16", 1e-2)):
            # bf16: q, k, v, do rounded here as the GPU rounds them, so that the reference sees
            # the same values (the tolerance is for the kernels' own rounding)
            x = dict(x0, **{n: bf16_round(x0[n]) for n in ["q", "k", "v", "do"]}) if prec == "bf16" else x0
            o, ht, d = backward(var, x, scale)
            outs = {}
            for present in ([True, False] if ignored else [True]):
                arrays = {n: a for n, a in x.items() if present or n not in ignored}
                out = run(arrays, ["--backend", "cuda", "--precision", prec, "--variant", var],
                          {"scale": scale})
                what = f"cuda {prec} ignored inputs {'present' if present else 'absent'}"
                if not isinstance(out, dict):
                    check(False, f"{var} {what}: exit {out.returncode}: {out.stderr}")
                    continue
                outs[present] = out
                compare(var, out, o, ht, d, ignored, tol, what)
            if len(outs) == 2:
                for n in outs[True]:
                    check(np.array_equal(outs[True][n], outs[False][n]),
                          f"{var} cuda {prec}: {n} differs with the ignored inputs present")
    return 0


if cuda_mode:
    code = check_cuda()
    if code == 77:
        sys.exit(77)
    finish("op_variants --backend cuda")
    sys.exit(0)

# ---- the reference BPTT against finite differences of the reference forward -------------------
for var, m in VARIANTS.items():
    x = inputs(2, 9, 2, 4, 3)
    scale = 0.6
    _, _, d = backward(var, x, scale)
    names = ["q", "k", "v", "h0"] + (["g"] if m["decay"] else []) + (["beta"] if m["beta"] else [])
    u = {n: rng.standard_normal(x[n].shape) for n in names}
    analytic = sum(float(np.sum(d[n] * u[n])) for n in names)

    def L(y):
        o2, h2 = forward(var, y, scale)
        return np.sum(o2 * x["do"]) + np.sum(h2 * x["dht"])
    numeric = directional_derivative(L, x, u)
    e = abs(analytic - numeric) / abs(numeric)
    check(e < 1e-7, f"reference BPTT {var}: directional derivative off by {e:.2e}")

# ---- the op against the reference, ignored inputs absent and present ----------------------------
for var, m in VARIANTS.items():
    ignored = ([] if m["decay"] else ["g"]) + ([] if m["beta"] else ["beta"])
    for (B, prec, tol) in [(1, "fp64", 1e-5), (2, "fp64", 1e-5), (2, "fp32", 1e-5)]:
        x = inputs(B, 37, 2, 16, 16)
        scale = 0.7
        o, ht, d = backward(var, x, scale)
        args = ["--chunk", "16", "--precision", prec, "--variant", var]
        outs = {}
        for present in ([True, False] if ignored else [True]):
            arrays = {n: a for n, a in x.items() if present or n not in ignored}
            out = run(arrays, args, {"scale": scale})
            if not isinstance(out, dict):
                check(False, f"{var} B{B} {prec} ignored present={present}: exit {out.returncode}: {out.stderr}")
                continue
            outs[present] = out
            compare(var, out, o, ht, d, ignored, tol,
                    f"B{B} {prec} ignored inputs {'present' if present else 'absent '}")
        if len(outs) == 2:  # an ignored input changes nothing, bit for bit
            for n in outs[True]:
                check(np.array_equal(outs[True][n], outs[False][n]),
                      f"{var} B{B} {prec}: {n} differs with the ignored inputs present")

# Forward only (no do/dht): only o and ht, from the minimal set of inputs.
for var, m in VARIANTS.items():
    x = inputs(1, 37, 2, 16, 16)
    x["h0"] = np.zeros_like(x["h0"])
    keep = ["q", "k", "v"] + (["g"] if m["decay"] else []) + (["beta"] if m["beta"] else [])
    out = run({n: x[n] for n in keep}, ["--chunk", "16", "--precision", "fp64", "--variant", var])
    if isinstance(out, dict):
        o, ht = forward(var, x, 1 / np.sqrt(16))
        check(sorted(out) == ["ht", "o"], f"{var} forward only: {sorted(out)}")
        check(rel(out["o"], o) < 1e-5 and rel(out["ht"], ht) < 1e-5, f"{var} forward only: values")
    else:
        check(False, f"{var} forward only: exit {out.returncode}: {out.stderr}")

# The default is gdn, bit for bit.
x = inputs(1, 37, 2, 16, 16)
a, b = run(x, ["--chunk", "16"]), run(x, ["--chunk", "16", "--variant", "gdn"])
check(isinstance(a, dict) and isinstance(b, dict) and all(np.array_equal(a[n], b[n]) for n in a),
      "the default variant is not gdn")

# ---- refusals ---------------------------------------------------------------------------------
x = inputs(1, 20, 2, 8, 8)
for var, m in VARIANTS.items():
    # a needed input absent: named with its shape
    for n in (["g"] if m["decay"] else []) + (["beta"] if m["beta"] else []):
        r = run({k: v for k, v in x.items() if k != n}, ["--variant", var])
        check(not isinstance(r, dict) and r.returncode != 0 and f"'{n}'" in r.stderr,
              f"{var} without {n}: {getattr(r, 'stderr', 'accepted')}")
    # an ignored input, present, is still checked: non-finite and a wrong shape are refused
    for n in ([] if m["decay"] else ["g"]) + ([] if m["beta"] else ["beta"]):
        bad = dict(x)
        bad[n] = x[n].copy()
        bad[n][0, 3, 1] = np.nan
        r = run(bad, ["--variant", var])
        check(not isinstance(r, dict) and r.returncode != 0 and f"'{n}'" in r.stderr and "NaN" in r.stderr,
              f"{var} with NaN in ignored {n}: {getattr(r, 'stderr', 'accepted')}")
        bad[n] = rng.standard_normal((1, 19, 2))
        r = run(bad, ["--variant", var])
        check(not isinstance(r, dict) and r.returncode != 0 and f"'{n}'" in r.stderr,
              f"{var} with a wrongly shaped ignored {n}: {getattr(r, 'stderr', 'accepted')}")
for bad in ["GDN", "mamba", "", "G", "gdn "]:
    r = run(x, ["--variant", bad])
    check(not isinstance(r, dict) and r.returncode == 2 and "gdn, deltanet, gla, linear" in r.stderr,
          f"--variant {bad!r}: {getattr(r, 'stderr', 'accepted')}")
for var in ["deltanet", "gla", "linear"]:
    # --backend cuda takes every variant: it goes on to read the input (absent here), with or
    # without a GPU in the build
    r = subprocess.run([gdn, "op", "gated-delta", "--in", os.path.join(tmp, "absent.h5"), "--out",
                        os.path.join(tmp, "o.h5"), "--backend", "cuda", "--variant", var],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "absent.h5" in r.stderr and "--variant gdn" not in r.stderr,
          f"--backend cuda --variant {var}: {r.returncode} {r.stderr}")
r = subprocess.run([gdn, "op", "gated-delta", "--help"], capture_output=True, text=True)
check(r.returncode == 0 and "--variant gdn|deltanet|gla|linear" in r.stdout, "--help lacks --variant")

finish("op_variants")
