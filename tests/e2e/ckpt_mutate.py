#!/usr/bin/env python3
"""Flips bytes in HDF5 metadata of copies of a small checkpoint and runs `inspect` on each.

Every run must end in one of two ways: exit 0 with a report identical to the original file's
(step, tokens_seen, config, model, state, rng, every tensor's shape and checksums), or exit 1
with a message on stderr that says what is wrong. Death by a signal (a crash inside libhdf5),
another exit status, or an "ok" report whose contents differ from the original (silently wrong)
fails the test. Mutations are drawn with a fixed seed, so every run tries the same files.
Usage: ckpt_mutate.py CKPT_STRESS [--copies N] [--seed S] [--inspect CMD]
  --inspect CMD  run CMD FILE instead of "CKPT_STRESS inspect --json FILE" (to measure
                 another build); the command must print inspect's JSON report.
"""
import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile

# A run that takes longer than this is reported as a hang (the checker's own bound is larger
# only for big files; these are ~150 KB).
HANG_S = 600


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stress")
    ap.add_argument("--copies", type=int, default=300)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--inspect", default="")
    ap.add_argument("--keep-crashes", default="", help="copy crashing files into this folder")
    a = ap.parse_args()
    inspect = shlex.split(a.inspect) if a.inspect else [a.stress, "inspect", "--json"]
    rnd = random.Random(a.seed)
    counts = {"ok_same": 0, "error": 0, "crash": 0, "silent_wrong": 0, "bad_exit": 0}
    problems = []
    with tempfile.TemporaryDirectory() as d:
        orig = os.path.join(d, "known.h5")
        subprocess.run([a.stress, "known", orig], check=True)
        ranges = subprocess.run([a.stress, "dataranges", orig], check=True, capture_output=True,
                                text=True).stdout.split("\n")
        in_data = bytearray(os.path.getsize(orig))
        for line in ranges:
            if line.strip():
                off, size = map(int, line.split())
                in_data[off:off + size] = b"\x01" * size
        meta = [i for i, x in enumerate(in_data) if not x]
        r = subprocess.run(inspect + [orig], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"ckpt_mutate: inspect fails on the original file: {r.stderr}")
        want = json.loads(r.stdout)
        del want["file"]
        data = open(orig, "rb").read()
        path = os.path.join(d, "m.h5")
        for k in range(a.copies):
            buf = bytearray(data)
            n_flip = rnd.choice([1, 1, 2, 4])
            flips = []
            for _ in range(n_flip):
                off = rnd.choice(meta)
                mask = rnd.choice([0x01, 0x10, 0x80, 0xFF, rnd.randrange(1, 256)])
                buf[off] ^= mask
                flips.append(f"{off}^0x{mask:02x}")
            with open(path, "wb") as f:
                f.write(buf)
            try:
                r = subprocess.run(inspect + [path], capture_output=True, text=True,
                                   timeout=HANG_S, errors="replace")
            except subprocess.TimeoutExpired:
                counts["crash"] += 1
                problems.append(f"copy {k} ({' '.join(flips)}): hang")
                continue
            what = ""
            if r.returncode < 0:
                counts["crash"] += 1
                what = f"killed by signal {-r.returncode}"
            elif r.returncode == 0:
                try:
                    got = json.loads(r.stdout)
                    del got["file"]
                except (ValueError, KeyError):
                    got = None
                if got == want:
                    counts["ok_same"] += 1
                else:
                    counts["silent_wrong"] += 1
                    what = "exit 0 but the contents differ from the original"
            elif r.returncode == 1 and "gdn inspect: " in r.stderr:
                counts["error"] += 1
            else:
                counts["bad_exit"] += 1
                what = f"exit {r.returncode} without a message: {r.stderr[-300:]!r}"
            if what:
                problems.append(f"copy {k} ({' '.join(flips)}): {what}")
                if a.keep_crashes:
                    os.makedirs(a.keep_crashes, exist_ok=True)
                    with open(os.path.join(a.keep_crashes, f"copy{k}.h5"), "wb") as f:
                        f.write(buf)
    print(f"ckpt_mutate: {a.copies} mutated copies ({len(meta)} metadata bytes of "
          f"{len(data)}): " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for p in problems[:20]:
        print("  " + p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
