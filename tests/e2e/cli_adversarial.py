#!/usr/bin/env python3
"""Adversarial command lines: every number option of every gdn command gets malformed and
extreme values (empty, spaces, signs, hex, exponents for integers, NaN/Inf, overflow, huge,
non-ASCII digits, very long), and every command gets structural damage (a missing value, unknown
or repeated options). Each run must end by exit, never by a signal or a hang, with a status in
the documented set {0, 1, 2}, a message on stderr when it fails, and a value that is not a number
of the option's kind must be refused (status 2) with a message naming the option: accepting it
would be a silently wrong result. Valid runs are kept cheap (a missing data file stops a valid
training configuration right after it is resolved; sampling writes 4 bytes).
Usage: cli_adversarial.py PATH/TO/gdn"""
import math, os, random, re, subprocess, sys, tempfile, collections

gdn = os.path.abspath(sys.argv[1])
tmp = tempfile.mkdtemp()
rnd = random.Random(13)
counts = collections.Counter()
problems = collections.Counter()
failures = []

POOL = ["", " ", "0", "1", "-1", "-0", "+1", " 1", "1 ", "16x", "x16", "0x10", "010", "1e3", "1.5",
        ".5", "5.", "-1e-3", "nan", "NaN", "inf", "-inf", "Infinity", "1e400", "1e-400",
        "2147483647", "2147483648", "-2147483649", "9223372036854775807", "9223372036854775808",
        "18446744073709551616", "99999999999999999999999999", "abc", "\uff11", "1\n", "1,5", "-",
        "--", "0.0", "3" * 300, "1_000", "0b1", "1e", "\t2", "0x1p3", "١"]

INT_RE = re.compile(r"-?[0-9]+")
REAL_RE = re.compile(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def well_formed(kind, s):
    if kind == "int":
        return INT_RE.fullmatch(s) is not None
    if kind == "uint":
        return re.fullmatch(r"[0-9]+|-0+", s) is not None
    if kind == "real":
        return REAL_RE.fullmatch(s) is not None and math.isfinite(float(s))
    if kind == "bool":
        return s in ("true", "false", "1", "0")
    return True


def run(category, argv, option=None, kind=None, value=None, want_ok=False):
    counts[category] += 1
    try:
        r = subprocess.run([gdn, *argv], capture_output=True, timeout=120, cwd=tmp)
    except subprocess.TimeoutExpired:
        problems["hang"] += 1
        failures.append(f"{category}: hang: {argv}")
        return None
    err = r.stderr.decode(errors="replace")
    what = f"{category}: gdn {' '.join(repr(a) if a != a.strip() or not a else a for a in argv)[:200]}"
    if r.returncode < 0 or "Sanitizer" in err:  # a sanitizer build reports instead of dying
        problems["crash"] += 1
        failures.append(f"{what}: killed by signal {-r.returncode}")
    elif r.returncode not in (0, 1, 2):
        problems["status"] += 1
        failures.append(f"{what}: exit status {r.returncode}")
    elif r.returncode != 0 and not err.strip():
        problems["silent failure"] += 1
        failures.append(f"{what}: exit status {r.returncode} with nothing on stderr")
    if kind is not None and not well_formed(kind, value):
        # a malformed number must be refused by name
        if r.returncode != 2 or option not in err:
            problems["silently wrong"] += 1
            failures.append(f"{what}: malformed {option} value accepted or not named "
                            f"(status {r.returncode}): {err.strip()[:200]}")
    if want_ok and r.returncode != 0:
        problems["valid refused"] += 1
        failures.append(f"{what}: a valid command failed ({r.returncode}): {err.strip()[:300]}")
    return r


def values(n):
    return rnd.sample(POOL, n)


# ---- fixtures: a small text, a tiny trained checkpoint --------------------------------------
corpus = os.path.join(tmp, "corpus.txt")
with open(corpus, "w") as f:
    f.write("In the beginning God created the heaven and the earth. " * 200)
tiny = ["--d_model=16", "--n_layers=1", "--n_heads=2", "--head_dim=8", "--expand_v=1", "--d_ff=32",
        "--seq_len=16", "--batch_size=2", "--eval_batches=1", "--val_tokens=512", "--chunk_size=16"]
run("fixture", ["train", "--out", os.path.join(tmp, "run"), "--data", corpus, "--steps=1", *tiny],
    want_ok=True)
ckpt_dir = os.path.join(tmp, "run")
ckpts = sorted(p for p in os.listdir(ckpt_dir) if p.endswith(".h5")) if os.path.isdir(ckpt_dir) else []
ckpt = os.path.join(ckpt_dir, ckpts[-1]) if ckpts else os.path.join(tmp, "missing.h5")

# ---- gdn train: every number setting -----------------------------------------------------------
settings = {"vocab_size": "int", "d_model": "int", "n_layers": "int", "n_heads": "int", "head_dim": "int",
            "expand_v": "int", "d_ff": "int", "conv_width": "int", "chunk_size": "int", "norm_eps": "real",
            "val_tokens": "int", "steps": "int", "seed": "int", "threads": "int", "batch_size": "int",
            "seq_len": "int", "batch_tokens": "int", "lr": "real", "lr_min": "real", "warmup_steps": "int",
            "decay_steps": "int", "weight_decay": "real", "beta1": "real", "beta2": "real",
            "adam_eps": "real", "grad_clip": "real", "eval_every": "int", "eval_batches": "int",
            "log_every": "int", "ckpt_every": "int", "keep": "int", "sp": "int", "zero": "int",
            "tie_embeddings": "bool", "allow_neg_eigval": "bool", "documents": "bool", "eod_token": "int",
            "mask_begin": "int", "mask_end": "int"}
out = os.path.join(tmp, "t")
for key, kind in settings.items():
    for v in values(4):
        form = rnd.random() < 0.5
        arg = [f"--{key}={v}"] if form else [f"--{key}", v]
        run("train", ["train", "--out", out, "--data", "/nonexistent/data.txt", *arg], f"--{key}", kind, v)
# the mixer pattern: letters G D M L, 1..n_layers of them (n_layers 2 here)
MIXERS = ["", "G", "GD", "GDM", "g", "X", "G D", " G", "G\n", "\x01", "\u00c4", "G" * 300, "GD" * 40,
          "D", "L", "ML", "0", "-", "GDML\u0000"[:4]]
for v in MIXERS:
    r = run("train mixers", ["train", "--out", out, "--data", "/nonexistent/data.txt", "--n_layers=2",
                             "--mixers", v])
    if r is not None and re.fullmatch(r"[GDML]{1,2}", v) is None and (r.returncode != 2 or "mixers" not in
                                                                       r.stderr.decode(errors="replace")):
        problems["silently wrong"] += 1
        failures.append(f"--mixers {v!r} accepted or not named (status {r.returncode})")
for argv in [["--out"], ["--out", out, "--d_model"], ["--out", out, "--bogus=1"], ["--out", out, "--=5"],
             ["--out", out, "--"], ["--out", out, "-"], ["--out", out, "--d_model==5"],
             ["--out", out, "--D_MODEL=5"], ["--out", out, "--lr=1e-3=2"], ["--out", out, "--preset"],
             ["--out", out, "--preset", "nope"], ["--out", out, "--config"], ["--out", out, "--config", ""],
             ["--out", out, "--config", tmp], ["--out", "", "--data", "/nonexistent"], ["x" * 5000],
             ["--out", out, "--data", "/nonexistent", "--d_model=8", "--d_model=16x"]]:
    run("train structure", ["train", *argv])

# ---- gdn sample ---------------------------------------------------------------------------------
for opt, kind in [("--temperature", "real"), ("--top-k", "int"), ("--seed", "uint")]:
    for v in values(10):
        run("sample", ["sample", "--ckpt", ckpt, "--bytes", "4", opt, v], opt, kind, v)
for v in values(12):  # a valid count may be huge: only the parse is exercised here
    run("sample", ["sample", "--ckpt", os.path.join(tmp, "missing.h5"), "--bytes", v], "--bytes", "int", v)
for argv in [[], ["--ckpt"], ["--ckpt", ckpt, "--run", tmp], ["--run", tmp], ["--ckpt", ""],
             ["--ckpt", ckpt, "--prompt", ""], ["--ckpt", ckpt, "--bogus", "1"], ["--ckpt", corpus],
             ["--ckpt", tmp]]:
    run("sample structure", ["sample", *argv])
run("sample valid", ["sample", "--ckpt", ckpt, "--bytes", "4", "--temperature", "0", "--top-k", "0"],
    want_ok=bool(ckpts))
run("sample valid", ["sample", "--ckpt", ckpt, "--bytes", "4", "--top-k", "2147483647",
                     "--temperature", "1e6", "--seed", "18446744073709551615"], want_ok=bool(ckpts))

# ---- gdn data -----------------------------------------------------------------------------------
for opt in ["--val-tokens", "--shard-tokens"]:
    for v in values(10):
        run("data", ["data", "--in", corpus, "--out", os.path.join(tmp, "d"), opt, v], opt, "uint", v)
for argv in [["--in"], ["--in", corpus, "--out"], ["--in", corpus, "--out", ""], ["--in", "", "--out", "x"],
             ["--in", tmp, "--out", os.path.join(tmp, "d")], ["--in=" + corpus, "--out=" + tmp + "/d", "--dtype="]]:
    run("data structure", ["data", *argv])
for v in values(6):
    run("data", ["data", "--in", corpus, "--out", os.path.join(tmp, "d"), "--threads", v], "--threads", "uint", v)
for v in values(8):
    run("data", ["data", "--in", corpus, "--out", os.path.join(tmp, "d"), "--eod_token", v], "--eod_token", "uint", v)
for argv in [["--doc_sep"], ["--doc_sep", ""], ["--doc_sep", "a\nb"], ["--documents", "--eod_token"],
             ["--doc_sep=", "--documents"]]:
    run("data structure", ["data", "--in", corpus, "--out", os.path.join(tmp, "d"), *argv])

# ---- gdn tokenize -------------------------------------------------------------------------------
for argv in [[], ["--tokenizer"], ["--tokenizer", tmp, "--in", corpus, "--out", os.path.join(tmp, "t.json")],
             ["--tokenizer", corpus, "--in", corpus, "--out", os.path.join(tmp, "t.json")],
             ["--tokenizer", corpus, "--in", corpus, "--out", os.path.join(tmp, "t.txt"), "--decode"],
             ["--tokenizer", "", "--in", "", "--out", ""], ["--bogus"]]:
    run("tokenize structure", ["tokenize", *argv])

# ---- gdn import / export / eval / linearize: argument shapes and wrong files ---------------------
o = os.path.join(tmp, "x_out")
for argv in [["import"], ["import", tmp], ["import", tmp, "--out"], ["import", corpus, "--out", o],
             ["import", "", "--out", ""], ["import", "--bogus"],
             ["export"], ["export", ckpt], ["export", ckpt, "--out"], ["export", corpus, "--out", o],
             ["export", ckpt, "--out", o, "--dtype", "f16"], ["export", "", "--out", ""], ["export", "--bogus"],
             ["eval"], ["eval", "--ckpt"], ["eval", "--ckpt", corpus, "--data", corpus],
             ["eval", "--ckpt", ckpt, "--data", ""], ["eval", "--ckpt", ckpt, "--data", corpus, "--bytes_per_token", "x"],
             ["eval", "--bogus"],
             ["linearize"], ["linearize", "--teacher"], ["linearize", "--teacher", corpus, "--data", corpus],
             ["linearize", "--teacher", ckpt, "--data", corpus, "--layers", "x"], ["linearize", "--bogus"],
             ["op", "logits"], ["op", "logits", "--ckpt", ckpt, "--in", corpus, "--out", o],
             ["distill"], ["distill", "nope"], ["distill", "init"], ["distill", "init", "--teacher"],
             ["distill", "init", "--teacher", corpus, "--out", o], ["distill", "init", "--teacher", ckpt, "--out", o],
             ["distill", "init", "--teacher", ckpt, "--out", o, "--mixers", "Q"],
             ["distill", "init", "--teacher", ckpt, "--out", o, "--keep-softmax", "x"], ["distill", "--bogus"],
             ["distill", "train"], ["distill", "train", "--teacher"], ["distill", "train", "--bogus"],
             ["distill", "train", "--teacher", corpus, "--student", corpus, "--data", corpus, "--out", o],
             ["distill", "train", "--teacher", ckpt, "--student", ckpt, "--data", corpus, "--out", o],
             ["distill", "train", "--teacher", ckpt, "--student", ckpt, "--data", corpus, "--out", o, "--train", ""]]:
    run("interop structure", argv)
for v in values(4):  # a valid value ends at the refusal of a student with its teacher's mixers
    run("distill train", ["distill", "train", "--teacher", ckpt, "--student", ckpt, "--data", corpus, "--out", o,
                          "--tau", v], "--tau", "real", v)
for v in values(6):
    run("eval", ["eval", "--ckpt", ckpt, "--data", corpus, "--max_windows", v], "--max_windows", "int", v)
    run("eval", ["eval", "--ckpt", ckpt, "--data", corpus, "--eod_token", v], "--eod_token", "int", v)
    run("eval", ["eval", "--ckpt", ckpt, "--data", corpus, "--documents", v], "--documents", "bool", v)
    run("linearize", ["linearize", "--teacher", ckpt, "--data", corpus, "--windows", v], "--windows", "int", v)

# ---- gdn op gated-delta -------------------------------------------------------------------------
for v in values(10):
    run("op", ["op", "gated-delta", "--in", os.path.join(tmp, "missing.h5"), "--out", os.path.join(tmp, "o.h5"),
               "--chunk", v], "--chunk", "int", v)
for argv in [["op"], ["op", "nope"], ["op", "gated-delta"], ["op", "gated-delta", "--in"],
             ["op", "gated-delta", "--in", corpus, "--out", os.path.join(tmp, "o.h5")],
             ["op", "gated-delta", "--in", ckpt, "--out", os.path.join(tmp, "o.h5")],
             ["op", "gated-delta", "--in", corpus, "--out", corpus]]:
    run("op structure", argv)

# ---- gdn bench ----------------------------------------------------------------------------------
for v in values(8):
    if well_formed("int", v) and v.lstrip("-0").isdigit() and 0 < int(v) <= 1000000 and int(v) > 20:
        continue  # a valid large repeat count would only take long
    run("bench", ["bench", "--what", "delta", "--shape", "1,16,1,16", "--repeats", v], "--repeats", "int", v)
for s in ["1,16,1,16", "1,16,1,16,8", "1,16,1,16,", ",1,16,1,16", "1,,16,1,16", "1,16,1,16,16,16",
          "0,16,1,16", "1,16,1,16x", "1 ,16,1,16", "1,16,1,257", "1048576,16777216,4096,256",
          "2147483648,1,1,1", "", "1,16,1", "-1,16,1,16", "1,16,1,1e1", "nan,1,1,1"]:
    ok = s in ("1,16,1,16", "1,16,1,16,8")
    r = run("bench", ["bench", "--what", "delta", "--repeats", "1", "--shape", s], want_ok=ok)
    if r is not None and not ok and r.returncode != 2:
        problems["silently wrong"] += 1
        failures.append(f"bench --shape '{s}' accepted ({r.returncode})")
for argv in [["--repeats"], ["--what"], ["--what", "x"], ["--backend", "tpu"], ["--what", "step", "--d_model=8x"],
             ["--what", "step", "--n_heads=2147483647"]]:
    run("bench structure", ["bench", *argv])

# ---- gdn inspect and the dispatcher -------------------------------------------------------------
for argv in [["inspect"], ["inspect", ""], ["inspect", tmp], ["inspect", corpus], ["inspect", "--json"],
             ["inspect", "--json", "--json", ckpt], ["inspect", "--bogus", ckpt], ["inspect", ckpt, ckpt],
             [""], ["nope"], ["--help"], ["train", "--help"]]:
    run("inspect/dispatch", argv)

total = sum(counts.values())
print("cli_adversarial: invocations per category: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
print(f"cli_adversarial: {total} invocations; crashes {problems['crash']}, hangs {problems['hang']}, "
      f"silently wrong {problems['silently wrong']}, bad status {problems['status']}, "
      f"silent failures {problems['silent failure']}, valid refused {problems['valid refused']}")
for f in failures[:60]:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
