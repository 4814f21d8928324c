#!/usr/bin/env python3
"""Curves of the distillation experiment (jobs/distill_experiment.sh, docs/distillation.md).

    jobs/distill_plot.py EXPERIMENT_DIR [PNG_DIR]

reads the run directories of EXPERIMENT_DIR (the script's OUT_DIR, or its hf/ subdirectory):
teacher/ (gdn train, or jobs/hf_teacher.py), distill_G/ and distill_H/ (gdn distill train:
stage1/ and stage2/), scratch_G/ and scratch_H/ (gdn train), each through its metrics.jsonl,
and writes into PNG_DIR (default EXPERIMENT_DIR):

  loss_curves.png     held-out loss (left) and training next-token loss (right) against tokens
                      for every model, log-scale tokens, the teacher's final held-out loss as a
                      dashed line; a student's tokens count both stages (stage 1 has no
                      next-token training loss: its objective is the mixers' MSE)
  distill_stages.png  per student: stage 1's MSE (sum and per converted layer) and stage 2's
                      KL against the step
  teachers.png        when EXPERIMENT_DIR/hf/teacher holds the run of jobs/hf_teacher.py
                      (TEACHER_HF=1): both teachers' held-out and training loss against tokens

Runs that are absent are left out (with a note); a metrics.jsonl that is empty, unreadable or
not one JSON object per line is an error. The teacher's line is its last val_loss, or, without
teacher metrics (a teacher imported as it was), the teacher entry of results.json.
Needs matplotlib (Debian: python3-matplotlib). Exit status: 0 written, 1 bad input, 2 usage."""
import json
import math
import os
import sys

STUDENTS = (("G", "GDN student"), ("H", "hybrid student"))
SCRATCH = (("G", "GDN from scratch"), ("H", "hybrid from scratch"))
COLOURS = {"teacher": "black", "G": "tab:blue", "H": "tab:orange"}


class BadInput(Exception):
    pass


def read_metrics(path):
    """The step records of one metrics.jsonl, one per step (a resumed run's later line wins)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: cannot read: {e}")
    by_step = {}
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise BadInput(f"{path}:{i}: not a JSON object ({e}): is it a gdn metrics.jsonl?")
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int) or \
                not isinstance(rec.get("tokens"), (int, float)):
            raise BadInput(f"{path}:{i}: a record needs an integer 'step' and a 'tokens' count")
        by_step[rec["step"]] = rec
    if not by_step:
        raise BadInput(f"{path}: empty: the run logged no step (did it fail at the start? see its log)")
    return [by_step[s] for s in sorted(by_step)]


def run_metrics(exp, *parts):
    """The records of EXP/parts.../metrics.jsonl, or None when the run directory is absent."""
    d = os.path.join(exp, *parts)
    if not os.path.isdir(d):
        return None
    path = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(path):
        raise BadInput(f"{d}: a run directory without metrics.jsonl (the run did not start?)")
    return read_metrics(path)


def series(recs, key, offset=0):
    """(tokens, values) of the records with a finite value under key."""
    xs, ys = [], []
    for r in recs:
        v = r.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            xs.append(r["tokens"] + offset)
            ys.append(v)
    return xs, ys


def smooth(ys, n):
    """Trailing mean over n points (the per-step training loss is noisy)."""
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= n:
            acc -= ys[i - n]
        out.append(acc / min(i + 1, n))
    return out


def teacher_loss(exp, teacher):
    if teacher:
        _, ys = series(teacher, "val_loss")
        if ys:
            return ys[-1], "teacher's final held-out loss"
    try:
        with open(os.path.join(exp, "results.json"), encoding="utf-8") as f:
            models = json.load(f)["models"]
        for k, v in models.items():
            if k.startswith("teacher"):
                return float(v["loss"]), "teacher's held-out loss (gdn eval)"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None, None


def load(exp):
    if not os.path.isdir(exp):
        raise BadInput(f"{exp}: no such directory (give the OUT_DIR of jobs/distill_experiment.sh)")
    runs = {"teacher": run_metrics(exp, "teacher")}
    for k, _ in STUDENTS:
        runs["distill_" + k] = (run_metrics(exp, "distill_" + k, "stage1"), run_metrics(exp, "distill_" + k, "stage2"))
    for k, _ in SCRATCH:
        runs["scratch_" + k] = run_metrics(exp, "scratch_" + k)
    found = [n for n, v in runs.items() if v and (not isinstance(v, tuple) or any(v))]
    if not found:
        raise BadInput(f"{exp}: none of the run directories teacher/, distill_G/, distill_H/, scratch_G/, "
                       "scratch_H/ is there: is it the OUT_DIR of jobs/distill_experiment.sh?")
    for n, v in runs.items():
        if n not in found:
            print(f"distill_plot: {exp}: no {n}/ run, left out", file=sys.stderr)
    return runs


def student_curves(stages):
    """Held-out and training next-token loss of a student over both stages' tokens."""
    s1, s2 = stages
    off = s1[-1]["tokens"] if s1 else 0
    val = ([], [])
    for recs, o in ((s1, 0), (s2, off)):
        if recs:
            x, y = series(recs, "val_loss", o)
            val[0].extend(x)
            val[1].extend(y)
    train = series(s2, "ce", off) if s2 else ([], [])
    return val, train, off


def plot_losses(plt, exp, runs, path):
    fig, (ax_val, ax_tr) = plt.subplots(1, 2, figsize=(13, 5))
    teacher = runs["teacher"]
    t_loss, t_label = teacher_loss(exp, teacher)
    if teacher:
        x, y = series(teacher, "val_loss")
        ax_val.plot(x, y, "o-", color=COLOURS["teacher"], ms=3, label="teacher")
        x, y = series(teacher, "loss")
        ax_tr.plot(x, smooth(y, max(1, len(y) // 50)), color=COLOURS["teacher"], lw=1, label="teacher")
    for k, name in STUDENTS:
        stages = runs["distill_" + k]
        if not any(stages):
            continue
        val, train, off = student_curves(stages)
        ax_val.plot(*val, "o-", color=COLOURS[k], ms=3, label=name)
        if train[1]:
            ax_tr.plot(train[0], smooth(train[1], max(1, len(train[1]) // 50)), color=COLOURS[k], lw=1,
                       label=name + " (stage 2)")
        if stages[0] and stages[1]:
            for ax in (ax_val, ax_tr):
                ax.axvline(off, color=COLOURS[k], ls=":", lw=0.8)
    for k, name in SCRATCH:
        recs = runs["scratch_" + k]
        if not recs:
            continue
        x, y = series(recs, "val_loss")
        ax_val.plot(x, y, "s--", color=COLOURS[k], ms=3, alpha=0.7, label=name)
        x, y = series(recs, "loss")
        ax_tr.plot(x, smooth(y, max(1, len(y) // 50)), "--", color=COLOURS[k], lw=1, alpha=0.7, label=name)
    for ax, title in ((ax_val, "held-out loss"), (ax_tr, "training loss (next token)")):
        if t_loss is not None:
            ax.axhline(t_loss, color=COLOURS["teacher"], ls="--", lw=0.8, label=f"{t_label}: {t_loss:.4f}")
        ax.set_xscale("log")
        ax.set_xlabel("tokens (students: both stages; dotted: end of stage 1)")
        ax.set_ylabel("nats per token")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=8)
    fig.suptitle(os.path.basename(os.path.abspath(exp)) + ": teacher, distilled students, from scratch")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_stages(plt, runs, path):
    rows = [(k, name, runs["distill_" + k]) for k, name in STUDENTS if any(runs["distill_" + k])]
    if not rows:
        print("distill_plot: no student runs: distill_stages.png not written", file=sys.stderr)
        return False
    fig, axes = plt.subplots(len(rows), 2, figsize=(12, 4 * len(rows)), squeeze=False)
    for (k, name, (s1, s2)), (ax1, ax2) in zip(rows, axes):
        if s1:
            steps = [r["step"] for r in s1]
            ax1.plot(steps, [r["loss"] for r in s1], color="black", lw=1.5, label="sum")
            n_layers = max((len(r.get("mse_layer") or []) for r in s1), default=0)
            for layer in range(n_layers):
                xs, ys = [], []
                for r in s1:
                    m = r.get("mse_layer") or []
                    if layer < len(m) and isinstance(m[layer], (int, float)) and m[layer] > 0:
                        xs.append(r["step"])
                        ys.append(m[layer])
                if ys:
                    ax1.plot(xs, ys, lw=0.8, label=f"layer {layer}")
            ax1.set_yscale("log")
            ax1.legend(fontsize=7, ncol=2)
        ax1.set_title(f"{name}: stage 1, per-layer MSE of the mixer outputs")
        ax1.set_ylabel("mean squared error")
        if s2:
            x = [r["step"] for r in s2 if isinstance(r.get("kl"), (int, float)) and r["kl"] > 0]
            y = [r["kl"] for r in s2 if isinstance(r.get("kl"), (int, float)) and r["kl"] > 0]
            ax2.plot(x, y, color=COLOURS[k], lw=1)
            ax2.set_yscale("log")
        ax2.set_title(f"{name}: stage 2, KL(teacher || student) per token")
        ax2.set_ylabel("nats per token")
        for ax in (ax1, ax2):
            ax.set_xlabel("step of the stage")
            ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_teachers(plt, gdn_teacher, hf_teacher, path):
    """gdn's teacher next to the one transformers trained (EXP/hf/teacher), same axes."""
    fig, (ax_val, ax_tr) = plt.subplots(1, 2, figsize=(13, 5))
    for recs, name, colour in ((gdn_teacher, "teacher trained by gdn", "black"),
                               (hf_teacher, "teacher trained by transformers", "tab:green")):
        x, y = series(recs, "val_loss")
        ax_val.plot(x, y, "o-", color=colour, ms=3, label=f"{name} (final {y[-1]:.4f})" if y else name)
        x, y = series(recs, "loss")
        ax_tr.plot(x, smooth(y, max(1, len(y) // 50)), color=colour, lw=1, label=name)
    for ax, title in ((ax_val, "held-out loss"), (ax_tr, "training loss")):
        ax.set_xscale("log")
        ax.set_xlabel("tokens")
        ax.set_ylabel("nats per token")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) not in (2, 3) or argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    exp = argv[1]
    out = argv[2] if len(argv) == 3 else exp
    try:
        runs = load(exp)  # bad input first: it needs no matplotlib
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:
            print(f"distill_plot: needs matplotlib ({e}): install python3-matplotlib", file=sys.stderr)
            return 1
        os.makedirs(out, exist_ok=True)
        written = [os.path.join(out, "loss_curves.png")]
        plot_losses(plt, exp, runs, written[0])
        if plot_stages(plt, runs, os.path.join(out, "distill_stages.png")):
            written.append(os.path.join(out, "distill_stages.png"))
        try:  # the other teacher is an extra: a run of it that is not usable only costs the figure
            hf_teacher = run_metrics(exp, "hf", "teacher")
        except BadInput as e:
            print(f"distill_plot: no teachers.png: {e}", file=sys.stderr)
            hf_teacher = None
        if runs["teacher"] and hf_teacher:
            written.append(os.path.join(out, "teachers.png"))
            plot_teachers(plt, runs["teacher"], hf_teacher, written[-1])
    except BadInput as e:
        print(f"distill_plot: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"distill_plot: cannot write into {out}: {e}", file=sys.stderr)
        return 1
    for w in written:
        print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
