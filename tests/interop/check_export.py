#!/usr/bin/env python3
"""Load directories written by `gdn export` with transformers (AutoModelForCausalLM, fp32, no
custom code) and compare their logits with gdn's own.

    python3 check_export.py EXPORT_DIR EXPECTED.json [EXPORT_DIR EXPECTED.json ...] [--device cuda]
    python3 check_export.py OUTDIR [--device cuda]     (every NAME/ + NAME.expected.json that
                                                         tests/interop/export_case.sh wrote)

EXPECTED.json: {"ids": [[...]], "logits_shape": [B, T, V], "logits": [...] (row-major fp32)}.
Passes when every tensor of the file was loaded (none missing, unexpected or reshaped), the model
is the architecture config.json names (for Qwen3-Next: every layer of its layer_types with a dense
MLP; hybrids with full RoPE), and max|diff| / max|ref| <= 1e-3 for each case; prints that figure per case. Needs
torch and transformers (checked with torch 2.11, transformers 5.17)."""
import json
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

TOL = 1e-3


def check_case(d, expected, device):
    cfg = json.load(open(os.path.join(d, "config.json")))
    model, info = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, trust_remote_code=False,
                                                       output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise AssertionError(f"{d}: loading was not exact: {problems}")
    if model.config.model_type != cfg["model_type"]:
        raise AssertionError(f"{d}: loaded as {model.config.model_type}, config.json says {cfg['model_type']}")
    if cfg["model_type"] == "qwen3_next":
        for i, layer in enumerate(model.model.layers):
            kind = cfg["layer_types"][i]
            mixer = "linear_attn" if kind == "linear_attention" else "self_attn"
            if not hasattr(layer, mixer) or type(layer.mlp).__name__ != "Qwen3NextMLP":
                raise AssertionError(f"{d}: layer {i} is not a {kind} layer with a dense MLP")
        if "full_attention" in cfg["layer_types"]:  # the export asks for full RoPE
            n_freq = model.model.rotary_emb.inv_freq.numel()
            if 2 * n_freq != cfg["head_dim"]:
                raise AssertionError(f"{d}: RoPE covers {2 * n_freq} of {cfg['head_dim']} dimensions "
                                     "(partial_rotary_factor was not taken as 1.0)")
    model = model.to(device).eval()
    exp = json.load(open(expected))
    ids = torch.tensor(exp["ids"], dtype=torch.long, device=device)
    ref = torch.tensor(exp["logits"], dtype=torch.float64).reshape(exp["logits_shape"])
    with torch.no_grad():
        got = model(input_ids=ids, use_cache=False).logits.double().cpu()
    if got.shape != ref.shape:
        raise AssertionError(f"{d}: logits of shape {tuple(got.shape)}, expected {tuple(ref.shape)}")
    rel = ((got - ref).abs().max() / ref.abs().max()).item()
    ok = rel <= TOL
    print(f"{os.path.basename(os.path.normpath(d))}: {type(model).__name__}, ids {tuple(ids.shape)}, "
          f"max|diff|/max|ref| = {rel:.3e} ({'ok' if ok else 'FAIL'}, tolerance {TOL:g})")
    return ok


def main():
    args = sys.argv[1:]
    device = "cpu"
    if "--device" in args:
        i = args.index("--device")
        device = args[i + 1]
        del args[i:i + 2]
    if device.startswith("cuda"):  # TF32 would cost about 1e-3 of precision: plain fp32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if len(args) == 1:
        root = args[0]
        pairs = []
        for name in sorted(os.listdir(root)):
            exp = os.path.join(root, name + ".expected.json")
            if os.path.isdir(os.path.join(root, name)) and os.path.exists(exp):
                pairs.append((os.path.join(root, name), exp))
        if not pairs:
            raise SystemExit(f"{root}: no NAME/ with NAME.expected.json beside it")
    elif len(args) >= 2 and len(args) % 2 == 0:
        pairs = list(zip(args[0::2], args[1::2]))
    else:
        raise SystemExit(__doc__)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}")
    bad = [d for d, e in pairs if not check_case(d, e, device)]
    if bad:
        raise SystemExit(f"{len(bad)} of {len(pairs)} exports differ from gdn beyond {TOL:g}: {bad}")
    print(f"all {len(pairs)} exports match gdn's logits")


if __name__ == "__main__":
    main()
