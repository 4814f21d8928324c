#!/usr/bin/env python3
"""A CI-sized scaling sweep on the bundled corpus, on the CPU: gdn sweep plan -> gdn sweep run
(stopped by SIGTERM in the middle of a run, then run again: the finished runs are skipped and
the stopped one resumes from its checkpoint) -> jobs/scaling/analyze.py, whose fit.json and
plots must exist and be sane. Also the commands' errors for bad sweeps and directories.
usage: micro_sweep.py GDN PYTHON"""
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "e2e"))
from e2e_common import check, finish  # noqa: E402

gdn, python = sys.argv[1], sys.argv[2]
os.chdir(SRC)  # the sweep names data/kjv.txt.gz relative to the source tree
work = tempfile.mkdtemp(prefix="gdn_sweep_")
env = dict(os.environ, OMP_WAIT_POLICY="passive", OPENBLAS_NUM_THREADS="1")


def run(*args, **kw):
    return subprocess.run([gdn, *args], capture_output=True, text=True, env=env, **kw)


try:
    d = os.path.join(work, "sw")
    p = run("sweep", "plan", os.path.join(HERE, "micro_sweep.json"), "--out", d, "--bench")
    check(p.returncode == 0, f"plan exits 0: {p.stderr}")
    check("sweep micro: 6 runs" in p.stdout and "hours (from the measured throughput)" in p.stdout and
          "measuring G_d16l1_t5.12k_s1" in p.stdout, f"plan prints totals from gdn bench: {p.stdout}")
    jobs = [l.split() for l in open(os.path.join(d, "jobs.txt")) if l.strip() and not l.startswith("#")]
    check(len(jobs) == 6, f"6 jobs listed (got {len(jobs)})")
    plan = json.load(open(os.path.join(d, "plan.json")))
    flops = [r["flops"] for r in plan["runs"]]
    check(flops == sorted(flops), "jobs cheapest first")
    check(all(r["est_hours"] > 0 for r in plan["runs"]), "every run has an estimate")
    cfg = json.load(open(os.path.join(d, jobs[0][0])))
    check(os.path.isabs(cfg["data"]) and cfg["out"].endswith("/runs/" + jobs[0][1]), "configs name absolute paths")

    # a long run appended to the list, to be stopped part-way: it cannot finish before the signal
    long_cfg = dict(cfg, steps=100000, ckpt_every=2)
    json.dump(long_cfg, open(os.path.join(d, "configs", "long.json"), "w"))
    with open(os.path.join(d, "jobs.txt"), "a") as f:
        f.write("configs/long.json long\n")
    metrics = os.path.join(d, "runs", "long", "metrics.jsonl")
    sweep = subprocess.Popen([gdn, "sweep", "run", d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env)
    deadline = time.time() + 600  # a generous bound: poll for progress, never for time
    while time.time() < deadline and sweep.poll() is None:
        if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 3:
            break
        time.sleep(0.05)
    sweep.send_signal(signal.SIGTERM)
    out1, _ = sweep.communicate(timeout=600)
    check(sweep.returncode == 75, f"a stopped sweep exits 75 (got {sweep.returncode}): {out1}")
    check(out1.count(": done in") == 6, f"6 runs trained first: {out1}")
    check("long: stopped at a checkpoint" in out1, "the stopped run is reported")
    for name in [j[1] for j in jobs]:
        s = json.load(open(os.path.join(d, "runs", name, "summary.json")))
        check(s["steps"] == json.load(open(os.path.join(d, "configs", name + ".json")))["steps"] and s["flops"] > 0 and
              s["params_non_embedding"] > 0 and math.isfinite(s["final_val_loss"]), f"{name}: summary.json complete")
    check(not os.path.exists(os.path.join(d, "runs", "long", "summary.json")), "the stopped run has no summary.json")
    ckpts = sorted(glob.glob(os.path.join(d, "runs", "long", "ckpt_*.h5")))
    check(len(ckpts) > 0, "the stopped run left a checkpoint")
    step = int(re.search(r"ckpt_(\d+)\.h5", ckpts[-1]).group(1)) if ckpts else 0

    # the same command again, the long run now 3 steps past its checkpoint
    json.dump(dict(long_cfg, steps=step + 3), open(os.path.join(d, "configs", "long.json"), "w"))
    r = run("sweep", "run", d)
    check(r.returncode == 0, f"the rerun exits 0: {r.stdout}{r.stderr}")
    check(r.stdout.count("), skipped") == 6, f"the finished runs are skipped: {r.stdout}")
    log = open(os.path.join(d, "logs", "long.log")).read()
    check("resuming from" in log and f"at step {step}" in log, "the stopped run resumed from its checkpoint")
    s = json.load(open(os.path.join(d, "runs", "long", "summary.json")))
    check(s["steps"] == step + 3, f"the resumed run finished at step {step + 3} (summary: {s['steps']})")
    r = run("sweep", "run", d)
    check(r.returncode == 0 and r.stdout.count("), skipped") == 7, "a third run trains nothing")

    # extending a finished run: its summary.json goes when it resumes (a stop leaves none behind)
    json.dump(dict(long_cfg, steps=100000), open(os.path.join(d, "configs", "long.json"), "w"))
    lines0 = sum(1 for _ in open(metrics))
    sweep = subprocess.Popen([gdn, "sweep", "run", d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env)
    deadline = time.time() + 600
    while time.time() < deadline and sweep.poll() is None:
        if sum(1 for _ in open(metrics)) >= lines0 + 2:
            break
        time.sleep(0.05)
    sweep.send_signal(signal.SIGTERM)
    out3, _ = sweep.communicate(timeout=600)
    check(sweep.returncode == 75, f"the extended run stopped (exit {sweep.returncode}): {out3}")
    check(not os.path.exists(os.path.join(d, "runs", "long", "summary.json")),
          "the extended, stopped run left no summary.json of its shorter self")
    # the long run leaves the list and the analysis (its schedule changed twice)
    lines = [l for l in open(os.path.join(d, "jobs.txt")) if "long" not in l]
    open(os.path.join(d, "jobs.txt"), "w").writelines(lines)
    shutil.rmtree(os.path.join(d, "runs", "long"))

    # jobs/sweep.sbatch outside Slurm's queue: a finished task exits at once; an unfinished one
    # goes to jobs/train_array.sbatch with the list and the runs folder (a stand-in records them)
    sb = os.path.join(SRC, "jobs", "sweep.sbatch")
    fake = os.path.join(work, "fake_src")
    os.makedirs(os.path.join(fake, "jobs"))
    open(os.path.join(fake, "jobs", "train_array.sbatch"), "w").write('echo "train_array: $*"\n')
    sbenv = dict(env, SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_JOB_ID="9", GDN_SRC=fake)
    r = subprocess.run(["bash", sb, d], capture_output=True, text=True, env=sbenv)
    check(r.returncode == 0 and "finished before" in r.stdout, f"sweep.sbatch skips a finished run: {r.stdout}{r.stderr}")
    os.remove(os.path.join(d, "runs", jobs[0][1], "summary.json"))
    r = subprocess.run(["bash", sb, d, "--threads", "1"], capture_output=True, text=True, env=sbenv)
    check(r.returncode == 0 and f"train_array: {d}/jobs.txt {d}/runs --threads 1" in r.stdout,
          f"sweep.sbatch hands an unfinished run to train_array.sbatch: {r.stdout}{r.stderr}")
    r = subprocess.run(["bash", sb, d], capture_output=True, text=True, env=dict(sbenv, SLURM_ARRAY_TASK_ID="6"))
    check(r.returncode == 2 and "has 6 runs" in r.stderr, f"sweep.sbatch: a task past the list: {r.stderr}")
    r = subprocess.run(["bash", sb], capture_output=True, text=True, env=sbenv)
    check(r.returncode == 2 and "usage" in r.stderr, "sweep.sbatch without a directory")
    r = run("sweep", "run", d)  # the run whose summary went missing trains again (resumes at its end)
    check(r.returncode == 0 and r.stdout.count("), skipped") == 5 and r.stdout.count(": done in") == 1,
          f"a missing summary: that run again, the others skipped: {r.stdout}")

    # analysis
    a = subprocess.run([python, os.path.join(SRC, "jobs", "scaling", "analyze.py"), d, "--bootstrap", "10"],
                       capture_output=True, text=True, env=env)
    check(a.returncode == 0, f"analyze exits 0: {a.stdout}{a.stderr}")
    fit = json.load(open(os.path.join(d, "analysis", "fit.json")))
    g = fit["mixers"].get("G", {})
    check(fit["n_runs"] == 6 and g.get("fitted"), f"G fitted from 6 runs: {fit.get('n_runs')}")
    check(all(g["params"][k]["value"] is not None and g["params"][k]["value"] > 0 for k in ("E", "A", "B", "alpha", "beta")),
          "the fitted parameters are positive numbers")
    check(g["flops_per_ND"] > 6, "FLOPs per N D: 6 plus the mixer's terms")
    for png in ("loss_curves.png", "isoflop.png", "frontier.png", "residuals.png"):
        path = os.path.join(d, "analysis", png)
        ok = os.path.exists(path) and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 5000
        check(ok, f"{png} written")

    # errors: bad sweep files, a budget past the corpus, a missing directory
    bad = os.path.join(work, "bad.json")
    open(bad, "w").write('{"name": "x", "corpus": {"data": "data/kjv.txt.gz"}, "sizez": 1}')
    r = run("sweep", "plan", bad, "--out", os.path.join(work, "b"))
    check(r.returncode == 2 and "bad.json:1:" in r.stderr and "unknown field 'sizez'" in r.stderr, f"unknown field: {r.stderr}")
    big = json.load(open(os.path.join(HERE, "micro_sweep.json")))
    big["tokens"] = [10 ** 8]
    json.dump(big, open(bad, "w"))
    r = run("sweep", "plan", bad, "--out", os.path.join(work, "b"))
    check(r.returncode == 2 and "passes over the corpus" in r.stderr, f"budget past one epoch: {r.stderr}")
    big["corpus"]["data"] = "no/such/file.txt"
    big["tokens"] = [1000]
    json.dump(big, open(bad, "w"))
    r = run("sweep", "plan", bad, "--out", os.path.join(work, "b"))
    check(r.returncode == 2 and "no/such/file.txt" in r.stderr, f"missing corpus: {r.stderr}")
    r = run("sweep", "run", os.path.join(work, "none"))
    check(r.returncode == 2 and "gdn sweep plan" in r.stderr, f"missing sweep directory: {r.stderr}")
    for opt in ("--overwrite", "--steps=5", "--resume"):
        r = run("sweep", "run", d, opt)
        check(r.returncode == 2 and "set by the sweep" in r.stderr, f"{opt} refused: {r.stderr}")
    other = json.load(open(os.path.join(HERE, "micro_sweep.json")))
    other["seeds"] = [2]
    json.dump(other, open(bad, "w"))
    r = run("sweep", "plan", bad, "--out", d)
    check(r.returncode == 2 and "holds the plan of another sweep file" in r.stderr, f"another sweep's directory: {r.stderr}")
    r = run("sweep", "plan", os.path.join(HERE, "micro_sweep.json"), "--out", d)
    check(r.returncode == 0, f"planning the same sweep again: {r.stderr}")
    r = run("sweep", "frobnicate")
    check(r.returncode == 2 and "plan or run" in r.stderr, "unknown subcommand")
finally:
    shutil.rmtree(work, ignore_errors=True)

finish("micro sweep")
