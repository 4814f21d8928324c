#!/usr/bin/env python3
"""gdn export end to end (NumPy and h5py; no torch):

- tiny checkpoints of each kind (GDN models, hybrids of GDN and attention layers with q/k norms,
  Qwen3-style attention with q/k norms and GQA, a Qwen2-style one with q/k/v biases and tied
  embeddings, Llama-style ones with and without biases), trained a few
  steps at a high learning rate so that norms, gates and biases are far from their initial values;
- each export is a well-formed directory: config.json (the architecture's fields, floats written
  as floats) and model.safetensors (header, dtypes, shapes, offsets tiling the data exactly);
- every tensor equals the checkpoint's under the mapping of docs/interop.md ("Export");
- a NumPy fp64 forward pass written from transformers' Qwen3-Next / Llama / Qwen2 / Qwen3 modelling
  code, reading only the exported directory, gives gdn's own logits (export_case_logits) to 1e-4;
  its Llama / Qwen2 / Qwen3 part first reproduces transformers' logits on the import fixtures
  (tests/interop/fixtures, written by transformers 5.17);
- bf16 export stores the round-to-nearest-even bfloat16 of each value;
- refusals (hybrids without q/k norms, other mixers, allow_neg_eigval, a non-empty --out without --force, --out a
  file or a symbolic link) exit 1 with a message naming the reason and leave nothing behind; a
  write that fails (file size limit) leaves an existing --out as it was; usage errors exit 2.

    export_hf.py GDN EXPORT_CASE_LOGITS"""
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np

GDN, LOGITS = sys.argv[1], sys.argv[2]
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BASE = ["--preset", "tiny", "--data", os.path.join(SRC, "data", "kjv.txt.gz"), "--d_model", "32",
        "--n_layers", "2", "--d_ff", "48", "--seq_len", "32", "--batch_size", "2", "--steps", "4",
        "--warmup_steps", "0", "--lr", "0.05", "--eval_every", "0", "--backend", "cpu"]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def run(args, expect=0):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != expect:
        print(r.stdout, r.stderr)
        raise SystemExit(f"{args[:3]}: exit {r.returncode}, expected {expect}")
    return r


def train(tmp, name, extra):
    out = os.path.join(tmp, name)
    run([GDN, "train", *BASE, "--out", out, *extra])
    return os.path.join(out, "ckpt_00000004.h5")


# ---- files ------------------------------------------------------------------------------------

def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), ((u >> 16) | 0x40).astype(np.uint16), r)


def read_safetensors(path):
    """A minimal reader that checks the layout strictly: {name: (dtype, raw array)}."""
    data = open(path, "rb").read()
    check(len(data) >= 8, f"{path}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    check(n % 8 == 0 and 8 + n <= len(data), f"{path}: header length {n} (file {len(data)} bytes)")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    check(header.get("__metadata__") == {"format": "pt"}, f"{path}: __metadata__ {header.get('__metadata__')}")
    buf = data[8 + n:]
    spans, out = [], {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (b, e) = t["dtype"], t["shape"], t["data_offsets"]
        size = {"F32": 4, "BF16": 2, "F16": 2}.get(dt)
        check(size is not None, f"{name}: dtype {dt}")
        check(e - b == size * int(np.prod(shape, dtype=np.int64)), f"{name}: {e - b} bytes for {shape}")
        spans.append((b, e))
        raw = np.frombuffer(buf[b:e], dtype={"F32": "<f4", "BF16": "<u2", "F16": "<f2"}[dt]).reshape(shape)
        out[name] = (dt, raw)
    spans.sort()
    pos = 0
    for b, e in spans:
        check(b == pos, f"{path}: data_offsets leave a gap or overlap at {pos}")
        pos = e
    check(pos == len(buf), f"{path}: the data buffer has {len(buf)} bytes, the tensors {pos}")
    return out


def load_export(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):  # the sharded fixtures written by transformers
        raw = {}
        for shard in sorted(set(json.load(open(index))["weight_map"].values())):
            raw.update(read_safetensors(os.path.join(d, shard)))
    else:
        raw = read_safetensors(os.path.join(d, "model.safetensors"))
    w = {k: (bf16_to_f32(v) if dt == "BF16" else v).astype(np.float64) for k, (dt, v) in raw.items()}
    return cfg, raw, w


# ---- the mapping ------------------------------------------------------------------------------

def expected_tensors(ck, arch):
    """The exported tensors computed from the checkpoint (h5py) by the mapping in docs/interop.md."""
    with h5py.File(ck, "r") as f:
        p = {k: f["params"][k][()] for k in f["params"]}
        m = {k: f["model_config"].attrs[k] for k in f["model_config"].attrs}
    mix = m["mixers"].decode() if isinstance(m["mixers"], bytes) else str(m["mixers"])
    L = int(m["n_layers"])
    mix = (mix * L)[:L]
    gdn = "G" in mix  # Qwen3-Next: all G, or a hybrid of G and A
    one = np.float32(1)
    e = {"model.embed_tokens.weight": p["model.embeddings.weight"],
         "model.norm.weight": p["model.norm.weight"] - one if gdn else p["model.norm.weight"]}
    if not m["tie_embeddings"]:
        e["lm_head.weight"] = p["lm_head.weight"]
    for l in range(L):
        o, n = f"model.layers.{l}.attn.", f"model.layers.{l}."
        norm = (lambda x: x - one) if gdn else (lambda x: x)
        e[n + "input_layernorm.weight"] = norm(p[n + "attn_norm.weight"])
        e[n + "post_attention_layernorm.weight"] = norm(p[n + "mlp_norm.weight"])
        for k in ("gate_proj", "up_proj", "down_proj"):
            e[n + f"mlp.{k}.weight"] = p[n + f"mlp.{k}.weight"]
        if gdn and mix[l] == "A":  # Qwen3-Next gated attention with a constant gate
            H, D = int(m["n_heads"]), int(m["d_model"])
            Da = int(m["attn_head_dim"]) or int(m["head_dim"])
            Hkv = int(m["n_kv_heads"]) or H
            q = p[o + "q_proj.weight"].reshape(H, Da, D)
            e[n + "self_attn.q_proj.weight"] = np.concatenate([q, np.zeros_like(q)], 1).reshape(2 * H * Da, D)
            qb = p[o + "q_proj.bias"].reshape(H, Da) if m["qkv_bias"] else np.zeros((H, Da), np.float32)
            e[n + "self_attn.q_proj.bias"] = np.concatenate([qb, np.full((H, Da), 1e4, np.float32)], 1).ravel()
            for k in ("k_proj", "v_proj"):
                e[n + f"self_attn.{k}.weight"] = p[o + f"{k}.weight"]
                e[n + f"self_attn.{k}.bias"] = p[o + f"{k}.bias"] if m["qkv_bias"] else np.zeros(Hkv * Da, np.float32)
            e[n + "self_attn.o_proj.weight"] = p[o + "o_proj.weight"]
            e[n + "self_attn.o_proj.bias"] = np.zeros(D, np.float32)
            e[n + "self_attn.q_norm.weight"] = p[o + "q_norm.weight"] - one
            e[n + "self_attn.k_norm.weight"] = p[o + "k_norm.weight"] - one
        elif gdn:
            H, K = int(m["n_heads"]), int(m["head_dim"])
            V = K * int(m["expand_v"])
            q, k, v, z = (p[o + s].reshape(H, -1, p[o + s].shape[1]) for s in
                          ("q_proj.weight", "k_proj.weight", "v_proj.weight", "g_proj.weight"))
            e[n + "linear_attn.in_proj_qkvz.weight"] = np.concatenate([q, k, v, z], axis=1).reshape(H * (2 * K + 2 * V), -1)
            e[n + "linear_attn.in_proj_ba.weight"] = np.stack([p[o + "b_proj.weight"], p[o + "a_proj.weight"]], 1).reshape(2 * H, -1)
            e[n + "linear_attn.conv1d.weight"] = np.concatenate([p[o + "q_conv1d.weight"], p[o + "k_conv1d.weight"], p[o + "v_conv1d.weight"]])
            e[n + "linear_attn.A_log"] = p[o + "A_log"]
            e[n + "linear_attn.dt_bias"] = p[o + "dt_bias"]
            e[n + "linear_attn.norm.weight"] = p[o + "o_norm.weight"]
            e[n + "linear_attn.out_proj.weight"] = p[o + "o_proj.weight"]
        else:
            for k in ("q_proj", "k_proj", "v_proj", "o_proj"):
                e[n + f"self_attn.{k}.weight"] = p[o + f"{k}.weight"]
            if m["qkv_bias"]:
                for k in ("q_proj", "k_proj", "v_proj"):
                    e[n + f"self_attn.{k}.bias"] = p[o + f"{k}.bias"]
                if arch != "qwen2":  # Llama's and Qwen3's attention_bias: a zero o_proj bias
                    e[n + "self_attn.o_proj.bias"] = np.zeros(int(m["d_model"]), np.float32)
            if m["qk_norm"]:
                e[n + "self_attn.q_norm.weight"] = p[o + "q_norm.weight"]
                e[n + "self_attn.k_norm.weight"] = p[o + "k_norm.weight"]
    return e, m


# ---- the transformers architectures in NumPy (fp64) -------------------------------------------

def silu(x):
    return x / (1 + np.exp(-x))


def rms(x, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def mlp(w, n, h):
    return (silu(h @ w[n + "mlp.gate_proj.weight"].T) * (h @ w[n + "mlp.up_proj.weight"].T)) @ w[n + "mlp.down_proj.weight"].T


def head(cfg, w, x):
    lm = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ lm.T


def rope_tables(theta, dim, T):
    inv = 1.0 / (theta ** (np.arange(0, dim, 2) / dim))
    fr = np.arange(T)[:, None] * inv[None]
    return np.cos(np.concatenate([fr, fr], -1)), np.sin(np.concatenate([fr, fr], -1))


def softmax_attention(q, k, v):
    """Causal grouped-query attention of q [B,H,T,Dh], k, v [B,Hkv,T,Dh]."""
    T, Dh = q.shape[2], q.shape[3]
    k, v = np.repeat(k, q.shape[1] // k.shape[1], axis=1), np.repeat(v, q.shape[1] // v.shape[1], axis=1)
    sc = q @ k.transpose(0, 1, 3, 2) * Dh ** -0.5 + np.triu(np.full((T, T), -np.inf), 1)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def qwen3_next_attention(cfg, w, s, h):
    """Qwen3NextAttention: gated output, (1 + w) q/k norms, partial RoPE (eager attention)."""
    eps, H, Hkv, Dh = cfg["rms_norm_eps"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    B, T, _ = h.shape

    def lin(name):
        y = h @ w[s + name + ".weight"].T
        return y + w[s + name + ".bias"] if cfg["attention_bias"] else y
    qg = lin("q_proj").reshape(B, T, H, 2 * Dh)
    q, gate = qg[..., :Dh], qg[..., Dh:].reshape(B, T, H * Dh)
    q = (rms(q, eps) * (1 + w[s + "q_norm.weight"])).transpose(0, 2, 1, 3)
    k = (rms(lin("k_proj").reshape(B, T, Hkv, Dh), eps) * (1 + w[s + "k_norm.weight"])).transpose(0, 2, 1, 3)
    v = lin("v_proj").reshape(B, T, Hkv, Dh).transpose(0, 2, 1, 3)
    rp = cfg["rope_parameters"]
    prf = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
    dim = int(Dh * prf)
    cos, sin = rope_tables(rp["rope_theta"], dim, T)
    q = np.concatenate([q[..., :dim] * cos + rotate_half(q[..., :dim]) * sin, q[..., dim:]], -1)
    k = np.concatenate([k[..., :dim] * cos + rotate_half(k[..., :dim]) * sin, k[..., dim:]], -1)
    o = softmax_attention(q, k, v).transpose(0, 2, 1, 3).reshape(B, T, -1)
    y = (o * (1 / (1 + np.exp(-gate)))) @ w[s + "o_proj.weight"].T
    return y + w[s + "o_proj.bias"] if cfg["attention_bias"] else y


def qwen3_next_forward(cfg, w, ids):
    """Qwen3NextForCausalLM with dense MLPs: linear_attention layers (recurrent form) and
    full_attention layers."""
    eps, nk, nv = cfg["rms_norm_eps"], cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    K, V, W = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"]
    assert cfg["hidden_act"] == "silu"
    assert sorted(cfg["mlp_only_layers"]) == list(range(cfg["num_hidden_layers"]))
    r = nv // nk
    x = w["model.embed_tokens.weight"][ids]
    B, T, _ = x.shape
    for l in range(cfg["num_hidden_layers"]):
        n = f"model.layers.{l}."
        a_ = n + "linear_attn."
        h = rms(x, eps) * (1 + w[n + "input_layernorm.weight"])
        if cfg["layer_types"][l] == "full_attention":
            x = x + qwen3_next_attention(cfg, w, n + "self_attn.", h)
            x = x + mlp(w, n, rms(x, eps) * (1 + w[n + "post_attention_layernorm.weight"]))
            continue
        assert cfg["layer_types"][l] == "linear_attention"
        qkvz = (h @ w[a_ + "in_proj_qkvz.weight"].T).reshape(B, T, nk, 2 * K + 2 * V * r)
        q, k, v, z = np.split(qkvz, [K, 2 * K, 2 * K + V * r], axis=3)
        v, z = v.reshape(B, T, nv, V), z.reshape(B, T, nv, V)
        ba = (h @ w[a_ + "in_proj_ba.weight"].T).reshape(B, T, nk, 2 * r)
        b, a = ba[..., :r].reshape(B, T, nv), ba[..., r:].reshape(B, T, nv)
        mixed = np.concatenate([q.reshape(B, T, -1), k.reshape(B, T, -1), v.reshape(B, T, -1)], -1)
        cw = w[a_ + "conv1d.weight"][:, 0, :]  # [C, W]
        pad = np.concatenate([np.zeros((B, W - 1, mixed.shape[2])), mixed], 1)
        conv = sum(pad[:, j:j + T, :] * cw[:, j] for j in range(W))
        mixed = silu(conv)
        q = mixed[..., :nk * K].reshape(B, T, nk, K)
        k = mixed[..., nk * K:2 * nk * K].reshape(B, T, nk, K)
        v = mixed[..., 2 * nk * K:].reshape(B, T, nv, V)
        beta = 1 / (1 + np.exp(-b))
        g = -np.exp(w[a_ + "A_log"]) * softplus(a + w[a_ + "dt_bias"])
        q, k = np.repeat(q, r, axis=2), np.repeat(k, r, axis=2)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * K ** -0.5
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        S = np.zeros((B, nv, K, V))
        o = np.zeros((B, T, nv, V))
        for t in range(T):
            S = S * np.exp(g[:, t])[..., None, None]
            kv_mem = (S * k[:, t][..., None]).sum(-2)
            delta = (v[:, t] - kv_mem) * beta[:, t][..., None]
            S = S + k[:, t][..., None] * delta[..., None, :]
            o[:, t] = (S * q[:, t][..., None]).sum(-2)
        o = rms(o, eps) * w[a_ + "norm.weight"] * silu(z)
        x = x + o.reshape(B, T, -1) @ w[a_ + "out_proj.weight"].T
        x = x + mlp(w, n, rms(x, eps) * (1 + w[n + "post_attention_layernorm.weight"]))
    return head(cfg, w, rms(x, eps) * (1 + w["model.norm.weight"]))


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], -1)


def llama_forward(cfg, w, ids):
    """LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM (eager attention, full RoPE)."""
    eps, H, Hkv = cfg["rms_norm_eps"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    # Qwen2 has no head_dim setting (hidden_size / num_attention_heads); Llama and Qwen3 read it
    Dh = cfg["hidden_size"] // H if cfg["model_type"] == "qwen2" else cfg["head_dim"]
    rp = cfg["rope_parameters"]
    assert rp["rope_type"] == "default" and cfg["hidden_act"] == "silu"
    x = w["model.embed_tokens.weight"][ids]
    B, T, _ = x.shape
    inv = 1.0 / (rp["rope_theta"] ** (np.arange(0, Dh, 2) / Dh))
    fr = np.arange(T)[:, None] * inv[None]
    cos, sin = np.cos(np.concatenate([fr, fr], -1)), np.sin(np.concatenate([fr, fr], -1))
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg["num_hidden_layers"]):
        n = f"model.layers.{l}."
        s = n + "self_attn."
        h = rms(x, eps) * w[n + "input_layernorm.weight"]

        def proj(name, heads):
            y = h @ w[s + name + ".weight"].T
            if s + name + ".bias" in w:
                y = y + w[s + name + ".bias"]
            return y.reshape(B, T, heads, Dh).transpose(0, 2, 1, 3)
        q, k, v = proj("q_proj", H), proj("k_proj", Hkv), proj("v_proj", Hkv)
        if s + "q_norm.weight" in w:
            q, k = rms(q, eps) * w[s + "q_norm.weight"], rms(k, eps) * w[s + "k_norm.weight"]
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
        sc = q @ k.transpose(0, 1, 3, 2) * Dh ** -0.5 + mask
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = (p @ v).transpose(0, 2, 1, 3).reshape(B, T, -1) @ w[s + "o_proj.weight"].T
        if s + "o_proj.bias" in w:
            o = o + w[s + "o_proj.bias"]
        x = x + o
        x = x + mlp(w, n, rms(x, eps) * w[n + "post_attention_layernorm.weight"])
    return head(cfg, w, rms(x, eps) * w["model.norm.weight"])


# ---- the cases --------------------------------------------------------------------------------

CASES = {
    # name: (train options, model_type, class)
    "gdn": (["--mixers", "G", "--n_heads", "2", "--head_dim", "8", "--expand_v", "2", "--conv_width", "4"],
            "qwen3_next", "Qwen3NextForCausalLM"),
    "gdn_tied_w3": (["--mixers", "G", "--n_heads", "4", "--head_dim", "4", "--expand_v", "1", "--conv_width", "3",
                     "--tie_embeddings", "true", "--norm_eps", "1e-5"], "qwen3_next", "Qwen3NextForCausalLM"),
    # a hybrid: Qwen3-Next full_attention layers with a constant gate, full RoPE, GQA, biases
    "hybrid": (["--mixers", "AGG", "--n_layers", "3", "--n_heads", "4", "--head_dim", "8", "--n_kv_heads", "2",
                "--attn_head_dim", "6", "--qk_norm", "true", "--qkv_bias", "true", "--rope_theta", "300"],
               "qwen3_next", "Qwen3NextForCausalLM"),
    "hybrid_nobias": (["--mixers", "GA", "--n_heads", "2", "--head_dim", "8", "--qk_norm", "true"],
                      "qwen3_next", "Qwen3NextForCausalLM"),
    "qwen3": (["--mixers", "A", "--n_heads", "4", "--n_kv_heads", "2", "--attn_head_dim", "6", "--qk_norm", "true",
               "--rope_theta", "500"], "qwen3", "Qwen3ForCausalLM"),
    "qwen3_bias": (["--mixers", "A", "--n_heads", "2", "--attn_head_dim", "8", "--qk_norm", "true",
                    "--qkv_bias", "true"], "qwen3", "Qwen3ForCausalLM"),
    "qwen2": (["--mixers", "A", "--n_heads", "4", "--n_kv_heads", "1", "--attn_head_dim", "8", "--qkv_bias", "true",
               "--tie_embeddings", "true"], "qwen2", "Qwen2ForCausalLM"),
    "llama": (["--mixers", "A", "--n_heads", "4", "--n_kv_heads", "2", "--attn_head_dim", "8"],
              "llama", "LlamaForCausalLM"),
    # biases with a head_dim other than d_model / n_heads, which Qwen2 cannot express
    "llama_bias": (["--mixers", "A", "--n_heads", "2", "--attn_head_dim", "12", "--qkv_bias", "true"],
                   "llama", "LlamaForCausalLM"),
}


def case(tmp, name, opts, model_type, cls):
    ck = train(tmp, name, opts + ["--seed", str(len(name))])
    d = os.path.join(tmp, name + "_hf")
    run([GDN, "export", ck, "--out", d])
    check(sorted(os.listdir(d)) == ["config.json", "model.safetensors"], f"{name}: files {os.listdir(d)}")
    check(not [x for x in os.listdir(tmp) if ".tmp." in x or ".old." in x], f"{name}: temporary directories left")
    cfg, raw, w = load_export(d)
    check(cfg["model_type"] == model_type and cfg["architectures"] == [cls], f"{name}: {cfg['model_type']}")
    check(cfg["dtype"] == "float32", f"{name}: dtype {cfg['dtype']}")
    for key in ("rms_norm_eps", "initializer_range"):
        check(isinstance(cfg[key], float), f"{name}: {key} is not written as a float")
    check(isinstance(cfg["rope_parameters"]["rope_theta"], float), f"{name}: rope_theta is not a float")
    exp, m = expected_tensors(ck, model_type)
    check(sorted(raw) == sorted(exp), f"{name}: tensors {sorted(set(raw) ^ set(exp))} differ")
    for k in exp:
        if k in raw:
            dt, v = raw[k]
            check(dt == "F32" and v.shape == exp[k].shape and np.array_equal(v, exp[k]),
                  f"{name}: {k} differs from the checkpoint under the mapping")
    check(abs(cfg["rms_norm_eps"] - float(m["norm_eps"])) == 0, f"{name}: rms_norm_eps")
    # the transformers architecture, written out in NumPy, over the exported files: gdn's logits
    ref_path = os.path.join(tmp, name + "_expected.json")
    run([LOGITS, ck, ref_path, "2", "37", "3"])
    ref = json.load(open(ref_path))
    ids = np.array(ref["ids"])
    want = np.array(ref["logits"]).reshape(ref["logits_shape"])
    got = (qwen3_next_forward if model_type == "qwen3_next" else llama_forward)(cfg, w, ids)
    rel = np.abs(got - want).max() / np.abs(want).max()
    print(f"{name}: {model_type}, {len(raw)} tensors, max|diff|/max|ref| = {rel:.2e}")
    check(rel <= 1e-4, f"{name}: the {model_type} forward pass of the export differs from gdn: {rel:.3e}")
    return ck, d


def expect_fail(args, status, text, what):
    r = subprocess.run(args, capture_output=True, text=True)
    check(r.returncode == status, f"{what}: exit {r.returncode}, expected {status}: {r.stderr}")
    check(text in r.stderr, f"{what}: message lacks '{text}': {r.stderr}")


def anchor_reference():
    """The NumPy Llama / Qwen2 / Qwen3 forward pass reproduces transformers' own logits on the
    fixtures transformers 5.17 wrote (tests/interop/fixtures), so it stands for transformers."""
    root = os.path.join(SRC, "tests", "interop", "fixtures")
    for name in sorted(os.listdir(root)):
        cfg, _, w = load_export(os.path.join(root, name))
        exp = json.load(open(os.path.join(root, name, "expected.json")))
        want = np.array(exp["logits"]).reshape(exp["logits_shape"])
        got = llama_forward(cfg, w, np.array(exp["ids"]))
        rel = np.abs(got - want).max() / np.abs(want).max()
        print(f"reference vs transformers {exp['transformers']} on {name}: {rel:.2e}")
        check(rel <= 1e-4, f"the NumPy {cfg['model_type']} reference differs from transformers on {name}: {rel:.3e}")


def main():
    anchor_reference()
    with tempfile.TemporaryDirectory() as tmp:
        cks = {name: case(tmp, name, *spec) for name, spec in CASES.items()}
        gck, gdir = cks["gdn"]

        # bf16: every value the round-to-nearest-even bfloat16 of the f32 export
        bd = os.path.join(tmp, "bf16_hf")
        run([GDN, "export", gck, "--out", bd, "--dtype", "bf16"])
        cfg, raw, _ = load_export(bd)
        _, raw32, _ = load_export(gdir)
        check(cfg["dtype"] == "bfloat16", "bf16: config dtype")
        for k, (dt, v) in raw.items():
            check(dt == "BF16" and np.array_equal(v, f32_to_bf16(raw32[k][1])), f"bf16: {k} is not the rounded f32")

        # --out: a non-empty directory is kept unless --force; a file is refused; an empty one is used
        keep = os.path.join(tmp, "keep")
        os.makedirs(keep)
        open(os.path.join(keep, "mine.txt"), "w").write("user data")
        expect_fail([GDN, "export", gck, "--out", keep], 1, "exists and is not empty", "non-empty --out")
        check(os.listdir(keep) == ["mine.txt"], "a refused export touched the non-empty --out")
        run([GDN, "export", gck, "--out", keep + "/", "--force"])
        check(sorted(os.listdir(keep)) == ["config.json", "model.safetensors"], "--force did not replace --out")
        afile = os.path.join(tmp, "afile")
        open(afile, "w").write("x")
        expect_fail([GDN, "export", gck, "--out", afile], 1, "is not a directory", "--out a file")
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        run([GDN, "export", gck, "--out", empty])
        check(sorted(os.listdir(empty)) == ["config.json", "model.safetensors"], "an empty --out was not used")
        expect_fail([GDN, "export", gck, "--out", os.path.join(tmp, "no", "such", "dir")], 1,
                    "does the parent directory of --out exist?", "--out in a missing directory")

        link = os.path.join(tmp, "link")
        os.symlink(empty, link)
        expect_fail([GDN, "export", gck, "--out", link, "--force"], 1, "a symbolic link", "--out a symlink")
        check(os.path.islink(link), "a refused export replaced the symbolic link")

        # a write that fails (file size limit: EFBIG) leaves --out as it was and no temporary directory
        def small_files():
            resource.setrlimit(resource.RLIMIT_FSIZE, (40000, 40000))
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        before = {n: open(os.path.join(keep, n), "rb").read() for n in os.listdir(keep)}
        r = subprocess.run([GDN, "export", gck, "--out", keep, "--force"], capture_output=True, text=True,
                           preexec_fn=small_files)
        check(r.returncode == 1 and "writing failed" in r.stderr, f"failed write: exit {r.returncode}: {r.stderr}")
        after = {n: open(os.path.join(keep, n), "rb").read() for n in os.listdir(keep)}
        check(before == after, "a failed export changed the existing --out")
        check(not [x for x in os.listdir(tmp) if ".tmp." in x or ".old." in x], "a failed write left a temporary directory")

        # models that cannot be exported: exit 1, the reason, no directory
        refused = {
            "hybrid_no_qknorm": (["--mixers", "GA", "--n_heads", "2", "--head_dim", "8"],
                                 "hybrids are exported only with qk_norm"),
            "deltanet": (["--mixers", "GD", "--n_heads", "2", "--head_dim", "8"],
                         "layer 1 is 'D' (deltanet)"),
            "negeig": (["--mixers", "G", "--n_heads", "2", "--head_dim", "8", "--allow_neg_eigval", "true"],
                       "allow_neg_eigval = 1"),
        }
        for name, (opts, text) in refused.items():
            ck = train(tmp, name, opts)
            out = os.path.join(tmp, name + "_hf")
            expect_fail([GDN, "export", ck, "--out", out], 1, text, name)
            check(not os.path.exists(out), f"{name}: a refused export left {out}")
        expect_fail([GDN, "export", os.path.join(tmp, "missing.h5"), "--out", os.path.join(tmp, "m_hf")], 1,
                    "missing.h5", "a missing checkpoint")
        check(not os.path.exists(os.path.join(tmp, "m_hf")), "a failed export left its --out")
        check(not [x for x in os.listdir(tmp) if ".tmp." in x], "a failed export left a temporary directory")

        # inputs that are no checkpoint: exit 1, naming the file, no --out
        junk = os.path.join(tmp, "junk.h5")
        open(junk, "wb").write(b"not an HDF5 file" * 100)
        cut = os.path.join(tmp, "cut.h5")
        open(cut, "wb").write(open(gck, "rb").read()[:5000])
        for bad in (junk, cut, tmp):
            out = os.path.join(tmp, "bad_hf")
            expect_fail([GDN, "export", bad, "--out", out], 1, bad, f"export of {bad}")
            check(not os.path.exists(out), f"export of {bad} left {out}")

        # usage errors
        expect_fail([GDN, "export", gck, "--out", ""], 2, "give --out HF_DIR", "empty --out")
        expect_fail([GDN, "export", gck], 2, "give --out HF_DIR", "no --out")
        expect_fail([GDN, "export", "--out", bd], 2, "give the checkpoint", "no checkpoint")
        expect_fail([GDN, "export", gck, "--out", bd, "--dtype", "f16"], 2, "use f32 or bf16", "bad --dtype")
        expect_fail([GDN, "export", gck, "--out"], 2, "--out needs a value", "--out without a value")
        r = subprocess.run([GDN, "export", "--help"], capture_output=True, text=True)
        check(r.returncode == 0 and "Qwen3-Next" in r.stdout, "gdn export --help")
    if failures:
        raise SystemExit(f"{len(failures)} failure(s)")
    print("export_hf: ok")


if __name__ == "__main__":
    main()
