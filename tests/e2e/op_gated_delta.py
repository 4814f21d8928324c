#!/usr/bin/env python3
"""gdn op gated-delta through its HDF5 interface, against an independent NumPy implementation of
the token-by-token recurrence: forward outputs directly, gradients through directional finite
differences of L = sum(o * do) + sum(ht * dht). Also the error messages for bad input files."""
import os, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from op_common import directional_derivative, inputs as draw_inputs, rel, run_op  # noqa: E402

gdn = sys.argv[1]
tmp = tempfile.mkdtemp()
rng = np.random.default_rng(3)


def recurrent(q, k, v, g, beta, h0, scale):
    B, T, H, K = q.shape
    V = v.shape[3]
    o = np.zeros((B, T, H, V))
    S = h0.copy()
    for t in range(T):
        S = S * np.exp(g[:, t])[:, :, None, None]
        kt, vt = k[:, t], v[:, t]
        err = vt - np.einsum("bhk,bhkv->bhv", kt, S)
        S = S + np.einsum("bhk,bhv->bhkv", kt, beta[:, t][:, :, None] * err)
        o[:, t] = scale * np.einsum("bhk,bhkv->bhv", q[:, t], S)
    return o, S


def inputs(B, T, H, K, V):
    return draw_inputs(rng, B, T, H, K, V)


def run(arrays, args=(), attrs=None, expect_ok=True):
    r, out = run_op(gdn, tmp, arrays, args, attrs)
    assert r.returncode >= 0, f"gdn op {args} died by signal {-r.returncode}"
    if not expect_ok:
        assert r.returncode != 0, "expected a failure"
        return r.stderr
    assert r.returncode == 0, r.stderr
    return out


for (B, T, H, K, V, chunk, prec) in [(2, 37, 2, 8, 12, 16, "fp64"), (1, 70, 3, 16, 16, 32, "fp32"),
                                      (1, 129, 1, 32, 16, 64, "fp64")]:
    x = inputs(B, T, H, K, V)
    scale = 0.7
    out = run(x, ["--chunk", str(chunk), "--precision", prec], {"scale": scale})
    assert all(out[n].dtype == np.float32 for n in out)
    o, ht = recurrent(x["q"], x["k"], x["v"], x["g"], x["beta"], x["h0"], scale)
    e_o, e_h = rel(out["o"], o), rel(out["ht"], ht)
    # Directional derivative of L along a random direction of every input.
    names = ["q", "k", "v", "g", "beta", "h0"]
    u = {n: rng.standard_normal(x[n].shape) for n in names}
    grad = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "beta": "dbeta", "h0": "dh0"}
    analytic = sum(float(np.sum(out[grad[n]].astype(np.float64) * u[n])) for n in names)

    def L(y):
        o2, h2 = recurrent(y["q"], y["k"], y["v"], y["g"], y["beta"], y["h0"], scale)
        return np.sum(o2 * x["do"]) + np.sum(h2 * x["dht"])
    numeric = directional_derivative(L, x, u)
    e_g = abs(analytic - numeric) / abs(numeric)
    print(f"B{B} T{T} H{H} K{K} V{V} chunk {chunk} {prec}: o {e_o:.2e}, ht {e_h:.2e}, "
          f"directional gradient {e_g:.2e}")
    assert e_o < 1e-5 and e_h < 1e-5 and e_g < 1e-5

# Without h0/do/dht: only o and ht; the default scale is 1/sqrt(K).
x = inputs(1, 20, 2, 8, 8)
out = run({n: x[n].astype(np.float32) for n in ["q", "k", "v", "g", "beta"]})
assert sorted(out) == ["ht", "o"], sorted(out)
o, ht = recurrent(x["q"].astype(np.float32).astype(np.float64), x["k"].astype(np.float32).astype(np.float64),
                  x["v"].astype(np.float32).astype(np.float64), x["g"].astype(np.float32).astype(np.float64),
                  x["beta"].astype(np.float32).astype(np.float64), np.zeros((1, 2, 8, 8)), 1 / np.sqrt(8))
assert rel(out["o"], o) < 1e-5 and rel(out["ht"], ht) < 1e-5
# do alone: dh0 is written even without h0.
out = run({**{n: x[n] for n in ["q", "k", "v", "g", "beta"]}, "do": x["do"]})
assert "dh0" in out and out["dh0"].shape == (1, 2, 8, 8)

# Bad inputs name the dataset and the expected shape.
x = inputs(2, 10, 2, 8, 8)
err = run({n: x[n] for n in ["q", "k", "v", "g"]}, expect_ok=False)
assert "beta" in err and "[B,T,H]" in err, err
bad = dict(x)
bad["v"] = rng.standard_normal((3, 10, 2, 8))
err = run({n: bad[n] for n in ["q", "k", "v", "g", "beta"]}, expect_ok=False)
assert "'v'" in err and "[3,10,2,8]" in err, err
err = run({n: x[n] for n in ["q", "k", "v", "g", "beta"]}, ["--chunk", "48"], expect_ok=False)
assert "--chunk" in err, err
print("op_gated_delta: ok")
