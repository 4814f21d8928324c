"""Helpers of the gdn op tests (op_gated_delta.py, op_variants.py, op_attention.py): random inputs,
one run of an op through HDF5 files, relative errors and directional finite differences, and
the list of failed checks each script reports at its end. The scripts import it from their own
folder."""
import os, subprocess
import h5py
import numpy as np

from e2e_common import check, failures, finish  # noqa: F401 (the op scripts import them from here)


def inputs(rng, B, T, H, K, V):
    """Every array the op reads, drawn from rng (always in this order), k with unit rows."""
    q = rng.standard_normal((B, T, H, K))
    k = rng.standard_normal((B, T, H, K))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    return dict(q=q, k=k, v=rng.standard_normal((B, T, H, V)),
                g=-rng.uniform(0.01, 1.0, (B, T, H)), beta=rng.uniform(0.1, 0.9, (B, T, H)),
                h0=rng.standard_normal((B, H, K, V)) * 0.5,
                do=rng.standard_normal((B, T, H, V)), dht=rng.standard_normal((B, H, K, V)))


def run_op(gdn, tmp, arrays, args=(), attrs=None, op="gated-delta"):
    """Writes arrays (and root attributes attrs) to tmp/in.h5 and runs gdn op OP into
    tmp/out.h5, removed first so that a stale output cannot pass. Returns the finished process
    and, when it exited with 0, the output datasets by name (else None)."""
    path_in, path_out = os.path.join(tmp, "in.h5"), os.path.join(tmp, "out.h5")
    if os.path.exists(path_out):
        os.remove(path_out)
    with h5py.File(path_in, "w") as f:
        for name, a in arrays.items():
            f[name] = a
        for name, a in (attrs or {}).items():
            f.attrs[name] = a
    r = subprocess.run([gdn, "op", op, "--in", path_in, "--out", path_out, *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return r, None
    with h5py.File(path_out, "r") as f:
        return r, {name: f[name][()] for name in f}


def rel(a, b):
    """||a - b|| / ||b|| (/ 1 when b is all zeros)."""
    n = np.linalg.norm(b)
    return np.linalg.norm(a - b) / (n if n > 0 else 1.0)


def directional_derivative(loss, x, u, eps=1e-6):
    """(loss(x + eps u) - loss(x - eps u)) / (2 eps): x and u map names to arrays; the entries of
    x that u lacks are passed unchanged."""
    def at(sign):
        return loss(dict(x, **{n: x[n] + sign * eps * u[n] for n in u}))
    return (at(1) - at(-1)) / (2 * eps)
