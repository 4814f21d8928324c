#!/usr/bin/env python3
"""gdn op gated-delta and gdn op attention with documents (a cu_seqlens dataset) through their
HDF5 interface: the packed run must give exactly (fp64, to rounding) what the op gives on each
document run alone: o, ht, lse and every gradient, for every delta-rule variant, with an initial
state entering each row's first document and the state gradient leaving its last; documents of
one token, starts at 1, at chunk edges and inside chunks. Also the clear refusals of a bad
cu_seqlens (not integer, not 1-D, not from 0 to T, not increasing) and of --backend cuda.
Usage: op_documents.py PATH/TO/gdn"""
import os, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from op_common import check, failures, inputs, rel, run_op  # noqa: E402

gdn = sys.argv[1]
tmp = tempfile.mkdtemp()
rng = np.random.default_rng(19)
TOL = 1e-12

B, T, H, K, V = 2, 70, 2, 8, 6
cu = np.array([0, 1, 2, 16, 21, 22, 40, 64, 70], dtype=np.int32)
docs = list(zip(cu[:-1], cu[1:]))

# ---- the delta rule: every variant, with h0 and dht ----------------------------------------
x = inputs(rng, B, T, H, K, V)
for variant, chunk in (("gdn", "16"), ("deltanet", "32"), ("gla", "32"), ("linear", "16")):
    args = ("--precision", "fp64", "--variant", variant, "--chunk", chunk)
    r, packed = run_op(gdn, tmp, dict(x, cu_seqlens=cu), args)
    check(packed is not None, f"{variant}: packed run failed: {r.stderr.strip()}")
    if packed is None:
        continue
    check("documents=cu_seqlens" in r.stdout, f"{variant}: the run does not say it used documents")
    want = {n: np.zeros_like(packed[n]) for n in packed}
    for i, (s, e) in enumerate(docs):
        one = {n: x[n][:, s:e] for n in ("q", "k", "v", "g", "beta", "do")}
        if i == 0:
            one["h0"] = x["h0"]
        if i == len(docs) - 1:
            one["dht"] = x["dht"]
        r, got = run_op(gdn, tmp, one, args)
        check(got is not None, f"{variant}: document {s}..{e} failed: {r.stderr.strip()}")
        if got is None:
            continue
        for n in ("o", "dq", "dk", "dv", "dg", "dbeta"):
            want[n][:, s:e] = got[n]
        if i == 0:
            want["dh0"] = got["dh0"]
        if i == len(docs) - 1:
            want["ht"] = got["ht"]
    for n in packed:
        e = rel(packed[n], want[n])
        check(e < TOL, f"{variant} chunk {chunk}: {n} packed vs one by one {e:.1e}")
    print(f"  gated-delta {variant} chunk {chunk}: packed vs one by one "
          f"{max(rel(packed[n], want[n]) for n in packed):.1e}")

# ---- attention ----------------------------------------------------------------------------
a = dict(q=rng.uniform(-1.5, 1.5, (B, T, 4, 6)), k=rng.uniform(-1.5, 1.5, (B, T, 2, 6)),
         v=rng.uniform(-1, 1, (B, T, 2, 6)), do=rng.uniform(-1, 1, (B, T, 4, 6)))
r, packed = run_op(gdn, tmp, dict(a, cu_seqlens=cu), ("--precision", "fp64"), op="attention")
check(packed is not None, f"attention: packed run failed: {r.stderr.strip()}")
if packed is not None:
    want = {n: np.zeros_like(packed[n]) for n in packed}
    for s, e in docs:
        r, got = run_op(gdn, tmp, {n: a[n][:, s:e] for n in a}, ("--precision", "fp64"), op="attention")
        check(got is not None, f"attention: document {s}..{e} failed: {r.stderr.strip()}")
        if got is None:
            continue
        for n in ("o", "dq", "dk", "dv"):
            want[n][:, s:e] = got[n]
        want["lse"][:, :, s:e] = got["lse"]
    worst = max(rel(packed[n], want[n]) for n in packed)
    check(worst < TOL, f"attention: packed vs one by one {worst:.1e}")
    print(f"  attention: packed vs one by one {worst:.1e}")

# ---- refusals -----------------------------------------------------------------------------
small = inputs(rng, 1, 8, 1, 4, 4)
bad = {
    "floats": (np.array([0.0, 4.0, 8.0]), "must hold integers"),
    "2-D": (np.array([[0, 4, 8]]), "must be 1-D"),
    "not from 0": (np.array([1, 4, 8]), "must run from 0 to T = 8"),
    "not to T": (np.array([0, 4, 7]), "must run from 0 to T = 8"),
    "repeated offset": (np.array([0, 4, 4, 8]), "not increasing at entry 2"),
    "decreasing": (np.array([0, 5, 3, 8]), "not increasing at entry 2"),
    "one entry": (np.array([0]), "needs 2 to T + 1"),
}
for what, (c, msg) in bad.items():
    for op, arrays in (("gated-delta", small),
                       ("attention", dict(q=small["q"], k=small["k"], v=small["v"]))):
        r, got = run_op(gdn, tmp, dict(arrays, cu_seqlens=c), op=op)
        check(got is None and msg in r.stderr and "cu_seqlens" in r.stderr,
              f"{op} with cu_seqlens {what}: exit {r.returncode}, stderr {r.stderr.strip()!r}")
r, got = run_op(gdn, tmp, dict(small, cu_seqlens=np.array([0, 3, 8])), ("--backend", "cuda"))
check(got is None and r.returncode == 2 and ("cpu only" in r.stderr or "no CUDA backend" in r.stderr),
      f"gated-delta --backend cuda with cu_seqlens: exit {r.returncode}, stderr {r.stderr.strip()!r}")

if failures:
    print(f"FAILED: {len(failures)} check(s)")
    sys.exit(1)
print("all checks passed")
