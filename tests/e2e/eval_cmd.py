#!/usr/bin/env python3
"""gdn eval: on a run's own data and settings its loss is the run's val_loss; perplexity is
exp(loss) and bits per byte loss / ln 2 for byte-level text; token shards give bits per byte only
with --bytes_per_token (then bits per token / R) and say so otherwise; the same tokens as text
or as shards give the same loss; bad input is refused with a message.

    python3 tests/e2e/eval_cmd.py BUILD/gdn
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

GDN = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args):
    return subprocess.run([GDN, *args], capture_output=True, text=True)


def evaluate(*args):
    """gdn eval ... --json as a dict, or None (the failure recorded)."""
    r = run("eval", *args, "--json")
    check(r.returncode == 0, f"gdn eval {' '.join(args)} failed: {r.stderr}")
    return json.loads(r.stdout) if r.returncode == 0 else None


def close(a, b, rel=1e-12):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def main():
    tmp = tempfile.mkdtemp(prefix="gdn_eval_")
    try:
        words = ["the", "and", "of", "light", "water", "earth", "said", "unto", "them", "day"]
        text = " ".join(words[(i * 7 + i // 3) % len(words)] for i in range(4000)) + "\n"
        corpus = os.path.join(tmp, "corpus.txt")
        open(corpus, "w").write(text)
        n_bytes = len(text.encode())
        T, B, EB, VT = 32, 4, 3, 2000
        out = os.path.join(tmp, "run")
        r = run("train", "--data", corpus, "--out", out, "--steps", "6", "--d_model", "32", "--n_layers", "1",
                "--n_heads", "2", "--head_dim", "16", "--d_ff", "64", "--seq_len", str(T), "--batch_size", str(B),
                "--val_tokens", str(VT), "--eval_batches", str(EB), "--eval_every", "0", "--backend", "cpu",
                "--warmup_steps", "0", "--lr", "3e-3")
        check(r.returncode == 0, f"gdn train failed: {r.stderr[-2000:]}")
        if r.returncode:
            return
        lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
        val = lines[-1]["val_loss"]
        ckpt = os.path.join(out, "ckpt_00000006.h5")

        # the run's validation: its windows and batches; seq_len and batch_size from the checkpoint
        e = evaluate("--ckpt", ckpt, "--data", corpus, "--val_tokens", str(VT), "--max_windows", str(EB * B))
        if e:
            print(f"train val_loss {val!r}, gdn eval loss {e['loss']!r}")
            check(close(e["loss"], val), f"gdn eval loss {e['loss']!r} is not the run's val_loss {val!r}")
            check(e["seq_len"] == T and e["windows"] == EB * B and e["tokens"] == EB * B * T,
                  f"windows/tokens: {e}")
            check(e["step"] == 6, f"step {e['step']}")
            check(close(e["perplexity"], math.exp(e["loss"])), f"perplexity {e['perplexity']} != exp(loss)")
            check(close(e["bits_per_token"], e["loss"] / math.log(2)), f"bits per token {e['bits_per_token']}")
            # byte-level text: one byte per token, so bits per byte = loss / ln 2 * tokens / bytes
            check(e["bytes_per_token"] == 1.0 and close(e["bits_per_byte"], e["loss"] / math.log(2)),
                  f"bits per byte of byte-level text: {e}")
        # every window of the held-out part (more than the run evaluated)
        e_all = evaluate("--ckpt", ckpt, "--data", corpus, "--val_tokens", str(VT), "--batch_size", "5")
        if e_all:
            check(e_all["windows"] == (VT - 1) // T, f"all held-out windows: {e_all['windows']}, expected {(VT - 1) // T}")

        # the same tokens as shards: the same loss; bits per byte only with --bytes_per_token
        r = run("data", "--in", corpus, "--out", os.path.join(tmp, "c"), "--val-tokens", "0")
        check(r.returncode == 0, f"gdn data failed: {r.stderr}")
        shards = os.path.join(tmp, "c_train_*.bin")
        et = evaluate("--ckpt", ckpt, "--data", corpus)
        es = evaluate("--ckpt", ckpt, "--data", shards)
        if et and es:
            check(et["windows"] == (n_bytes - 1) // T, f"whole text: {et['windows']} windows, expected {(n_bytes - 1) // T}")
            check(es["loss"] == et["loss"] and es["tokens"] == et["tokens"],
                  f"shards and text of the same tokens differ: {es} vs {et}")
            check(es["bits_per_byte"] is None and es["bytes_per_token"] is None,
                  f"shards without --bytes_per_token must give bits_per_byte null: {es}")
        r = run("eval", "--ckpt", ckpt, "--data", shards)
        check(r.returncode == 0 and "bits per byte: unknown" in r.stdout and "--bytes_per_token" in r.stdout,
              f"text output for shards without a byte count: {r.stdout} {r.stderr}")
        eb = evaluate("--ckpt", ckpt, "--data", shards, "--bytes_per_token", "3.5")
        if eb:
            check(close(eb["bits_per_byte"], eb["bits_per_token"] / 3.5), f"bits per byte with 3.5 bytes/token: {eb}")
        r = run("eval", "--ckpt", ckpt, "--data", corpus)
        check(r.returncode == 0 and "bits/byte" in r.stdout and "perplexity" in r.stdout, f"text output: {r.stdout}")

        # refusals
        for args, words in [(["--ckpt", ckpt, "--data", os.path.join(tmp, "none.txt")], ["none.txt"]),
                            (["--ckpt", os.path.join(tmp, "none.h5"), "--data", corpus], ["none.h5"]),
                            (["--ckpt", ckpt, "--data", corpus, "--seq_len", str(n_bytes + 10)], ["seq_len"]),
                            (["--ckpt", ckpt], ["--data"]),
                            (["--ckpt", ckpt, "--data", corpus, "--max_windows", "-1"], ["--max_windows"])]:
            r = run("eval", *args)
            check(r.returncode != 0 and all(w in r.stderr for w in words),
                  f"gdn eval {args}: status {r.returncode}, message {r.stderr.strip()!r}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)
    print("eval_cmd: all checks passed")


if __name__ == "__main__":
    main()
