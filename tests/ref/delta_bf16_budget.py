#!/usr/bin/env python3
"""Error budget of the bf16 CUDA gated delta rule, by emulation in float64 (numpy).

The chunked forward and backward of docs/design.md section 3.2 / section 3.3 for one head, where each intermediate that
the CUDA kernels store in bf16 (model/cuda/delta_cuda.h) can be rounded to bf16 on its own:
  in   q, k, v, dO (the op's bf16 inputs)    T    the triangular inverse (T = (I + A)^-1)
  WU   W and U                               h    the per-chunk entering states
  Vn   v_new                                 dVl  the intra-chunk part of dv_new
  dh   the per-chunk state gradients         dVn  dv_new
  D    the masked s (dO Vn^T) o Gam
and the fp32 intermediates that a kernel rounds to bf16 in shared memory as the operand of a
tensor-core product:
  P    Q K^T o Gam (lower), before P^T dO    dVb  T^T dv_new (the grad kernel's dA = -dVb Vn^T,
  M    dA o beta o Gam, before M K, M^T K         dKbg = -dVb h^T and dv = beta dVb)
The backward is written the way the CUDA grad kernel computes it (dA and dKbg from dVb, which
equals -T^T dT T^T and T^T dW of docs/design.md section 3.3). Every product is formed in float64 from the rounded
values (the kernels accumulate in fp32), so the printed errors are what each rounding contributes
to dq, dk, dv, dbeta, dg and to a per-head gate-parameter sum (sum_t dg_t g_t, the shape of
dA_log), against the unrounded run.

  delta_bf16_budget.py           the budget tables: model-like inputs (zero initial state, median
                                 of 4 seeds), then test_gpu_delta's cases (with h0, dht)
  delta_bf16_budget.py --check   the float64 backward against central finite differences of the
                                 token-by-token recurrence (exit status 1 above 1e-6)
"""
import sys

import numpy as np

FLAGS = ['in', 'T', 'WU', 'h', 'Vn', 'dVl', 'dh', 'dVn', 'D', 'P', 'dVb', 'M']


def bf16(x):
    """Round to the nearest bf16 (ties to even), returned as float64."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def chunked(q, k, v, g, beta, dO, s, C=64, rounded=frozenset(), h0=None, dht=None):
    """Gradients of sum(o * dO) + <S_T, dht> for q, k [T,K], v, dO [T,V], g, beta [T] and the
    initial state h0 [K,V] (None: zeros): dq, dk, dv, dg, dbeta, dh0."""
    rd = lambda name, x: bf16(x) if name in rounded else x
    n, K = q.shape
    V = v.shape[1]
    q, k, v, dO = (rd('in', x) for x in (q, k, v, dO))
    S = np.zeros((K, V)) if h0 is None else h0.copy()
    saved = []
    for c0 in range(0, n, C):  # forward: the per-chunk pieces the backward reads
        sl = slice(c0, min(n, c0 + C))
        Q, Kc, Vc, bc = q[sl], k[sl], v[sl], beta[sl]
        G = np.cumsum(g[sl])
        gam = np.exp(G)
        Gam = np.tril(np.exp(np.tril(G[:, None] - G[None, :])))  # exp(G_i - G_j), i >= j only
        KK = Kc @ Kc.T
        Tr = rd('T', np.linalg.inv(np.eye(len(G)) + np.tril(bc[:, None] * KK * Gam, -1)))
        W = rd('WU', Tr @ ((bc * gam)[:, None] * Kc))
        U = rd('WU', Tr @ (bc[:, None] * Vc))
        h = rd('h', S)
        Vn = rd('Vn', U - W @ h)
        r = np.exp(G[-1] - G)
        S = np.exp(G[-1]) * S + Kc.T @ (r[:, None] * Vn)
        saved.append((sl, Q, Kc, Vc, bc, dO[sl], G, gam, Gam, KK, Tr, W, h, Vn, r))
    dS = np.zeros((K, V)) if dht is None else dht.copy()
    out = {name: np.zeros_like(x) for name, x in (('dq', q), ('dk', k), ('dv', v), ('dg', g), ('dbeta', beta))}
    for sl, Q, Kc, Vc, bc, dOc, G, gam, Gam, KK, Tr, W, h, Vn, r in reversed(saved):
        QK = Q @ Kc.T
        dSs = rd('dh', dS)
        dVn = rd('dVn', rd('dVl', s * rd('P', np.tril(QK * Gam)).T @ dOc) + r[:, None] * (Kc @ dSs))
        dS_in = np.exp(G[-1]) * dS + s * Q.T @ (gam[:, None] * dOc) - W.T @ dVn
        D = rd('D', s * np.tril(dOc @ Vn.T) * Gam)
        dQ = s * gam[:, None] * (dOc @ h.T) + D @ Kc
        dK = r[:, None] * (Vn @ dSs.T) + D.T @ Q
        dVb = rd('dVb', Tr.T @ dVn)
        dKbg = -dVb @ h.T
        dK += (bc * gam)[:, None] * dKbg
        dA = np.tril(-dVb @ Vn.T, -1)
        M = rd('M', dA * bc[:, None] * Gam)
        dK += M @ Kc + M.T @ Kc
        db = gam * np.sum(dKbg * Kc, 1) + np.sum(dVb * Vc, 1) + np.sum(dA * KK * Gam, 1)
        d = np.sum((Kc @ dSs) * Vn, 1)  # the gate terms (docs/design.md section 3.3, step 5)
        dG = -d * r
        dG[-1] += gam[-1] * np.sum(h * dSs) + np.sum(d * r)
        dG += s * gam * np.sum((dOc @ h.T) * Q, 1)
        E = s * np.tril(dOc @ Vn.T) * np.tril(QK) * Gam
        F = dA * bc[:, None] * KK * Gam
        dG += E.sum(1) - E.sum(0) + F.sum(1) - F.sum(0) + np.sum(dKbg * (bc * gam)[:, None] * Kc, 1)
        out['dg'][sl] = np.cumsum(dG[::-1])[::-1]
        out['dq'][sl], out['dk'][sl], out['dv'][sl], out['dbeta'][sl] = dQ, dK, bc[:, None] * dVb, db
        dS = dS_in
    out['dh0'] = dS
    return out


def recurrent_loss(q, k, v, g, beta, dO, s, h0, dht):
    S = h0.copy()
    total = 0.0
    for t in range(q.shape[0]):
        S = np.exp(g[t]) * (S - beta[t] * np.outer(k[t], k[t] @ S)) + beta[t] * np.outer(k[t], v[t])
        total += s * (S.T @ q[t]) @ dO[t]
    return total + np.sum(S * dht)


def inputs(n, K, V, seed):
    """Model-like inputs: unit-norm q, k; g in [-0.3, 0]; beta = sigmoid(N(0, 1))."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, K))
    k = rng.standard_normal((n, K))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    v = rng.standard_normal((n, V))
    g = rng.uniform(-0.3, 0.0, n)
    beta = 1 / (1 + np.exp(-rng.standard_normal(n)))
    return q, k, v, g, beta, rng.standard_normal((n, V)), K ** -0.5


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def check():
    """Central differences (step 1e-6) of the recurrence for every gradient, chunk 16, T 40."""
    x = dict(zip(('q', 'k', 'v', 'g', 'beta', 'dO', 's'), inputs(40, 8, 6, 1)))
    rng = np.random.default_rng(2)
    x['h0'], x['dht'] = rng.uniform(-0.5, 0.5, (8, 6)), rng.uniform(-0.5, 0.5, (8, 6))
    f = lambda y: recurrent_loss(y['q'], y['k'], y['v'], y['g'], y['beta'], y['dO'], y['s'], y['h0'], y['dht'])
    got = chunked(x['q'], x['k'], x['v'], x['g'], x['beta'], x['dO'], x['s'], C=16, h0=x['h0'], dht=x['dht'])
    worst = 0.0
    for name in ('q', 'k', 'v', 'g', 'beta', 'h0'):
        fd = np.zeros_like(x[name])
        for i in np.ndindex(fd.shape):
            y = dict(x)
            y[name] = x[name].copy()
            y[name][i] += 1e-6
            lp = f(y)
            y[name][i] -= 2e-6
            fd[i] = (lp - f(y)) / 2e-6
        e = rel(got['d' + name], fd)
        worst = max(worst, e)
        print(f"d{name}: relative error vs finite differences {e:.1e}")
    print(f"worst {worst:.1e} (limit 1e-6): {'ok' if worst < 1e-6 else 'FAIL'}")
    return 0 if worst < 1e-6 else 1


def budget():
    cases = [(f, {f}) for f in FLAGS] + [('all', set(FLAGS)), ('all but in', set(FLAGS) - {'in'})]
    for n, K, V in [(45, 64, 64), (120, 64, 64), (512, 64, 64), (512, 128, 128)]:
        errs = {name: [] for name, _ in cases}
        for seed in range(4):
            q, k, v, g, beta, dO, s = inputs(n, K, V, seed)
            ref = chunked(q, k, v, g, beta, dO, s)
            for name, rounded in cases:
                o = chunked(q, k, v, g, beta, dO, s, rounded=frozenset(rounded))
                errs[name].append([rel(o[t], ref[t]) for t in ('dq', 'dk', 'dv', 'dbeta', 'dg')] +
                                  [abs(o['dg'] @ g - ref['dg'] @ g) / abs(ref['dg'] @ g)])
        print(f"T={n} K={K} V={V}, chunk 64: relative error against no rounding (median of 4 seeds)")
        print(f"  {'rounded in bf16':<16}" + ''.join(f"{c:>10}" for c in ('dq', 'dk', 'dv', 'dbeta', 'dg', 'sum dg*g')))
        for name, e in errs.items():
            print(f"  {name:<16}" + ''.join(f"{x:10.1e}" for x in np.median(np.array(e), 0)))


# test_gpu_delta's cases: B, T, H, K, V, with h0, with dht, g uniform in [gmin, 0)
GPU_TEST_CASES = [(1, 64, 1, 64, 64, 1, 1, -0.2), (2, 100, 2, 64, 64, 0, 0, -0.2), (1, 200, 2, 128, 128, 1, 1, -0.2),
                  (1, 150, 1, 256, 256, 1, 1, -0.2), (2, 77, 1, 64, 128, 0, 1, -0.2), (1, 130, 2, 128, 64, 1, 0, -0.2),
                  (1, 100, 2, 64, 64, 1, 1, -20.0), (1, 333, 1, 256, 64, 1, 1, -0.1)]


def budget_gpu_cases():
    """test_gpu_delta's shapes and input distributions (q, k, v, dO already bf16; h0, dht in
    [-0.5, 0.5)): every modelled rounding together, norm-wise over the B x H heads, and the three
    that cost dg the most."""
    print("test_gpu_delta's cases, every modelled rounding (inputs already bf16): relative error")
    for B, n, H, K, V, with_h0, with_dht, gmin in GPU_TEST_CASES:
        sq = {}
        for head in range(B * H):
            rng = np.random.default_rng(10 * n + head)
            q = rng.uniform(-1, 1, (n, K))
            k = rng.uniform(-1, 1, (n, K))
            q /= np.linalg.norm(q, axis=1, keepdims=True)
            k /= np.linalg.norm(k, axis=1, keepdims=True)
            v, g, beta, dO = rng.uniform(-1, 1, (n, V)), rng.uniform(gmin, 0, n), rng.uniform(0.05, 0.95, n), \
                rng.uniform(-1, 1, (n, V))
            q, k, v, dO = (bf16(x) for x in (q, k, v, dO))
            h0 = rng.uniform(-0.5, 0.5, (K, V)) if with_h0 else None
            dht = rng.uniform(-0.5, 0.5, (K, V)) if with_dht else None
            ref = chunked(q, k, v, g, beta, dO, K ** -0.5, h0=h0, dht=dht)
            for name in FLAGS[1:] + ['all']:
                rounded = frozenset(FLAGS[1:] if name == 'all' else [name])
                o = chunked(q, k, v, g, beta, dO, K ** -0.5, rounded=rounded, h0=h0, dht=dht)
                for t in ('dq', 'dk', 'dv', 'dbeta', 'dg', 'dh0'):
                    e = sq.setdefault((name, t), [0.0, 0.0])
                    e[0] += np.sum((o[t] - ref[t]) ** 2)
                    e[1] += np.sum(ref[t] ** 2)
        err = lambda name, t: np.sqrt(sq[(name, t)][0] / sq[(name, t)][1])
        top = sorted(FLAGS[1:], key=lambda f: -err(f, 'dg'))[:3]
        print(f"  B{B} T{n} H{H} K{K} V{V}{' h0' if with_h0 else ''}{' dht' if with_dht else ''} g >= {gmin}: " +
              " ".join(f"{t} {err('all', t):.1e}" for t in ('dq', 'dk', 'dv', 'dbeta', 'dg', 'dh0')) +
              "; dg most from " + ", ".join(f"{f} {err(f, 'dg'):.1e}" for f in top))


if __name__ == '__main__':
    if '--check' in sys.argv[1:]:
        sys.exit(check())
    budget()
    budget_gpu_cases()
