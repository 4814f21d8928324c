#!/usr/bin/env python3
"""Usage: same_run.py A B STEP. Run directory B (stopped and resumed, or run another way) logged
steps 1..STEP with bitwise the training and validation losses of run directory A, and the two
checkpoints of step STEP hold bitwise the same parameters and AdamW moments. A difference fails
an assertion that names it (exit status 1)."""
import json
import sys

import h5py

a, b, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
la = [json.loads(l) for l in open(a + "/metrics.jsonl")]
lb = [json.loads(l) for l in open(b + "/metrics.jsonl")]
assert [r["step"] for r in lb] == list(range(1, step + 1)), [r["step"] for r in lb]
assert [r["loss"] for r in la] == [r["loss"] for r in lb], "losses differ after the resume"
assert [r.get("val_loss") for r in la] == [r.get("val_loss") for r in lb], "validation losses differ"
with h5py.File(f"{a}/ckpt_{step:08d}.h5", "r") as fa, h5py.File(f"{b}/ckpt_{step:08d}.h5", "r") as fb:
    for grp in ("params", "optim/m", "optim/v"):
        for name in fa[grp]:
            assert fa[grp][name][()].tobytes() == fb[grp][name][()].tobytes(), f"{grp}/{name} differs"
