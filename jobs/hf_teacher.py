#!/usr/bin/env python3
"""A softmax teacher made by Hugging Face transformers: a LlamaForCausalLM trained with PyTorch
(CUDA when there is a GPU) on the corpus and tokens gdn trains on, saved so that `gdn import`
reads it (docs/distillation.md, "On the GPU"; jobs/distill_experiment.sh TEACHER_HF=1).

    jobs/hf_teacher.py OUT_DIR [--check]

Environment (defaults in brackets, the names of jobs/distill_experiment.sh): DATA
[data/kjv.txt.gz], D_MODEL [384], LAYERS [6], HEADS [6], KV_HEADS [2], D_FF [1024], SEQ [256],
BATCH [32], STEPS [1000], LR [2e-3], LR_MIN [1e-4], WARMUP [STEPS/20 + 1], WEIGHT_DECAY [0.1],
VAL_TOKENS [200000], EVAL_EVERY [STEPS/20; 0: at the end only], EVAL_WINDOWS [256], SEED [1],
VOCAB [256].

Tokens are gdn's (io/tokens.h): a text file (plain or gzip) is byte-level, token = byte value,
vocabulary 256, no BOS/EOS or other special ids; token shards (*.bin, the llm.c format) are
read as they are (set VOCAB to the tokenizer's size). DATA may list several files separated by
commas, each its own span (no window crosses two). As `gdn train --val_tokens N`, the last
VAL_TOKENS tokens are held out and never trained on: training windows of SEQ + 1 tokens start
uniformly at random in the rest; held-out windows are gdn eval's, SEQ + 1 tokens every SEQ
tokens from the start of the held-out part, the first EVAL_WINDOWS of them.

The model is gdn's attention block: RMSNorm (eps 1e-6), grouped-query attention with head dim
D_MODEL / HEADS, full RoPE (theta 10000), SwiGLU MLP, untied head, no biases. Training: AdamW
(betas 0.9, 0.95, eps 1e-8, weight decay on matrices only), linear warm-up then cosine decay to
LR_MIN (gdn's schedule), gradient clipping at 1, bf16 autocast on CUDA with fp32 weights.

OUT_DIR gets config.json, generation_config.json and model.safetensors (fp32; save_pretrained),
which `gdn import OUT_DIR --out teacher.h5` takes (no tokenizer.json: byte-level models need
none), metrics.jsonl (gdn train's keys: step, loss, lr, grad_norm, tokens, tokens_per_s, time_s,
val_loss on evaluation steps; jobs/distill_plot.py reads it) and train.json (the settings and
the final held-out loss). A run that stops before the end leaves no model.safetensors; run it
again to start over.

--check needs no torch: it reads the data, checks the settings and prints the plan as JSON.
Exit status: 0 done, 1 bad settings or data, 2 usage."""
import glob
import gzip
import json
import math
import os
import sys
import time

import numpy as np


class BadInput(Exception):
    pass


def env_int(name, default, lo=1):
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        n = int(v)
    except ValueError:
        raise BadInput(f"{name}={v!r}: expected an integer")
    if n < lo:
        raise BadInput(f"{name}={n}: must be at least {lo}")
    return n


def env_float(name, default):
    v = os.environ.get(name, "")
    try:
        x = float(v) if v != "" else default
    except ValueError:
        raise BadInput(f"{name}={v!r}: expected a number")
    if not (math.isfinite(x) and x >= 0):
        raise BadInput(f"{name}={v}: must be a finite number >= 0")
    return x


def settings():
    here = os.path.dirname(os.path.abspath(__file__))
    s = {"data": os.environ.get("DATA") or os.path.normpath(os.path.join(here, "..", "data", "kjv.txt.gz"))}
    for name, default in (("d_model", 384), ("layers", 6), ("heads", 6), ("kv_heads", 2), ("d_ff", 1024),
                          ("seq", 256), ("batch", 32), ("steps", 1000), ("val_tokens", 200000),
                          ("eval_windows", 256), ("seed", 1), ("vocab", 256)):
        s[name] = env_int(name.upper(), default, 0 if name == "seed" else 1)
    s["warmup"] = env_int("WARMUP", s["steps"] // 20 + 1, 0)
    s["eval_every"] = env_int("EVAL_EVERY", max(1, s["steps"] // 20), 0)
    s["lr"] = env_float("LR", 2e-3)
    s["lr_min"] = min(env_float("LR_MIN", 1e-4), s["lr"])
    s["weight_decay"] = env_float("WEIGHT_DECAY", 0.1)
    if s["d_model"] % s["heads"]:
        raise BadInput(f"HEADS={s['heads']} does not divide D_MODEL={s['d_model']} (head dim = D_MODEL / HEADS)")
    s["head_dim"] = s["d_model"] // s["heads"]
    if s["head_dim"] % 2 or s["head_dim"] > 256:
        raise BadInput(f"head dim D_MODEL / HEADS = {s['head_dim']}: gdn import needs an even head dim <= 256")
    if s["heads"] % s["kv_heads"]:
        raise BadInput(f"KV_HEADS={s['kv_heads']} does not divide HEADS={s['heads']}")
    return s


def read_file(path):
    """The tokens of one file as gdn reads them (io/tokens.h)."""
    if path.endswith(".bin"):
        header = np.fromfile(path, dtype="<i4", count=256)
        if header.size < 256 or header[0] != 20240520 or header[1] not in (1, 2):
            raise BadInput(f"{path}: not a token shard (header magic 20240520, version 1 or 2)")
        tokens = np.fromfile(path, dtype="<u2" if header[1] == 1 else "<u4", offset=1024)
        if tokens.size != header[2]:
            raise BadInput(f"{path}: the header counts {header[2]} tokens, the file holds {tokens.size}")
        return tokens.astype(np.int64)
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return np.frombuffer(raw, dtype=np.uint8).astype(np.int64)


def load_spans(spec, vocab):
    paths = []
    for item in spec.split(","):
        found = sorted(glob.glob(item)) if any(c in item for c in "*?[") else [item]
        if not found:
            raise BadInput(f"DATA: {item!r} matches no file")
        paths += found
    if len({p.endswith(".bin") for p in paths}) > 1:
        raise BadInput(f"DATA={spec!r}: text files and token shards cannot be mixed")
    spans = []
    for p in paths:
        try:
            t = read_file(p)
        except OSError as e:
            raise BadInput(f"DATA: cannot read {p}: {e.strerror or e}")
        if t.size and int(t.max()) >= vocab:
            raise BadInput(f"{p}: token {int(t.max())} is not below VOCAB={vocab}")
        spans.append(t)
    if not paths[0].endswith(".bin") and vocab != 256:
        raise BadInput(f"VOCAB={vocab}: text is byte-level, vocabulary 256")
    return spans


def split(spans, hold, T):
    """(training pieces, held-out pieces): each a list of arrays; the last `hold` tokens of the
    concatenated spans are held out, cut at span boundaries as gdn's dataset regions are."""
    n = sum(s.size for s in spans)
    if hold >= n:
        raise BadInput(f"VAL_TOKENS={hold} leaves no training data (DATA has {n} tokens)")
    train, val, pos = [], [], 0
    for s in spans:
        cut = min(max(n - hold - pos, 0), s.size)
        if cut:
            train.append(s[:cut])
        if cut < s.size:
            val.append(s[cut:])
        pos += s.size
    if not any(p.size > T for p in train):
        raise BadInput(f"no training span holds a window of SEQ + 1 = {T + 1} tokens")
    return train, val


def val_windows(val, T, limit):
    """gdn eval's held-out windows: SEQ + 1 tokens every SEQ tokens of each piece, the first `limit`."""
    out = []
    for p in val:
        n = 1 + (p.size - T - 1) // T if p.size > T else 0
        out += [p[k * T:k * T + T + 1] for k in range(n)]
    if not out:
        raise BadInput(f"the held-out part (VAL_TOKENS) holds no window of SEQ + 1 = {T + 1} tokens")
    return np.stack(out[:limit])


def lr_at(step, s):
    """gdn's schedule (train/optim.c): linear warm-up, then cosine from LR to LR_MIN; step from 0."""
    if step < s["warmup"]:
        return s["lr"] * (step + 1) / s["warmup"]
    decay = s["steps"] - s["warmup"]
    if decay <= 1:
        return s["lr"]
    p = min(1.0, (step - s["warmup"]) / (decay - 1))
    return s["lr_min"] + 0.5 * (s["lr"] - s["lr_min"]) * (1 + math.cos(math.pi * p))


def llama_config(s):
    """LlamaConfig arguments for gdn's attention block (docs/interop.md, "What maps")."""
    return dict(vocab_size=s["vocab"], hidden_size=s["d_model"], intermediate_size=s["d_ff"],
                num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                head_dim=s["head_dim"], hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000.0,
                max_position_embeddings=max(4096, s["seq"]), tie_word_embeddings=False, attention_bias=False,
                mlp_bias=False, initializer_range=0.02, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def train(s, out, train_pieces, val):
    try:
        import torch
        import torch.nn.functional as F
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        raise BadInput(f"needs torch and transformers ({e}); --check runs without them")

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(s["seed"])
    model = LlamaForCausalLM(LlamaConfig(**llama_config(s))).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"hf_teacher: LlamaForCausalLM, {n_params / 1e6:.3f}M parameters, on {dev}", flush=True)
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": s["weight_decay"]},
                             {"params": vectors, "weight_decay": 0.0}],
                            lr=s["lr"], betas=(0.9, 0.95), eps=1e-8)
    T, B, V = s["seq"], s["batch"], s["vocab"]
    data = torch.from_numpy(np.concatenate(train_pieces)).to(dev)
    # window starts: piece i has size - T of them (gdn's count_starts); start u -> piece offset
    starts = np.array([max(p.size - T, 0) for p in train_pieces])
    first = np.concatenate([[0], np.cumsum([p.size for p in train_pieces])[:-1]])
    cum = np.cumsum(starts)
    rng = np.random.default_rng(s["seed"])
    ar = torch.arange(T + 1, device=dev)
    val_t = torch.from_numpy(val).to(dev)

    def amp():  # bf16 matmuls on the GPU (as gdn's CUDA backend), fp32 on the CPU
        return torch.autocast("cuda", dtype=torch.bfloat16) if dev == "cuda" else torch.autocast("cpu", enabled=False)

    def loss_of(w):
        with amp():
            logits = model(input_ids=w[:, :-1], use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, V), w[:, 1:].reshape(-1))

    @torch.no_grad()
    def evaluate():
        model.eval()
        total = sum(loss_of(val_t[i:i + B]).item() * val_t[i:i + B].shape[0] for i in range(0, len(val_t), B))
        model.train()
        return total / len(val_t)  # every window has T targets: the mean per token

    t0 = time.time()
    val_loss = None
    with open(os.path.join(out, "metrics.jsonl"), "w") as log:
        for step in range(s["steps"]):
            u = rng.integers(0, cum[-1], B)
            piece = np.searchsorted(cum, u, side="right")
            base = torch.from_numpy(first[piece] + u - (cum[piece] - starts[piece])).to(dev)
            w = data[base[:, None] + ar]
            lr = lr_at(step, s)
            for g in opt.param_groups:
                g["lr"] = lr
            loss = loss_of(w)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
            opt.step()
            rec = {"step": step + 1, "loss": loss.item(), "lr": lr, "grad_norm": gnorm,
                   "tokens": (step + 1) * B * T, "time_s": time.time() - t0}
            rec["tokens_per_s"] = rec["tokens"] / max(rec["time_s"], 1e-9)
            if step + 1 == s["steps"] or (s["eval_every"] and (step + 1) % s["eval_every"] == 0):
                rec["val_loss"] = val_loss = evaluate()
            log.write(json.dumps(rec) + "\n")
            log.flush()
            if "val_loss" in rec or (step + 1) % 10 == 0 or step == 0:
                print(f"step {step + 1}/{s['steps']} loss {rec['loss']:.4f} lr {lr:.2e} "
                      f"{rec['tokens_per_s']:,.0f} tok/s" + (f" val_loss {val_loss:.4f}" if "val_loss" in rec else ""),
                      flush=True)
    model.save_pretrained(out)
    return n_params, val_loss


def main(argv):
    args = [a for a in argv[1:] if a != "--check"]
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out, check = args[0], "--check" in argv
    try:
        s = settings()
        spans = load_spans(s["data"], s["vocab"])
        train_pieces, val_pieces = split(spans, s["val_tokens"], s["seq"])
        val = val_windows(val_pieces, s["seq"], s["eval_windows"])
    except BadInput as e:
        print(f"hf_teacher: {e}", file=sys.stderr)
        return 1
    plan = {"settings": s, "tokens": sum(x.size for x in spans),
            "train_tokens": sum(x.size for x in train_pieces), "val_windows": len(val),
            "trained_tokens": s["steps"] * s["batch"] * s["seq"], "llama_config": llama_config(s)}
    if check:
        print(json.dumps(plan, indent=1))
        return 0
    try:
        os.makedirs(out, exist_ok=True)
        for stale in ("model.safetensors", "train.json"):  # the model appears only once training ends
            if os.path.exists(os.path.join(out, stale)):
                os.remove(os.path.join(out, stale))
        n_params, val_loss = train(s, out, train_pieces, val)
    except BadInput as e:
        print(f"hf_teacher: {e}", file=sys.stderr)
        return 1
    plan.update(params=n_params, final_val_loss=val_loss)
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump(plan, f, indent=1)
    print(f"hf_teacher: held-out loss {val_loss:.4f} on {len(val)} windows; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
