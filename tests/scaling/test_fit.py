#!/usr/bin/env python3
"""jobs/scaling/analyze.py on synthetic runs: runs generated from a known law L(N, D) with noise
must give back its parameters within the fitter's own bootstrap intervals; the whole command
(summaries in run directories -> fit.json and the plots) works and reports skipped runs; missing,
empty and unfinished run directories give clear errors."""
import importlib.util
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("analyze", os.path.join(HERE, "..", "..", "jobs", "scaling", "analyze.py"))
analyze = importlib.util.module_from_spec(spec)
spec.loader.exec_module(analyze)

TRUE = {"E": 1.7, "A": 400.0, "alpha": 0.34, "B": 410.0, "beta": 0.28}
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def synthetic(rng, sigma=0.004):
    N = np.repeat(np.logspace(6, 8.5, 6), 6)
    D = np.tile(np.logspace(8, 10.5, 6), 6)
    L = analyze.predict(TRUE, N, D) * np.exp(sigma * rng.standard_normal(len(N)))
    return N, D, L


def test_recovery():
    rng = np.random.default_rng(7)
    N, D, L = synthetic(rng)
    t0 = time.time()
    theta = analyze.fit_law(N, D, L)
    p = analyze.law_params(theta)
    boots = analyze.bootstrap(N, D, L, theta, 50, rng)
    bp = [analyze.law_params(t) for t in boots]
    print(f"fit and {len(boots)} bootstrap fits in {time.time() - t0:.1f} s")
    for name in ("E", "A", "alpha", "B", "beta"):
        iv = analyze.interval([q[name] for q in bp], p[name])
        check(iv["lo"] <= TRUE[name] <= iv["hi"],
              f"{name}: true {TRUE[name]:g} within [{iv['lo']:.4g}, {iv['hi']:.4g}] (fit {iv['value']:.4g})")
    d_true = analyze.derived(TRUE)
    bd = [analyze.derived(q) for q in bp]
    for name in ("a", "b", "gamma"):
        iv = analyze.interval([q[name] for q in bd], analyze.derived(p)[name])
        check(iv["lo"] <= d_true[name] <= iv["hi"],
              f"{name}: true {d_true[name]:.4f} within [{iv['lo']:.4f}, {iv['hi']:.4f}]")
    # the intervals say something: exponents to within 0.1
    check(abs(p["alpha"] - TRUE["alpha"]) < 0.1 and abs(p["beta"] - TRUE["beta"]) < 0.1, "exponents within 0.1")
    # the frontier formulas: at N_opt, D_opt the loss is lowest on the isoFLOP line
    C, k = 1e20, 6.0
    n_opt, d_opt, l_opt = analyze.frontier(TRUE, [C], k)
    Ns = n_opt[0] * np.array([0.5, 0.8, 1.25, 2.0])
    check(np.all(analyze.predict(TRUE, Ns, C / (k * Ns)) > l_opt[0]), "L_opt is the minimum of its isoFLOP line")
    check(abs(k * n_opt[0] * d_opt[0] / C - 1) < 1e-12, "N_opt D_opt k = C")
    # the numeric frontier (C = f(N) D, f interpolated between runs) agrees with the closed form
    # when f(N) = 6 N
    f = analyze.FlopsPerToken(N, 6.0 * N)
    n_num, d_num, l_num = analyze.frontier_numeric(TRUE, [C], f, 1e4, 1e12)
    check(abs(n_num[0] / n_opt[0] - 1) < 0.03 and abs(l_num[0] / l_opt[0] - 1) < 1e-4,
          f"numeric N_opt {n_num[0]:.4g} ~ closed form {n_opt[0]:.4g}")
    Cg = np.logspace(18, 22, 9)
    sl = analyze.slope(Cg, analyze.frontier_numeric(TRUE, Cg, f, 1e4, 1e14)[0])
    check(abs(sl - d_true["a"]) < 0.01, f"N_opt slope {sl:.4f} ~ a {d_true['a']:.4f}")
    # f(N) of a large vocabulary: the LM head (6 x 50257 x d) dominates small models
    d_model = np.array([64.0, 128, 256, 512])
    Nne = 12 * d_model ** 2 * 4
    fpt = 6 * (Nne + 50257 * d_model)
    fi = analyze.FlopsPerToken(Nne, fpt)
    check(np.allclose(fi(Nne), fpt) and fi(Nne[-1] * 4) > fpt[-1], "f(N) through the runs, extended past them")
    # L(C) on frontier points: exact data give back E_c, A_c, gamma_c
    Cs = np.logspace(15, 20, 8)
    fc = analyze.fit_compute_law(Cs, 1.5 + 300.0 * Cs ** -0.15)
    check(abs(fc["E"] / 1.5 - 1) < 1e-3 and abs(fc["A"] / 300 - 1) < 1e-2 and abs(fc["gamma"] - 0.15) < 1e-3,
          f"L(C) = E_c + A_c C^-gamma_c recovered: {fc}")


def write_run(root, name, N, D, L, mixer="G", curve=True):
    d = os.path.join(root, "runs", name)
    os.makedirs(d)
    s = {"mixers": mixer, "params_non_embedding": int(N), "params_total": int(N * 1.1), "tokens": int(D),
         "flops": 6.0 * N * D, "final_val_loss": float(L), "best_val_loss": float(L), "steps": 10, "seed": 1}
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(s, f)
    if curve:
        with open(os.path.join(d, "metrics.jsonl"), "w") as f:
            for i in range(1, 11):
                t = D * i / 10
                f.write(json.dumps({"step": i, "loss": L + 1.0 / i, "tokens": int(t), "time_s": i,
                                    **({"val_loss": L + 0.5 / i} if i % 5 == 0 else {})}) + "\n")
    return d


def test_command():
    rng = np.random.default_rng(3)
    N, D, L = synthetic(rng, 0.01)
    with tempfile.TemporaryDirectory() as root:
        for i in range(0, len(N), 2):  # 18 runs of G, 9 of another mixer
            write_run(root, f"G_{i}", N[i], D[i], L[i])
            if i % 4 == 0:
                write_run(root, f"A_{i}", N[i], D[i], L[i] * 1.05, mixer="A", curve=False)
        os.makedirs(os.path.join(root, "runs", "partial"))
        open(os.path.join(root, "runs", "partial", "config.json"), "w").write("{}")
        bad = write_run(root, "corrupt", 1e6, 1e8, 3.0)
        open(os.path.join(bad, "summary.json"), "w").write('{"mixers": "G", "tok')
        out = os.path.join(root, "out")
        rc = analyze.main([root, "--out", out, "--bootstrap", "10"])
        check(rc == 0, f"analyze exits 0 (got {rc})")
        fit = json.load(open(os.path.join(out, "fit.json")))
        check(fit["n_runs"] == 27, f"27 runs collected (got {fit['n_runs']})")
        skipped = {os.path.basename(s["dir"]): s["why"] for s in fit["skipped"]}
        check("not finished" in skipped.get("partial", ""), "the unfinished run is reported")
        check("unreadable" in skipped.get("corrupt", ""), "the corrupt summary is reported")
        g = fit["mixers"]["G"]
        check(g["fitted"] and abs(g["params"]["alpha"]["value"] - 0.34) < 0.15, "G fitted, alpha near 0.34")
        check(fit["mixers"]["A"]["fitted"], "A fitted")
        check(len(fit.get("winners", [])) > 0 and all(w["mixer"] == "G" for w in fit["winners"]),
              "G (5% lower loss) wins at every compute")
        for png in ("loss_curves.png", "isoflop.png", "frontier.png", "residuals.png"):
            path = os.path.join(out, png)
            ok = os.path.exists(path) and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 5000
            check(ok, f"{png} written")


def test_errors():
    with tempfile.TemporaryDirectory() as root:
        check(analyze.main([os.path.join(root, "nope")]) == 2, "a missing RUNS_DIR: exit 2")
        check(analyze.main([root]) == 1, "an empty RUNS_DIR: exit 1")
        os.makedirs(os.path.join(root, "r1"))
        open(os.path.join(root, "r1", "metrics.jsonl"), "w").write("")
        check(analyze.main([root]) == 1, "only unfinished runs: exit 1")
        write_run(root, "one", 1e6, 1e8, 3.0)
        check(analyze.main([root, "--out", os.path.join(root, "o"), "--no-plots"]) == 1,
              "one run cannot be fitted: exit 1")


test_recovery()
test_command()
test_errors()
if failures:
    print(f"{len(failures)} check(s) failed", file=sys.stderr)
    sys.exit(1)
print("all checks passed")
