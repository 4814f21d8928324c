#!/usr/bin/env python3
"""Make the Hugging Face import fixtures: tiny Llama, Qwen2 and Qwen3 decoders with random weights,
saved by transformers itself (config.json + safetensors), with input ids and the logits
transformers computes for them in fp32.

    python3 tests/interop/make_fixtures.py OUT_DIR

Needs torch and transformers (no internet: the models are built from configs). Each fixture
directory holds config.json, model.safetensors (or shards + model.safetensors.index.json) and
expected.json: {"ids": [[...]], "logits_shape": [B, T, V], "logits": [...] (row-major, fp32),
"transformers": version, "dtype": stored tensor dtype}."""
import json
import os
import sys

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

V, HID, INTER = 256, 64, 96
COMMON = dict(vocab_size=V, hidden_size=HID, intermediate_size=INTER, num_hidden_layers=2,
              max_position_embeddings=128, rms_norm_eps=1e-6)

FIXTURES = {
    # name: (config class, model class, config kwargs, stored dtype, shard size or None)
    "llama_gqa_bf16": (LlamaConfig, LlamaForCausalLM,
                       dict(num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                            tie_word_embeddings=False), torch.bfloat16, None),
    "llama_tied_sharded_fp32": (LlamaConfig, LlamaForCausalLM,
                                dict(num_attention_heads=4, num_key_value_heads=4, rope_theta=500000.0,
                                     tie_word_embeddings=True), torch.float32, "60KB"),
    "qwen2_bias_fp32": (Qwen2Config, Qwen2ForCausalLM,
                        dict(num_attention_heads=4, num_key_value_heads=1, rope_theta=1000000.0,
                             tie_word_embeddings=True, use_sliding_window=False), torch.float32, None),
    "qwen3_qknorm_fp16": (Qwen3Config, Qwen3ForCausalLM,
                          dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, rope_theta=1000000.0,
                               tie_word_embeddings=False, use_sliding_window=False), torch.float16, None),
}


def make(out, name, cfg_cls, model_cls, kw, dtype, shard):
    torch.manual_seed(sum(map(ord, name)))
    cfg = cfg_cls(**COMMON, **kw)
    model = model_cls(cfg).eval()
    with torch.no_grad():  # larger-than-default weights so the logits are not all near zero
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn_like(p)) if "norm" in n else p.copy_(0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.08)
    d = os.path.join(out, name)
    model.to(dtype).save_pretrained(d, **({"max_shard_size": shard} if shard else {}))
    # reload what was written, in fp32, so the logits come from the stored (rounded) values
    model = model_cls.from_pretrained(d, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, V, (2, 13), generator=g)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"ids": ids.tolist(), "logits_shape": list(logits.shape),
                   "logits": [round(x, 7) for x in logits.flatten().tolist()],
                   "transformers": transformers.__version__, "dtype": str(dtype).replace("torch.", "")}, f)
    print(name, sorted(os.listdir(d)))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, spec in FIXTURES.items():
        make(out, name, *spec)


if __name__ == "__main__":
    main()
