#!/usr/bin/env python3
"""Encoding throughput of Hugging Face tokenizers on one thread, to compare with
tests/tokenizer/bench_tokenize.c on the same text and machine.

    python3 tests/tokenizer/bench_hf.py TEXT_FILE [--repeats R] NAME=TOKENIZER_PATH...

TOKENIZER_PATH: a tokenizer.json, or a directory holding vocab.json + merges.txt (GPT-2: ByteLevel
pre-tokenizer without prefix space, as gdn reads it). The whole text is encoded as one string
(add_special_tokens=False) R times (default 5); prints the median MB/s (10^6 bytes per second)
by the thread's CPU time and by the wall clock, and the id count, as bench_tokenize does. RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false keep it on one core
(encode of a single string does not parallelize anyway)."""
import os
import statistics
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402


def load(path):
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "tokenizer.json")):
        t = Tokenizer(models.BPE.from_file(os.path.join(path, "vocab.json"),
                                           os.path.join(path, "merges.txt")))
        t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        t.decoder = decoders.ByteLevel()
        return t
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    return Tokenizer.from_file(path)


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    raw = open(args[0], "rb").read()
    if raw[:2] == b"\x1f\x8b":
        import gzip
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8")
    repeats, rest = 5, []
    i = 1
    while i < len(args):
        if args[i] == "--repeats":
            repeats = int(args[i + 1])
            i += 2
            continue
        rest.append(args[i])
        i += 1
    print(f"text: {args[0]}, {len(raw) / 1e6:.2f} MB")
    for item in rest:
        name, _, path = item.partition("=")
        t0 = time.perf_counter()
        tok = load(path or name)
        loaded = time.perf_counter() - t0
        rates, wall, n_ids = [], [], 0
        for _ in range(repeats):
            tok = load(path or name)  # a fresh cache, as bench_tokenize uses a fresh encoder
            s, c = time.perf_counter(), time.thread_time()
            n_ids = len(tok.encode(text, add_special_tokens=False).ids)
            rates.append(len(raw) / 1e6 / max(time.thread_time() - c, 1e-9))
            wall.append(len(raw) / 1e6 / max(time.perf_counter() - s, 1e-9))
        print(f"{name:8s} {statistics.median(rates):7.1f} MB/s per core by CPU time (median of "
              f"{repeats}; min {min(rates):.1f}, max {max(rates):.1f}), "
              f"{statistics.median(wall):.1f} MB/s by wall clock, {n_ids} ids, load {loaded:.2f} s")


if __name__ == "__main__":
    main()
