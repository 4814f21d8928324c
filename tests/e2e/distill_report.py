#!/usr/bin/env python3
"""The distillation experiment's report tools at CPU size: jobs/distill_experiment.sh with a tiny
gdn teacher and with an imported transformers Llama (TEACHER_HF=DIR, a fixture of
tests/interop) writes results.json, linearize.json and the PNGs of jobs/distill_plot.py, and
skips the plots with a message when its python has no matplotlib; distill_plot.py refuses bad
input with a clear message; jobs/hf_teacher.py compiles, checks its settings without torch, and
holds out exactly the windows gdn eval evaluates.
usage: distill_report.py GDN   (run with a python that has numpy, matplotlib and h5py)"""
import gzip
import importlib.util
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from e2e_common import check, failures  # noqa: E402

gdn = os.path.abspath(sys.argv[1])
DATA = os.path.join(SRC, "data", "kjv.txt.gz")
FIXTURE = os.path.join(SRC, "tests", "interop", "fixtures", "llama_gqa_bf16")
PLOT = os.path.join(SRC, "jobs", "distill_plot.py")
HF = os.path.join(SRC, "jobs", "hf_teacher.py")
work = tempfile.mkdtemp(prefix="gdn_distill_report_")
SMALL = os.path.join(work, "kjv_300k.txt")  # a part of the corpus: each command reads it faster
with open(SMALL, "wb") as f:
    f.write(gzip.open(DATA).read()[:300000])
TINY = dict(GDN=gdn, DATA=SMALL, PYTHON=sys.executable, BACKEND="cpu", D_MODEL="32", LAYERS="2", HEADS="2", KV_HEADS="1",
            D_FF="64", SEQ="32", BATCH="4", TEACHER_STEPS="30", FRACTION="20", STAGE1_PERCENT="34",
            VAL_TOKENS="20000", EVAL_WINDOWS="8", LIN_WINDOWS="2", TEACHER_EVAL_EVERY="5", EVAL_EVERY="2", OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")


def experiment(out, **extra):
    env = dict(os.environ, **dict(TINY, **extra))
    return subprocess.run(["bash", os.path.join(SRC, "jobs", "distill_experiment.sh"), out], capture_output=True,
                          text=True, env=env)


def check_png(path):
    """A PNG that matplotlib reads back, of a real size, not one flat colour."""
    try:
        with open(path, "rb") as f:
            head = f.read(24)
    except OSError as e:
        check(False, f"{path}: {e}")
        return
    check(head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path}: PNG signature and IHDR")
    w, h = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    check(w >= 600 and h >= 300, f"{path}: {w} x {h} pixels")
    check(os.path.getsize(path) > 20000, f"{path}: {os.path.getsize(path)} bytes")
    import matplotlib.image
    img = matplotlib.image.imread(path)
    colours = len(np.unique(img.reshape(-1, img.shape[-1]).round(2), axis=0))
    check(img.std() > 0.05 and colours > 20, f"{path}: drawn (std {img.std():.3f}, {colours} colours)")


T0 = [time.time()]


def section(name):
    """Prints how long the previous part took (the test should stay within ~30 s)."""
    now = time.time()
    print(f"{name} ({now - T0[0]:.1f} s after the previous part)", flush=True)
    T0[0] = now


def plot(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True,
                          env=dict(os.environ, MPLBACKEND="Agg"))


try:
    # ---- a gdn teacher: results, linearisation table, curves -------------------------------
    out = os.path.join(work, "exp")
    r = experiment(out)
    check(r.returncode == 0, f"experiment exits 0: {r.stderr[-3000:]}")
    res = json.load(open(os.path.join(out, "results.json")))
    check(list(res["models"]) == ["teacher (AA)", "GDN student (GG)", "GDN from scratch", "hybrid student (GA)",
                                  "hybrid from scratch"], f"results.json models: {list(res['models'])}")
    check(res["teacher_tokens"] == 30 * 4 * 32 and res["student_tokens"] == 6 * 4 * 32, f"tokens: {res}")
    lin = json.load(open(os.path.join(out, "linearize.json")))
    check([l["layer"] for l in lin["layers"]] == [0, 1] and lin["windows"] == 2 and lin["seq_len"] == 32,
          f"linearize.json: every layer, 2 windows of 32: {str(lin)[:300]}")
    teacher = [json.loads(l) for l in open(os.path.join(out, "teacher", "metrics.jsonl"))]
    check(sum("val_loss" in m for m in teacher) == 6, "teacher evaluated every TEACHER_EVAL_EVERY steps")
    stage1 = [json.loads(l) for l in open(os.path.join(out, "distill_G", "stage1", "metrics.jsonl"))]
    check(len(stage1) == 2 and "val_loss" in stage1[1], "students evaluated every EVAL_EVERY steps")
    for png in ("loss_curves.png", "distill_stages.png"):
        check_png(os.path.join(out, png))
    check("results.json: teacher trained on 3,840 tokens; students and from-scratch runs on 768 (20%)" in r.stdout
          and "hybrid from scratch" in r.stdout, f"table printed: {r.stdout}")

    section("gdn teacher: done")
    # ---- a variant sharing that teacher (a link to its run): the hybrid alone, keeping layer 0,
    # in batches of 2 (twice the steps, the same tokens); the final validation pass is the
    # table's evaluation (the same windows)
    var = os.path.join(work, "var")
    os.makedirs(var)
    os.symlink(os.path.join(out, "teacher"), os.path.join(var, "teacher"))
    r = experiment(var, STUDENTS="H", KEEP="0", STUDENT_BATCH="2", LIN_WINDOWS="0")
    check(r.returncode == 0, f"variant exits 0: {r.stderr[-3000:]}")
    vres = json.load(open(os.path.join(var, "results.json")))
    check(list(vres["models"]) == ["teacher (AA)", "hybrid student (AG)", "hybrid from scratch"]
          and vres["student_tokens"] == res["student_tokens"], f"variant results.json: {vres}")
    check(vres["models"]["teacher (AA)"]["loss"] == res["models"]["teacher (AA)"]["loss"], "the shared teacher")
    scratch = [json.loads(l) for l in open(os.path.join(var, "scratch_H", "metrics.jsonl"))]
    check(len(scratch) == 12 and abs(scratch[-1]["val_loss"] - vres["models"]["hybrid from scratch"]["loss"]) < 1e-6,
          f"12 steps of 2 windows; the last validation is the table's: {scratch[-1]} {vres['models']}")
    check(not os.path.exists(os.path.join(var, "linearize.json")) and not os.path.exists(os.path.join(var, "student_G.h5")),
          "LIN_WINDOWS=0 skips linearize; STUDENTS=H makes no GDN student")
    for bad, words in ((dict(KEEP="2"), "KEEP=2 is not a layer of the 2-layer teacher"),
                       (dict(STUDENTS="G X"), "STUDENTS: 'X' is not G or H"),
                       (dict(STUDENTS=" "), "STUDENTS is empty")):
        r = experiment(var, **bad)
        check(r.returncode == 2 and words in r.stderr, f"{bad}: exit {r.returncode}, {r.stderr[-600:]}")
    section("variant: done")
    # ---- an imported transformers Llama (TEACHER_HF=DIR), by a python without matplotlib: the
    # experiment ends all the same and says why there are no curves; distill_plot draws them
    fake = os.path.join(work, "nompl")
    os.makedirs(os.path.join(fake, "matplotlib"))
    with open(os.path.join(fake, "matplotlib", "__init__.py"), "w") as f:
        f.write("raise ImportError('hidden for the test')\n")
    wrapper = os.path.join(work, "python_nompl")
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\nPYTHONPATH={fake} exec {sys.executable} "$@"\n')
    os.chmod(wrapper, 0o755)
    imp = os.path.join(work, "imp")
    r = experiment(imp, TEACHER_HF=FIXTURE, TEACHER_STEPS="8", FRACTION="50", STAGE1_PERCENT="25", PYTHON=wrapper)
    check(r.returncode == 0 and "cannot import matplotlib: no curves" in r.stderr, f"TEACHER_HF=DIR: {r.stderr[-3000:]}")
    hres = json.load(open(os.path.join(imp, "hf", "results.json")))
    check(list(hres["models"])[0] == "teacher (imported from llama_gqa_bf16, AA)" and len(hres["models"]) == 5,
          f"hf/results.json: {list(hres['models'])}")
    check(os.path.exists(os.path.join(imp, "hf", "linearize.json")), "hf/linearize.json")
    check(not os.path.exists(os.path.join(imp, "hf", "loss_curves.png")), "no matplotlib: no PNG")
    check("teacher (imported from llama_gqa_bf16, AA)" in r.stdout, f"table printed: {r.stdout}")
    r = plot(os.path.join(imp, "hf"))  # no teacher/ run: its line from results.json
    check(r.returncode == 0 and "no teacher/ run, left out" in r.stderr, f"plot of hf/: {r.stderr}")
    for png in ("loss_curves.png", "distill_stages.png"):
        check_png(os.path.join(imp, "hf", png))
    r = experiment(os.path.join(work, "bad"), TEACHER_HF=work)
    check(r.returncode == 2 and "not a Hugging Face model directory (no config.json)" in r.stderr,
          f"TEACHER_HF without config.json: {r.returncode} {r.stderr}")
    section("TEACHER_HF=DIR: done")

    # ---- TEACHER_HF=1 trains one with jobs/hf_teacher.py, beside gdn's teacher: where torch is
    # there it runs (tiny, on the CPU; tests/e2e/llama_torch stands in for transformers when that
    # is missing), its own held-out loss equals gdn eval's on its import (the same windows, the
    # same model), and teachers.png shows both teachers; without torch the script stops with
    # hf_teacher's reason, and teachers.png is checked on a stand-in run
    has = lambda mod: subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True).returncode == 0
    hf_env = dict(TEACHER_HF="1", TEACHER_STEPS="12", FRACTION="50", STAGE1_PERCENT="34")
    if has("torch"):
        if not has("transformers"):
            hf_env["PYTHONPATH"] = os.path.join(HERE, "llama_torch")
        r = experiment(out, **hf_env)
        check(r.returncode == 0, f"TEACHER_HF=1: {r.stderr[-3000:]}")
        models = json.load(open(os.path.join(out, "hf", "results.json")))["models"]
        own = json.load(open(os.path.join(out, "hf", "teacher", "train.json")))
        lines = [json.loads(l) for l in open(os.path.join(out, "hf", "teacher", "metrics.jsonl"))]
        check(list(models)[0] == "teacher (Llama by transformers, AA)", f"TEACHER_HF=1: {list(models)}")
        check(abs(own["final_val_loss"] - models["teacher (Llama by transformers, AA)"]["loss"]) < 1e-4,
              f"hf_teacher's held-out loss is gdn eval's on the import: {own['final_val_loss']} against {models}")
        check([m["step"] for m in lines] == list(range(1, 13)) and lines[-1]["tokens"] == 12 * 4 * 32 and
              sum("val_loss" in m for m in lines) == 3, f"hf_teacher's metrics.jsonl: {lines[-1]}")
        check(r.stdout.count("results.json: teacher trained") == 2, f"both tables printed: {r.stdout}")
        check(json.load(open(os.path.join(out, "results.json"))) == res, "the gdn teacher's results.json is kept")
        for png in ("loss_curves.png", "distill_stages.png"):
            check_png(os.path.join(out, "hf", png))
    else:
        r = experiment(os.path.join(work, "hf1"), **hf_env)
        check(r.returncode == 1 and "hf_teacher: needs torch and transformers" in r.stderr,
              f"TEACHER_HF=1 without torch: {r.returncode} {r.stderr[-1500:]}")
        os.makedirs(os.path.join(out, "hf", "teacher"))  # gdn's metrics, shifted, as the other teacher
        with open(os.path.join(out, "hf", "teacher", "metrics.jsonl"), "w") as f:
            for m in teacher:
                f.write(json.dumps(dict(m, loss=m["loss"] + 0.1, **({"val_loss": m["val_loss"] + 0.1}
                                                                     if "val_loss" in m else {}))) + "\n")
        r = plot(out)
        check(r.returncode == 0, f"teachers.png: {r.stderr}")
    check_png(os.path.join(out, "teachers.png"))
    section("TEACHER_HF=1: done")

    # ---- distill_plot.py on bad input --------------------------------------------------------
    r = plot()
    check(r.returncode == 2 and "EXPERIMENT_DIR" in r.stderr, f"no argument: usage, 2: {r.returncode}")
    r = plot(os.path.join(work, "missing"))
    check(r.returncode == 1 and "no such directory" in r.stderr, f"missing directory: {r.stderr}")
    os.makedirs(os.path.join(work, "empty"))
    r = plot(os.path.join(work, "empty"))
    check(r.returncode == 1 and "none of the run directories" in r.stderr, f"no runs: {r.stderr}")
    broken = os.path.join(work, "broken")
    shutil.copytree(out, broken, ignore=shutil.ignore_patterns("*.h5", "hf"))
    metrics = os.path.join(broken, "scratch_G", "metrics.jsonl")
    open(metrics, "w").close()
    r = plot(broken)
    check(r.returncode == 1 and f"{metrics}: empty" in r.stderr, f"empty metrics.jsonl: {r.stderr}")
    with open(metrics, "w") as f:
        f.write('{"step":1,"loss":5.5,"tokens":128}\n{"step":2,"loss":\n')
    r = plot(broken)
    check(r.returncode == 1 and f"{metrics}:2: not a JSON object" in r.stderr, f"malformed line: {r.stderr}")
    os.remove(metrics)
    r = plot(broken)
    check(r.returncode == 1 and "without metrics.jsonl" in r.stderr, f"run without metrics: {r.stderr}")
    shutil.rmtree(os.path.join(broken, "scratch_G"))
    shutil.rmtree(os.path.join(broken, "teacher"))
    r = plot(broken, os.path.join(work, "pngs"))
    check(r.returncode == 0 and "no teacher/ run, left out" in r.stderr and "no scratch_G/ run" in r.stderr,
          f"absent runs left out: {r.returncode} {r.stderr}")
    check_png(os.path.join(work, "pngs", "loss_curves.png"))

    section("distill_plot errors: done")
    # ---- hf_teacher.py: compiles; --check without torch; gdn's held-out windows -------------
    py_compile.compile(HF, cfile=os.path.join(work, "hf_teacher.pyc"), doraise=True)
    henv = dict(os.environ, D_MODEL="32", HEADS="2", KV_HEADS="1", LAYERS="2", D_FF="64", SEQ="32", STEPS="40",
                VAL_TOKENS="20000", EVAL_WINDOWS="8", DATA=SMALL)
    r = subprocess.run([sys.executable, HF, os.path.join(work, "hft"), "--check"], capture_output=True, text=True,
                       env=henv)
    check(r.returncode == 0, f"hf_teacher --check: {r.stderr}")
    plan = json.loads(r.stdout)
    n = 300000
    check(plan["tokens"] == n and plan["train_tokens"] == n - 20000 and plan["val_windows"] == 8 and
          plan["llama_config"]["head_dim"] == 16 and plan["llama_config"]["num_key_value_heads"] == 1,
          f"plan: {r.stdout[:400]}")
    check(not os.path.exists(os.path.join(work, "hft")), "--check writes nothing")
    for bad, msg in ((dict(HEADS="3"), "HEADS=3 does not divide D_MODEL=32"),
                     (dict(KV_HEADS="3"), "KV_HEADS=3 does not divide HEADS=2"),
                     (dict(VAL_TOKENS="99999999"), "VAL_TOKENS=99999999 leaves no training data"),
                     (dict(SEQ="x"), "SEQ='x': expected an integer"),
                     (dict(DATA=os.path.join(work, "nope.txt")), "cannot read"),
                     (dict(VOCAB="100"), "is not below VOCAB=100")):
        r = subprocess.run([sys.executable, HF, os.path.join(work, "hft"), "--check"], capture_output=True,
                           text=True, env=dict(henv, **bad))
        check(r.returncode == 1 and msg in r.stderr, f"hf_teacher {bad}: {r.returncode} {r.stderr}")
    # its held-out windows are gdn eval's: the cross-entropy of the imported fixture on them
    # (gdn op logits) is what gdn eval reports for the same --val_tokens / --max_windows; on the
    # text, and on two token shards with the hold-out starting inside the first
    spec = importlib.util.spec_from_file_location("hf_teacher", HF)
    hft = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hft)
    import h5py
    ckpt = os.path.join(work, "fixture.h5")
    r = subprocess.run([gdn, "import", FIXTURE, "--out", ckpt], capture_output=True, text=True)
    check(r.returncode == 0, f"gdn import: {r.stderr}")
    text = np.frombuffer(open(SMALL, "rb").read(), dtype=np.uint8)
    shards = []
    for i, (lo, hi) in enumerate(((0, 30000), (30000, 33000))):
        shards.append(os.path.join(work, f"part_{i}.bin"))
        header = np.zeros(256, dtype="<i4")
        header[:3] = (20240520, 1, hi - lo)
        with open(shards[-1], "wb") as f:
            f.write(header.tobytes() + text[lo:hi].astype("<u2").tobytes())
    for data, hold, nwin in ((DATA, 5000, 12), (SMALL, 5000, 12), (",".join(shards), 5000, 200)):
        T = 32
        _, val = hft.split(hft.load_spans(data, 256), hold, T)
        windows = hft.val_windows(val, T, nwin)
        ids, logits = os.path.join(work, "ids.h5"), os.path.join(work, "logits.h5")
        with h5py.File(ids, "w") as f:
            f["ids"] = windows[:, :-1].astype(np.int32)
        r = subprocess.run([gdn, "op", "logits", "--ckpt", ckpt, "--in", ids, "--out", logits, "--precision", "fp64"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"gdn op logits: {r.stderr}")
        with h5py.File(logits, "r") as f:
            z = f["logits"][()].astype(np.float64)
        z -= z.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        ce = -np.take_along_axis(logp, windows[:, 1:, None], -1).mean()
        r = subprocess.run([gdn, "eval", "--ckpt", ckpt, "--data", data, "--val_tokens", str(hold), "--seq_len",
                            str(T), "--batch_size", "4", "--max_windows", str(nwin), "--json"], capture_output=True,
                           text=True)
        check(r.returncode == 0, f"gdn eval: {r.stderr}")
        ev = json.loads(r.stdout)
        check(len(windows) == ev["windows"] and abs(ev["loss"] - ce) < 1e-4,
              f"{data}: hf_teacher's held-out windows are gdn eval's: {len(windows)} windows, {ce} against {r.stdout}")
    section("hf_teacher: done")
finally:
    if not failures:
        shutil.rmtree(work, ignore_errors=True)

if failures:
    print(f"{len(failures)} check(s) failed; files kept in {work}", file=sys.stderr)
    sys.exit(1)
print("distill_report: all checks passed")
