#!/usr/bin/env python3
"""Scaling-law analysis of finished gdn runs (docs/scaling.md).

usage: analyze.py RUNS_DIR... [--out DIR] [--bootstrap N] [--seed S] [--no-plots]

Collects every run directory with a summary.json under the RUNS_DIRs (a run directory itself, a
sweep directory made by gdn sweep plan, or a folder of run directories), then per mixer pattern:
  - fits L(N, D) = E + A / N^alpha + B / D^beta to the final validation loss (N non-embedding
    parameters, D training tokens) by the third approach of Hoffmann et al. (2022): Huber loss
    (delta 1e-3) on log L - log(exp(a - alpha log N) + exp(b - beta log D) + exp(e)), minimised
    with L-BFGS-B from the best points of a grid of starts;
  - bootstraps the fit over runs (resampled with replacement) for 95% intervals;
  - derives the compute-optimal frontier: N_opt(C) minimises L(N, C / f(N)), f(N) the training
    FLOPs per token interpolated (log-log) between the runs' own values, so the LM head and the
    mixer's terms count; D_opt = C / f(N_opt); the slopes of N_opt and D_opt against C. Also the
    law's closed forms for C = 6 N D: N_opt ~ C^a, a = beta / (alpha + beta), D_opt ~ C^b,
    b = alpha / (alpha + beta), L_opt - E ~ C^-gamma, gamma = alpha beta / (alpha + beta);
  - fits L(C) = E_c + A_c C^-gamma_c to the runs on the empirical frontier (lower envelope).
Writes DIR/fit.json and DIR/loss_curves.png, isoflop.png, frontier.png, residuals.png. When a run
of a learning-rate grid repeats a point (mixer, N, D, seed), the best of its learning rates counts.
Exit status: 0, 1 when no mixer could be fitted (no finished runs), 2 for bad usage or a
RUNS_DIR that does not exist.
"""
import argparse
import contextlib
import json
import math
import os
import sys

# Fortran's standard output unbuffered (read when libgfortran loads, with numpy), so that
# _quiet_fortran's redirection catches it rather than a flush at exit.
os.environ.setdefault("GFORTRAN_UNBUFFERED_PRECONNECTED", "y")
import numpy as np  # noqa: E402

HUBER_DELTA = 1e-3
FIELDS = ("mixers", "params_non_embedding", "tokens", "flops", "final_val_loss")


class UsageError(Exception):
    pass


def warn(msg):
    print(f"analyze: warning: {msg}", file=sys.stderr)


# ---- collecting runs -------------------------------------------------------------------------
def _read_summary(run_dir):
    """(summary dict, None) or (None, why)."""
    path = os.path.join(run_dir, "summary.json")
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"{path}: unreadable ({e})"
    if not isinstance(s, dict):
        return None, f"{path}: not a JSON object"
    for k in FIELDS:
        if k not in s or s[k] is None:
            why = "no validation loss (the run had no held-out data: set val_tokens)" if k == "final_val_loss" else f"lacks '{k}'"
            return None, f"{path}: {why}"
    try:
        vals = [float(s[k]) for k in FIELDS[1:]]
    except (TypeError, ValueError):
        return None, f"{path}: a non-numeric value among {', '.join(FIELDS[1:])}"
    if not all(math.isfinite(v) and v > 0 for v in vals):
        return None, f"{path}: parameters, tokens, FLOPs and loss must be positive and finite"
    s["dir"] = run_dir
    return s, None


def _is_run_dir(d):
    return any(os.path.exists(os.path.join(d, f)) for f in ("summary.json", "config.json", "metrics.jsonl"))


def collect(dirs):
    """Finished runs and (dir, why) for the run directories that were skipped."""
    runs, skipped, seen = [], [], set()
    for top in dirs:
        if not os.path.isdir(top):
            raise UsageError(f"RUNS_DIR {top}: no such directory")
        candidates = [top] if _is_run_dir(top) else []
        for base in (top, os.path.join(top, "runs")):
            if os.path.isdir(base) and not _is_run_dir(base):
                candidates += [os.path.join(base, e) for e in sorted(os.listdir(base))
                               if os.path.isdir(os.path.join(base, e))]
        found = 0
        for d in candidates:
            real = os.path.realpath(d)
            if real in seen or not _is_run_dir(d):
                continue
            seen.add(real)
            found += 1
            if not os.path.exists(os.path.join(d, "summary.json")):
                skipped.append((d, "not finished (no summary.json): still training, interrupted, or failed"))
                continue
            s, why = _read_summary(d)
            if s is None:
                skipped.append((d, why))
            else:
                runs.append(s)
        if found == 0:
            warn(f"{top}: no run directories (summary.json, config.json or metrics.jsonl) in it, "
                 f"its subfolders or its runs/ folder")
    return runs, skipped


def best_over_lr(runs):
    """One run per (mixer, N, D, seed): the lowest final loss over a learning-rate grid."""
    best = {}
    for r in runs:
        key = (r["mixers"], int(r["params_non_embedding"]), int(r["tokens"]), r.get("seed"))
        if key not in best or r["final_val_loss"] < best[key]["final_val_loss"]:
            best[key] = r
    return list(best.values())


# ---- the fit ---------------------------------------------------------------------------------
def _objective(theta, logN, logD, logL):
    """Huber loss of the log-residuals and its gradient in theta = (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = theta
    t = np.stack([a - alpha * logN, b - beta * logD, np.full_like(logN, e)])
    m = t.max(axis=0)
    w = np.exp(t - m)
    s = w.sum(axis=0)
    lse = m + np.log(s)
    w /= s
    r = lse - logL
    small = np.abs(r) <= HUBER_DELTA
    # scaled by 1 / delta^2 (the same minimum): the optimiser's tolerances then mean something
    loss = np.where(small, 0.5 * r * r, HUBER_DELTA * (np.abs(r) - 0.5 * HUBER_DELTA)).sum() / HUBER_DELTA ** 2
    dr = np.where(small, r, HUBER_DELTA * np.sign(r)) / HUBER_DELTA ** 2
    grad = np.array([(dr * w[0]).sum(), (dr * w[1]).sum(), (dr * w[2]).sum(),
                     -(dr * w[0] * logN).sum(), -(dr * w[1] * logD).sum()])
    return loss, grad


def _grid():
    """The starts of Hoffmann et al.: alpha, beta in 0..2, e in -1..1, a, b in 0..25."""
    ab = np.arange(0.0, 2.01, 0.5)
    e = np.arange(-1.0, 1.01, 0.5)
    ac = np.arange(0.0, 25.1, 5.0)
    g = np.array(np.meshgrid(ac, ac, e, ab, ab, indexing="ij")).reshape(5, -1).T
    return g


GRID = _grid()
BOUNDS = [(-20.0, 80.0), (-20.0, 80.0), (-10.0, 10.0), (1e-3, 4.0), (1e-3, 4.0)]


def _grid_losses(logN, logD, logL):
    a, b, e, alpha, beta = (GRID[:, i:i + 1] for i in range(5))
    t1 = a - alpha * logN[None, :]
    t2 = b - beta * logD[None, :]
    t3 = np.broadcast_to(e, t1.shape)
    m = np.maximum(np.maximum(t1, t2), t3)
    lse = m + np.log(np.exp(t1 - m) + np.exp(t2 - m) + np.exp(t3 - m))
    r = np.abs(lse - logL[None, :])
    return np.where(r <= HUBER_DELTA, 0.5 * r * r, HUBER_DELTA * (r - 0.5 * HUBER_DELTA)).sum(axis=1)


@contextlib.contextmanager
def _quiet_fortran():
    """Some SciPy builds of L-BFGS-B write line-search notes ("ascent direction in projection gd")
    straight to file descriptor 1 from Fortran; keep them out of the report (unbuffered: see the
    environment set before numpy is imported)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def fit_law(N, D, L, starts=8, extra_start=None):
    """theta = (a, b, e, alpha, beta) minimising the Huber objective, from the best grid starts."""
    from scipy.optimize import minimize
    logN, logD, logL = np.log(N), np.log(D), np.log(L)
    order = np.argsort(_grid_losses(logN, logD, logL))[:starts]
    inits = [GRID[i] for i in order]
    if extra_start is not None:
        inits.append(np.asarray(extra_start))
    best = None
    for x0 in inits:
        with _quiet_fortran():
            res = minimize(_objective, x0, args=(logN, logD, logL), jac=True, method="L-BFGS-B", bounds=BOUNDS,
                           options={"maxiter": 1000, "ftol": 1e-12, "gtol": 1e-8})
        if best is None or res.fun < best.fun:
            best = res
    return best.x


def law_params(theta):
    a, b, e, alpha, beta = theta
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}


def derived(p):
    """Compute-optimal exponents and constants of a fitted law (C measured in N D units)."""
    al, be = p["alpha"], p["beta"]
    G = (al * p["A"] / (be * p["B"])) ** (1.0 / (al + be))
    return {"a": be / (al + be), "b": al / (al + be), "gamma": al * be / (al + be), "G": G,
            "K": p["A"] * G ** -al + p["B"] * G ** be}


def predict(p, N, D):
    return p["E"] + p["A"] / np.power(N, p["alpha"]) + p["B"] / np.power(D, p["beta"])


def frontier(p, C, k):
    """N_opt, D_opt, L_opt at compute C (FLOPs) for a law p and k FLOPs per N D."""
    d = derived(p)
    x = np.asarray(C, dtype=float) / k
    n_opt = d["G"] * x ** d["a"]
    d_opt = x / n_opt
    return n_opt, d_opt, predict(p, n_opt, d_opt)


class FlopsPerToken:
    """f(N): training FLOPs per token of the mixer's model with N non-embedding parameters,
    interpolated in log-log between the runs' own values (summary.json: flops / tokens) and
    extended along the end segments. It carries what C = k N D leaves out: the LM head and the
    mixer's terms, which at small N and a large vocabulary dominate."""

    def __init__(self, N, fpt):
        xs = {}
        for n, f in zip(N, fpt):
            xs.setdefault(n, []).append(math.log(f))
        self.x = np.log(np.array(sorted(xs)))
        self.y = np.array([np.mean(xs[n]) for n in sorted(xs)])

    def __call__(self, n):
        ln = np.log(np.asarray(n, dtype=float))
        if len(self.x) == 1:
            return np.exp(self.y[0] + (ln - self.x[0]))  # proportional to N
        y = np.interp(ln, self.x, self.y)
        lo = (self.y[1] - self.y[0]) / (self.x[1] - self.x[0])
        hi = (self.y[-1] - self.y[-2]) / (self.x[-1] - self.x[-2])
        y = np.where(ln < self.x[0], self.y[0] + lo * (ln - self.x[0]), y)
        y = np.where(ln > self.x[-1], self.y[-1] + hi * (ln - self.x[-1]), y)
        return np.exp(y)


def frontier_numeric(p, C, f, n_lo, n_hi):
    """N_opt, D_opt, L_opt at each compute C with C = f(N) D: the lowest L(N, C / f(N)) over a
    log grid of N from n_lo to n_hi (a two-decade margin around the runs' sizes)."""
    Ns = np.logspace(math.log10(n_lo), math.log10(n_hi), 600)
    fN = f(Ns)
    out = []
    for c in np.atleast_1d(C):
        Ls = predict(p, Ns, c / fN)
        i = int(np.argmin(Ls))
        out.append((Ns[i], c / fN[i], Ls[i]))
    a = np.array(out)
    return a[:, 0], a[:, 1], a[:, 2]


def slope(x, y):
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def bootstrap(N, D, L, theta, reps, rng):
    thetas = []
    n = len(N)
    for _ in range(reps):
        idx = rng.integers(0, n, n)
        if len(np.unique(N[idx])) < 2 or len(np.unique(D[idx])) < 2:
            continue  # a resample without two sizes and two budgets identifies nothing
        thetas.append(fit_law(N[idx], D[idx], L[idx], starts=1, extra_start=theta))
    return np.array(thetas)


def interval(values, point):
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return {"value": point, "lo": None, "hi": None}
    return {"value": point, "lo": float(np.percentile(v, 2.5)), "hi": float(np.percentile(v, 97.5))}


def empirical_frontier(C, L):
    """Indices of the runs no cheaper (or equal-cost) run beats, by compute."""
    idx, best = [], math.inf
    for i in np.argsort(C, kind="stable"):
        if L[i] < best:
            idx.append(int(i))
            best = L[i]
    return idx


def fit_compute_law(C, L):
    """L(C) = E_c + A_c C^-gamma_c on frontier points (Huber on log-residuals); None when < 3."""
    from scipy.optimize import minimize
    if len(C) < 3:
        return None
    logC, logL = np.log(C), np.log(L)

    def obj(th):
        a, e, g = th
        t1, t2 = a - g * logC, np.full_like(logC, e)
        m = np.maximum(t1, t2)
        r = m + np.log(np.exp(t1 - m) + np.exp(t2 - m)) - logL
        h = np.where(np.abs(r) <= HUBER_DELTA, 0.5 * r * r, HUBER_DELTA * (np.abs(r) - 0.5 * HUBER_DELTA))
        return h.sum() / HUBER_DELTA ** 2  # scaled as in _objective

    best = None
    for a0 in (0.0, 5.0, 10.0, 20.0):
        for e0 in (-1.0, 0.0, 1.0):
            for g0 in (0.05, 0.3, 1.0):
                with _quiet_fortran():
                    res = minimize(obj, [a0, e0, g0], method="L-BFGS-B",
                                   bounds=[(-20, 80), (-10, 10), (1e-4, 3.0)])
                if best is None or res.fun < best.fun:
                    best = res
    a, e, g = best.x
    return {"E": math.exp(e), "A": math.exp(a), "gamma": g}


def analyse_mixer(runs, reps, rng):
    N = np.array([float(r["params_non_embedding"]) for r in runs])
    D = np.array([float(r["tokens"]) for r in runs])
    L = np.array([float(r["final_val_loss"]) for r in runs])
    C = np.array([float(r["flops"]) for r in runs])
    k = float(np.median(C / (N * D)))
    theta = fit_law(N, D, L)
    p = law_params(theta)
    d = derived(p)
    boots = bootstrap(N, D, L, theta, reps, rng) if reps > 0 else np.zeros((0, 5))
    bp = [law_params(t) for t in boots]
    bd = [derived(q) for q in bp]
    out = {
        "n_runs": len(runs),
        "n_sizes": int(len(np.unique(N))),
        "n_budgets": int(len(np.unique(D))),
        "underdetermined": bool(len(runs) < 5 or len(np.unique(N)) < 2 or len(np.unique(D)) < 2),
        "bootstrap_fits": int(len(boots)),
        "params": {name: interval([q[name] for q in bp], p[name]) for name in ("E", "A", "B", "alpha", "beta")},
        "flops_per_ND": k,
    }
    f = FlopsPerToken(N, C / D)
    n_lo, n_hi = N.min() / 100, N.max() * 100
    Cg = np.logspace(math.log10(C.min()) - 0.5, math.log10(C.max()) + 0.5, 9)
    n_opt, d_opt, l_opt = frontier_numeric(p, Cg, f, n_lo, n_hi)
    bf = [frontier_numeric(q, Cg, f, n_lo, n_hi) for q in bp]
    band = np.array([b[2] for b in bf]) if bf else None
    table = []
    for i, c in enumerate(Cg):
        row = {"C": float(c), "N_opt": float(n_opt[i]), "D_opt": float(d_opt[i]), "L_opt": float(l_opt[i])}
        if bf:
            row["L_lo"], row["L_hi"] = (float(x) for x in np.percentile(band[:, i], [2.5, 97.5]))
            row["N_lo"], row["N_hi"] = (float(x) for x in np.percentile([b[0][i] for b in bf], [2.5, 97.5]))
        table.append(row)
    out["compute_optimal"] = {
        "method": "N_opt(C) minimises L(N, C / f(N)), f(N) the FLOPs per token interpolated between the runs",
        "N_opt_slope": interval([slope(Cg, b[0]) for b in bf], slope(Cg, n_opt)),
        "D_opt_slope": interval([slope(Cg, b[1]) for b in bf], slope(Cg, d_opt)),
        "table": table,
        "law_exponents": {
            "note": "closed forms for C = k N D (k = 6 plus nothing else): N_opt ~ C^a, D_opt ~ C^b, "
                    "L_opt - E ~ C^-gamma",
            "a": interval([q["a"] for q in bd], d["a"]),
            "b": interval([q["b"] for q in bd], d["b"]),
            "gamma": interval([q["gamma"] for q in bd], d["gamma"]),
        },
    }
    fi = empirical_frontier(C, L)
    out["empirical_frontier"] = {"runs": [os.path.basename(runs[i]["dir"]) for i in fi],
                                 "fit": fit_compute_law(C[fi], L[fi])}
    res = np.log(L) - np.log(predict(p, N, D))
    out["residual_rms"] = float(np.sqrt(np.mean(res ** 2)))
    return out, {"N": N, "D": D, "L": L, "C": C, "p": p, "bp": bp, "k": k, "f": f, "n_lo": n_lo, "n_hi": n_hi,
                 "res": res, "Cg": Cg, "band": band}


# ---- plots -----------------------------------------------------------------------------------
def read_curve(run_dir):
    toks, loss, vt, vl = [], [], [], []
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for line in f:
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(m, dict) or not isinstance(m.get("tokens"), (int, float)):
                    continue
                if isinstance(m.get("loss"), (int, float)):
                    toks.append(m["tokens"])
                    loss.append(m["loss"])
                if isinstance(m.get("val_loss"), (int, float)):
                    vt.append(m["tokens"])
                    vl.append(m["val_loss"])
    except OSError:
        pass
    return toks, loss, vt, vl


def plot_all(out_dir, by_mixer, fits):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mixers = sorted(fits)
    colors = {m: plt.cm.tab10(i % 10) for i, m in enumerate(sorted(by_mixer))}
    files = []

    def grid(n):
        cols = min(n, 3)
        rows = (n + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
        for ax in axes.flat[n:]:
            ax.axis("off")
        return fig, list(axes.flat)

    # loss curves: training loss (lines) and validation loss (points) against tokens, by size
    fig, axes = grid(len(by_mixer))
    for ax, m in zip(axes, sorted(by_mixer)):
        runs = sorted(by_mixer[m], key=lambda r: r["params_non_embedding"])
        Ns = np.log10([r["params_non_embedding"] for r in runs])
        span = (Ns.max() - Ns.min()) or 1.0
        for r, ln in zip(runs, Ns):
            c = plt.cm.viridis((ln - Ns.min()) / span)
            t, l, vt, vl = read_curve(r["dir"])
            if t:
                ax.plot(t, l, color=c, lw=0.8, alpha=0.7)
            if vt:
                ax.plot(vt, vl, "o", color=c, ms=3)
        ax.set_xscale("log")
        ax.set_xlabel("tokens")
        ax.set_ylabel("loss (lines: training, points: validation)")
        ax.set_title(f"{m}: {len(runs)} runs, colour = N")
    fig.tight_layout()
    files.append(_save(fig, out_dir, "loss_curves.png"))

    # isoFLOP profiles: final loss against N, runs binned by compute (half decades)
    if mixers:
        fig, axes = grid(len(mixers))
        for ax, m in zip(axes, mixers):
            f = fits[m]
            bins = np.round(np.log10(f["C"]) * 2) / 2
            ub = np.unique(bins)
            for j, bc in enumerate(ub):
                c = plt.cm.plasma(j / max(1, len(ub) - 1))
                sel = bins == bc
                ax.plot(f["N"][sel], f["L"][sel], "o", color=c, label=f"C~1e{bc:g}")
                Cb = 10 ** bc
                Nline = np.logspace(math.log10(f["N"].min()) - 0.3, math.log10(f["N"].max()) + 0.3, 60)
                ax.plot(Nline, predict(f["p"], Nline, Cb / f["f"](Nline)), "-", color=c, lw=1)
                n_opt = frontier_numeric(f["p"], [Cb], f["f"], f["n_lo"], f["n_hi"])[0][0]
                ax.axvline(n_opt, color=c, ls=":", lw=0.8)
            ax.set_ylim(*_data_ylim(f["L"]))
            ax.set_xscale("log")
            ax.set_xlabel("N (non-embedding parameters)")
            ax.set_ylabel("final validation loss")
            ax.set_title(f"{m}: isoFLOP profiles (fit: lines, N_opt: dotted)")
            ax.legend(fontsize=7)
        fig.tight_layout()
        files.append(_save(fig, out_dir, "isoflop.png"))

    # the frontier per mixer with the fitted laws and their bootstrap bands
    fig, ax = plt.subplots(figsize=(7, 5))
    for m in sorted(by_mixer):
        rs = by_mixer[m]
        ax.plot([r["flops"] for r in rs], [r["final_val_loss"] for r in rs], ".", color=colors[m], alpha=0.35)
        if m in fits:
            f = fits[m]
            ax.plot(f["Cg"], frontier_numeric(f["p"], f["Cg"], f["f"], f["n_lo"], f["n_hi"])[2], "-", color=colors[m],
                    label=f"{m}: L_opt(C)")
            if f["band"] is not None and len(f["band"]):
                lo, hi = np.percentile(f["band"], [2.5, 97.5], axis=0)
                ax.fill_between(f["Cg"], lo, hi, color=colors[m], alpha=0.15)
            fi = empirical_frontier(f["C"], f["L"])
            ax.plot(f["C"][fi], f["L"][fi], "o", color=colors[m], mfc="none")
    ax.set_ylim(*_data_ylim([r["final_val_loss"] for rs in by_mixer.values() for r in rs]))
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs C")
    ax.set_ylabel("final validation loss")
    ax.set_title("compute-optimal frontier (points: runs, circles: lower envelope)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(_save(fig, out_dir, "frontier.png"))

    # residuals of the fitted L(N, D)
    fig, ax = plt.subplots(figsize=(7, 4))
    for m in mixers:
        f = fits[m]
        ax.plot(f["C"], f["res"], "o", color=colors[m], label=m, ms=4)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("training FLOPs C")
    ax.set_ylabel("log L - log L_fit(N, D)")
    ax.set_title("residuals of the fitted laws")
    if mixers:
        ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(_save(fig, out_dir, "residuals.png"))
    plt.close("all")
    return files


def _data_ylim(L):
    """The runs' loss range with a margin: fitted curves far outside it would hide the data."""
    lo, hi = float(np.min(L)), float(np.max(L))
    pad = 0.15 * (hi - lo) if hi > lo else 0.05 * abs(hi) + 1e-3
    return lo - pad, hi + pad


def _save(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)
    return name


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, allow_nan=False, default=float)
        f.write("\n")
    os.replace(tmp, path)


def _clean(x):
    """NaN/inf -> None for strict JSON."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("runs_dirs", nargs="+", metavar="RUNS_DIR")
    ap.add_argument("--out", help="output directory (default: FIRST_RUNS_DIR/analysis)")
    ap.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples (default 200; 0: none)")
    ap.add_argument("--seed", type=int, default=0, help="bootstrap random seed")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    if args.bootstrap < 0:
        print("analyze: --bootstrap must be >= 0", file=sys.stderr)
        return 2
    try:
        runs, skipped = collect(args.runs_dirs)
    except UsageError as e:
        print(f"analyze: {e}", file=sys.stderr)
        return 2
    for d, why in skipped:
        warn(f"skipped {d}: {why}")
    if not runs:
        print(f"analyze: no finished runs (run directories with a valid summary.json) under "
              f"{', '.join(args.runs_dirs)}; {len(skipped)} run directories skipped (see above). Finish the "
              f"sweep first (gdn sweep run DIR).", file=sys.stderr)
        return 1
    out_dir = args.out or os.path.join(args.runs_dirs[0], "analysis")
    os.makedirs(out_dir, exist_ok=True)
    pts = best_over_lr(runs)
    by_mixer = {}
    for r in pts:
        by_mixer.setdefault(r["mixers"], []).append(r)
    rng = np.random.default_rng(args.seed)
    result = {"version": 1, "runs_dirs": args.runs_dirs, "n_runs": len(runs), "n_points": len(pts),
              "skipped": [{"dir": d, "why": w} for d, w in skipped],
              "definitions": {"L": "final_val_loss (nats per token)", "N": "params_non_embedding",
                              "D": "tokens", "C": "flops of summary.json (6 N_matmul D + mixer terms)",
                              "law": "L(N, D) = E + A / N^alpha + B / D^beta",
                              "method": f"Huber (delta {HUBER_DELTA}) on log residuals, L-BFGS-B from the best "
                                        f"8 of {len(GRID)} grid starts",
                              "intervals": f"95% percentile bootstrap over runs ({args.bootstrap} resamples)"},
              "mixers": {}}
    fits = {}
    for m in sorted(by_mixer):
        rs = by_mixer[m]
        if len(rs) < 3 or len({r["params_non_embedding"] for r in rs}) < 2 or len({r["tokens"] for r in rs}) < 2:
            warn(f"mixer {m}: {len(rs)} points; a fit needs at least 3 with 2 sizes and 2 budgets: not fitted")
            result["mixers"][m] = {"n_runs": len(rs), "fitted": False}
            continue
        if len(rs) < 5:
            warn(f"mixer {m}: {len(rs)} points for 5 parameters: the fit is not identified (see the intervals)")
        summary, fits[m] = analyse_mixer(rs, args.bootstrap, rng)
        summary["fitted"] = True
        result["mixers"][m] = summary
    # which mixer is lowest at each compute of the common range
    if len(fits) >= 2:
        lo = max(min(f["C"]) for f in fits.values())
        hi = min(max(f["C"]) for f in fits.values())
        if hi > lo:
            result["winners"] = []
            for c in np.logspace(math.log10(lo), math.log10(hi), 6):
                ls = {m: float(frontier_numeric(f["p"], [c], f["f"], f["n_lo"], f["n_hi"])[2][0])
                      for m, f in fits.items()}
                w = min(ls, key=ls.get)
                result["winners"].append({"C": float(c), "mixer": w, "L_opt": ls})
    result["plots"] = [] if args.no_plots else plot_all(out_dir, by_mixer, fits)
    _write_json(os.path.join(out_dir, "fit.json"), _clean(result))
    for m, s in result["mixers"].items():
        if not s.get("fitted"):
            continue
        p, co = s["params"], s["compute_optimal"]

        def fmt(v):
            return f"{v['value']:.4g} [{v['lo']:.4g}, {v['hi']:.4g}]" if v["lo"] is not None else f"{v['value']:.4g}"
        le = co["law_exponents"]
        print(f"{m}: {s['n_runs']} runs: E {fmt(p['E'])}, alpha {fmt(p['alpha'])}, beta {fmt(p['beta'])}; "
              f"N_opt ~ C^{fmt(co['N_opt_slope'])}, D_opt ~ C^{fmt(co['D_opt_slope'])} over the runs' range "
              f"(for C = 6ND: a {fmt(le['a'])}, b {fmt(le['b'])}, gamma {fmt(le['gamma'])})")
    print(f"analyze: {len(runs)} runs, {len(fits)} mixer(s) fitted; wrote {out_dir}/fit.json"
          + (f" and {', '.join(result['plots'])}" if result["plots"] else ""))
    return 0 if fits else 1


if __name__ == "__main__":
    sys.exit(main())
