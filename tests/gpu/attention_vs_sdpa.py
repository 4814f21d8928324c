#!/usr/bin/env python3
"""The attention rows of tests/gpu/run.sh's summary: for each shape of bench_attention, the
default kernels' ("df") forward and forward+backward next to PyTorch SDPA's from bench_sdpa.py in
the same call, and the ratio of the forward+backward times.
Usage: attention_vs_sdpa.py BENCH_ATTENTION_TXT BENCH_SDPA_TXT  (exit 0; a missing or skipped
SDPA run prints our figures alone)"""
import sys


def rows(path, want):
    """{shape: [floats]} from the lines of `path` whose variant column is `want` (None: no column)."""
    out = {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    for line in lines:
        f = line.split()
        if len(f) < 6 or not f[0].startswith("B") or not f[1].startswith("T"):
            continue
        shape, rest = " ".join(f[:5]), f[5:]
        if want is not None:
            if rest[0] != want:
                continue
            rest = rest[1:]
        try:
            out[shape] = [float(x) for x in rest]
        except ValueError:
            continue
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ours, sdpa = rows(sys.argv[1], "df"), rows(sys.argv[2], None)
    print(f"  {'attention (default kernels)':<34} {'fwd ms':>8} {'f+b ms':>8} {'SDPA fwd':>9} {'SDPA f+b':>9} {'ratio':>6}")
    for shape, (fwd, _bwd, fb, *_) in ours.items():
        if shape in sdpa:
            s_fwd, s_fb = sdpa[shape][:2]
            print(f"  {shape:<34} {fwd:8.3f} {fb:8.3f} {s_fwd:9.3f} {s_fb:9.3f} {fb / s_fb:5.2f}x")
        else:
            print(f"  {shape:<34} {fwd:8.3f} {fb:8.3f} {'-':>9} {'-':>9} {'-':>6}")


main()
