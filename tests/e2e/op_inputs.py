#!/usr/bin/env python3
"""gdn op gated-delta on hostile inputs: an output path that is the input file (same path, another
spelling, a symbolic or hard link) is refused before anything is written; NaN/Inf in any input
array or in the 'scale' attribute is refused naming the dataset and the element; 'scale' of any
integer or float type is accepted, strings and arrays are refused; --chunk is parsed strictly.
Every refusal exits non-zero with a message on stderr, never by a signal.
Usage: op_inputs.py PATH/TO/gdn"""
import hashlib, os, subprocess, sys, tempfile
import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from op_common import check, failures  # noqa: E402

gdn = sys.argv[1]
tmp = tempfile.mkdtemp()
rng = np.random.default_rng(5)


def inputs(B=1, T=20, H=2, K=8, V=8):
    k = rng.standard_normal((B, T, H, K))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    return dict(q=rng.standard_normal((B, T, H, K)), k=k, v=rng.standard_normal((B, T, H, V)),
                g=-rng.uniform(0.01, 1.0, (B, T, H)), beta=rng.uniform(0.1, 0.9, (B, T, H)))


def write(path, arrays, attrs=None):
    with h5py.File(path, "w") as f:
        for name, a in arrays.items():
            f[name] = a
        for name, a in (attrs or {}).items():
            f.attrs[name] = a


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def op(path_in, path_out, *args):
    r = subprocess.run([gdn, "op", "gated-delta", "--in", path_in, "--out", path_out, *args],
                       capture_output=True, text=True)
    check(r.returncode >= 0, f"gdn op {args} died by signal {-r.returncode}")
    return r


x = inputs()
src = os.path.join(tmp, "in.h5")
write(src, x)

# ---- the output is the input ------------------------------------------------------------
os.symlink(src, os.path.join(tmp, "sym.h5"))
os.link(src, os.path.join(tmp, "hard.h5"))
os.mkdir(os.path.join(tmp, "sub"))
before = digest(src)
for out in [src, os.path.join(tmp, ".", "in.h5"), os.path.join(tmp, "sub", "..", "in.h5"),
            os.path.join(tmp, "sym.h5"), os.path.join(tmp, "hard.h5")]:
    r = op(src, out)
    check(r.returncode == 2 and "same file" in r.stderr, f"--out {out}: {r.returncode} {r.stderr}")
    check(digest(src) == before, f"--out {out} changed the input")
# and the other way round: the input named through the link
r = op(os.path.join(tmp, "sym.h5"), src)
check(r.returncode == 2 and digest(src) == before, f"--in via symlink: {r.returncode} {r.stderr}")

# ---- non-finite inputs ---------------------------------------------------------------------
out = os.path.join(tmp, "out.h5")
full = dict(x, h0=rng.standard_normal((1, 2, 8, 8)), do=rng.standard_normal((1, 20, 2, 8)),
            dht=rng.standard_normal((1, 2, 8, 8)))
cases = 0
for name in ["q", "k", "v", "g", "beta", "h0", "do", "dht"]:
    for bad in [np.nan, np.inf, -np.inf]:
        for dtype in [np.float64, np.float32]:
            a = {n: v.astype(dtype) for n, v in full.items()}
            idx = tuple(int(rng.integers(0, s)) for s in a[name].shape)
            a[name][idx] = bad
            p = os.path.join(tmp, "bad.h5")
            write(p, a)
            if os.path.exists(out):
                os.remove(out)
            r = op(p, out)
            flat = int(np.ravel_multi_index(idx, a[name].shape))
            want = "[" + ",".join(str(i) for i in idx) + "]"
            check(r.returncode == 1 and f"'{name}'" in r.stderr and want in r.stderr and
                  f"flat index {flat}" in r.stderr and not os.path.exists(out),
                  f"{name}{idx} = {bad} ({dtype.__name__}): {r.returncode} {r.stderr}")
            cases += 1

# ---- the scale attribute -------------------------------------------------------------------
def scale_run(value):
    p = os.path.join(tmp, "s.h5")
    write(p, x, {"scale": value})
    if os.path.exists(out):
        os.remove(out)
    return op(p, out, "--precision", "fp64")


ref = scale_run(np.float64(1.0))
check(ref.returncode == 0, f"scale 1.0: {ref.stderr}")
o_ref = h5py.File(out, "r")["o"][()]
for v in [np.int64(1), np.int32(1), np.uint8(1), np.int8(1), np.float32(1.0), np.uint64(1)]:
    r = scale_run(v)
    ok = r.returncode == 0 and np.array_equal(h5py.File(out, "r")["o"][()], o_ref)
    check(ok, f"scale {v!r} ({type(v).__name__}): {r.returncode} {r.stderr}")
for v, needle in [(np.nan, "NaN"), (np.inf, "infinite"), (-np.inf, "infinite"),
                  (np.float32(np.nan), "NaN"), ("0.5", "must be a number"),
                  (np.array([1.0, 2.0]), "single number"), (np.array([0.5]), "single number"),
                  (True, "must be a number")]:
    r = scale_run(v)
    check(r.returncode == 1 and "scale" in r.stderr and needle in r.stderr and not os.path.exists(out),
          f"scale {v!r}: {r.returncode} {r.stderr}")

# ---- --chunk, strictly --------------------------------------------------------------------
for c in ["16x", "", " 16", "16 ", "+16", "0x10", "1e3", "16.0", "-16", "99999999999999999999", "nan"]:
    r = op(src, out, "--chunk", c)
    check(r.returncode == 2 and "--chunk" in r.stderr, f"--chunk '{c}': {r.returncode} {r.stderr}")
for c in ["8", "48", "128"]:
    r = op(src, out, "--chunk", c)
    check(r.returncode == 2 and "--chunk" in r.stderr, f"--chunk '{c}': {r.returncode} {r.stderr}")
r = op(src, out, "--chunk", "32")
check(r.returncode == 0, f"--chunk 32: {r.stderr}")

print(f"op_inputs: {cases} non-finite inputs, 6 same-file outputs, 14 scale types, 15 chunk values; "
      f"{len(failures)} failures")
sys.exit(1 if failures else 0)
