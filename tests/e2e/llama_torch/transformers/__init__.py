"""What jobs/hf_teacher.py uses of transformers, in plain PyTorch, for tests/e2e/distill_report.py
on machines with torch but without transformers: LlamaConfig (its keyword arguments as
attributes) and LlamaForCausalLM, the Llama decoder of transformers' modeling_llama (RMSNorm
computed in fp32, half-split RoPE, grouped-query causal softmax attention, SwiGLU MLP, untied
head) under transformers' parameter names, whose save_pretrained writes config.json and an F32
model.safetensors as gdn import reads them (docs/interop.md). Not a replacement for transformers:
only the configuration hf_teacher.py builds (no biases, no cache, no masks)."""
import json
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


class LlamaConfig:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.H, self.KV, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.H * self.hd, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.KV * self.hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.KV * self.hd, bias=False)
        self.o_proj = nn.Linear(self.H * self.hd, c.hidden_size, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.H // self.KV, dim=1)
        v = v.repeat_interleave(self.H // self.KV, dim=1)
        s = (q @ k.transpose(-1, -2)) / self.hd ** 0.5
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        o = torch.softmax(s.float(), -1).to(v.dtype) @ v
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attn(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)


class Out:
    pass


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.model.layers = nn.ModuleList([Layer(c) for _ in range(c.num_hidden_layers)])
        self.model.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.data.normal_(0, c.initializer_range)

    def forward(self, input_ids, use_cache=False):
        c = self.config
        T = input_ids.shape[1]
        inv = c.rope_theta ** (-torch.arange(0, c.head_dim, 2, device=input_ids.device).float() / c.head_dim)
        fr = torch.outer(torch.arange(T, device=input_ids.device).float(), inv)
        emb = torch.cat((fr, fr), -1)
        cos, sin = emb.cos(), emb.sin()
        x = self.model.embed_tokens(input_ids)
        for l in self.model.layers:
            x = x + l.self_attn(l.input_layernorm(x), cos, sin)
            x = x + l.mlp(l.post_attention_layernorm(x))
        o = Out()
        o.logits = self.lm_head(self.model.norm(x))
        return o

    def save_pretrained(self, d):
        cfg = dict(self.config.__dict__, architectures=["LlamaForCausalLM"], model_type="llama",
                   rope_parameters={"rope_theta": self.config.rope_theta, "rope_type": "default"})
        del cfg["rope_theta"]
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
        header, blobs, off = {}, [], 0
        for n, t in self.state_dict().items():
            b = t.detach().float().cpu().contiguous().numpy().tobytes()
            header[n] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
            blobs.append(b)
            off += len(b)
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
