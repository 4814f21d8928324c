#!/usr/bin/env python3
"""gdn eval: on a run's own data and settings its loss is the run's val_loss; perplexity is
exp(loss) and bits per byte loss / ln 2 for byte-level text; token shards give bits per byte from
--bytes_per_token (then bits per token / R, overriding everything else) or from the
PREFIX_data.json gdn data wrote beside them (bytes / tokens of the part evaluated, flagged as the
part's average when only some of it is), and say so otherwise; a data.json that does not fit the
shards or the model gives a warning and no bits per byte; the same tokens as text or as shards
give the same loss; bad input is refused with a message.

    python3 tests/e2e/eval_cmd.py BUILD/gdn
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from e2e_common import check, finish, gdn_runner
GDN = sys.argv[1]


run = gdn_runner(GDN)


def evaluate(*args):
    """gdn eval ... --json as a dict, or None (the failure recorded)."""
    r = run("eval", *args, "--json")
    check(r.returncode == 0, f"gdn eval {' '.join(args)} failed: {r.stderr}")
    return json.loads(r.stdout) if r.returncode == 0 else None


def close(a, b, rel=1e-12):
    return a is not None and b is not None and abs(a - b) <= rel * max(abs(a), abs(b))


def bpe_checks(tmp, corpus, T):
    """Shards of a BPE tokenizer (several bytes per token): bits per byte from PREFIX_data.json,
    the part's average when only some of it is evaluated, and warnings for records that do not
    fit."""
    here = os.path.dirname(os.path.abspath(__file__))
    tok = os.path.join(tmp, "tok.json")
    subprocess.run([sys.executable, os.path.join(here, "..", "tokenizer", "tiny_tokenizer.py"), tok], check=True)
    d = os.path.join(tmp, "bpe")
    os.mkdir(d)
    prefix = os.path.join(d, "b")
    r = run("data", "--in", corpus, "--out", prefix, "--tokenizer", tok, "--val-tokens", "600",
            "--shard-tokens", "2000")
    check(r.returncode == 0, f"gdn data --tokenizer failed: {r.stderr}")
    if r.returncode:
        return
    rec = json.load(open(prefix + "_data.json"))
    vocab = rec["vocab_size"]
    r = run("train", "--data", prefix + "_train_*.bin", "--tokenizer", tok, "--vocab_size", str(vocab),
            "--out", os.path.join(tmp, "brun"), "--steps", "1", "--d_model", "32", "--n_layers", "1",
            "--n_heads", "2", "--head_dim", "16", "--d_ff", "64", "--seq_len", str(T), "--batch_size", "2",
            "--val_tokens", "200", "--eval_every", "0", "--backend", "cpu")
    check(r.returncode == 0, f"gdn train on BPE shards failed: {r.stderr[-2000:]}")
    if r.returncode:
        return
    ck = os.path.join(tmp, "brun", "ckpt_00000001.h5")
    val = prefix + "_val_*.bin"
    ratio = rec["val"]["bytes"] / rec["val"]["tokens"]
    check(ratio > 1.5, f"the tiny tokenizer should merge: {ratio} bytes per token")
    e = evaluate("--ckpt", ck, "--data", val)
    if e:
        check(close(e["bytes_per_token"], ratio) and close(e["bits_per_byte"], e["bits_per_token"] / ratio)
              and e.get("bytes_per_token_from") == "data_json" and e.get("data_part") == "val" and e.get("split_average") is False,
              f"BPE val shards with their data.json: {e}, expected {ratio} bytes per token")
    # part of the split: the split's average ratio, said so
    for extra in (["--max_windows", "2"], ["--val_tokens", "300"]):
        e = evaluate("--ckpt", ck, "--data", val, *extra)
        if e:
            check(close(e["bits_per_byte"], e["bits_per_token"] / ratio) and e.get("split_average") is True,
                  f"BPE val shards {extra}: {e}")
        r = run("eval", "--ckpt", ck, "--data", val, *extra)
        check(r.returncode == 0 and "average" in r.stdout and "bits/byte" in r.stdout,
              f"text output for part of a split {extra}: {r.stdout}")
    # one shard of two of the training part: the part's average
    e = evaluate("--ckpt", ck, "--data", prefix + "_train_000001.bin")
    tr = rec["train"]["bytes"] / rec["train"]["tokens"]
    if e:
        check(rec["train"]["shards"] >= 2 and close(e["bits_per_byte"], e["bits_per_token"] / tr)
              and e.get("split_average") is True and e.get("data_part") == "train", f"one training shard: {e}")
    # both parts: their summed bytes over their summed tokens
    e = evaluate("--ckpt", ck, "--data", prefix + "_train_*.bin," + val)
    both = (rec["train"]["bytes"] + rec["val"]["bytes"]) / (rec["train"]["tokens"] + rec["val"]["tokens"])
    if e:
        check(close(e["bytes_per_token"], both) and e.get("data_part") == "train+val" and e.get("split_average") is False,
              f"train and val shards: {e}, expected {both}")

    # records that do not fit: a warning naming the file and the problem, no bits per byte, status 0
    def broken(edit, words, what):
        bd = os.path.join(tmp, "broken")
        shutil.rmtree(bd, ignore_errors=True)
        shutil.copytree(d, bd)
        path = os.path.join(bd, "b_data.json")
        text = open(path).read()
        open(path, "w").write(edit(text))
        r = run("eval", "--ckpt", ck, "--data", os.path.join(bd, "b_val_*.bin"), "--json")
        ok = r.returncode == 0 and json.loads(r.stdout)["bits_per_byte"] is None
        check(ok and "warning" in r.stderr and path in r.stderr and all(w in r.stderr for w in words),
              f"{what}: status {r.returncode}, stdout {r.stdout.strip()}, stderr {r.stderr.strip()!r}")
        r = run("eval", "--ckpt", ck, "--data", os.path.join(bd, "b_val_*.bin"))
        check(r.returncode == 0 and "bits per byte: unknown" in r.stdout and "warning" in r.stdout,
              f"{what}: text output {r.stdout}")
        r = run("eval", "--ckpt", ck, "--data", os.path.join(bd, "b_val_*.bin"), "--json", "--bytes_per_token", "2")
        check(r.returncode == 0 and "warning" not in r.stderr and json.loads(r.stdout)["bytes_per_token"] == 2,
              f"{what}: --bytes_per_token does not override: {r.stderr}")

    def with_val(**kw):
        def edit(text):
            j = json.loads(text)
            j["val"].update(kw)
            return json.dumps(j)
        return edit

    def with_top(**kw):
        def edit(text):
            j = json.loads(text)
            j.update(kw)
            return json.dumps(j)
        return edit

    broken(lambda t: t[:len(t) // 2], ["b_data.json"], "a truncated data.json")
    broken(with_top(vocab_size=vocab + 1000), [str(vocab + 1000), "ids"], "a vocabulary larger than the model's")
    broken(with_val(tokens=rec["val"]["tokens"] + 7), ["different runs", str(rec["val"]["tokens"] + 7)],
           "a token count the shards do not have")
    broken(with_val(shards=0), ["shard 0", "different runs"], "a shard beyond the part's count")
    broken(with_top(dtype="u32"), ["dtype", "u32"], "another dtype")
    broken(with_val(bytes="many"), ["bytes"], "a count of the wrong type")
    broken(with_top(val=None), ["val"], "no val object")


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
        record = os.path.join(tmp, "c_data.json")
        check(os.path.exists(record), "gdn data wrote no c_data.json")
        os.rename(record, record + ".away")  # shards with no record first
        et = evaluate("--ckpt", ckpt, "--data", corpus)
        es = evaluate("--ckpt", ckpt, "--data", shards)
        if et and es:
            check(et["windows"] == (n_bytes - 1) // T, f"whole text: {et['windows']} windows, expected {(n_bytes - 1) // T}")
            check(es["loss"] == et["loss"] and es["tokens"] == et["tokens"],
                  f"shards and text of the same tokens differ: {es} vs {et}")
            check(es["bits_per_byte"] is None and es["bytes_per_token"] is None and es.get("bytes_per_token_from") is None,
                  f"shards without --bytes_per_token or data.json must give bits_per_byte null: {es}")
        r = run("eval", "--ckpt", ckpt, "--data", shards)
        check(r.returncode == 0 and "bits per byte: unknown" in r.stdout and "--bytes_per_token" in r.stdout,
              f"text output for shards without a byte count: {r.stdout} {r.stderr}")
        eb = evaluate("--ckpt", ckpt, "--data", shards, "--bytes_per_token", "3.5")
        if eb:
            check(close(eb["bits_per_byte"], eb["bits_per_token"] / 3.5), f"bits per byte with 3.5 bytes/token: {eb}")
        os.rename(record + ".away", record)
        # with the record: byte-level shards have one byte per token, so the text's bits per byte
        er = evaluate("--ckpt", ckpt, "--data", shards)
        if er and et:
            check(er["bytes_per_token"] == 1.0 and er["bits_per_byte"] == et["bits_per_byte"]
                  and er.get("bytes_per_token_from") == "data_json" and er.get("data_part") == "train"
                  and er.get("data_json") == record and er.get("split_average") is False,
                  f"byte shards with their data.json: {er} (text: {et})")
        # --bytes_per_token overrides the record
        eb = evaluate("--ckpt", ckpt, "--data", shards, "--bytes_per_token", "3.5")
        if eb:
            check(close(eb["bits_per_byte"], eb["bits_per_token"] / 3.5) and eb.get("bytes_per_token_from") == "option",
                  f"--bytes_per_token over a data.json: {eb}")

        bpe_checks(tmp, corpus, T)
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
    finish("eval_cmd")


if __name__ == "__main__":
    main()
