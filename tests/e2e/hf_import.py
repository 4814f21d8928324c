#!/usr/bin/env python3
"""gdn import of the Hugging Face fixtures in tests/interop/fixtures (tiny Llama, Qwen2 and Qwen3
decoders written by transformers, with the fp32 logits transformers computed for their ids):
every fixture imports, `gdn op logits` on its ids matches transformers to 1e-4 relative
(max |diff| / max |ref|), also with config.json rewritten to the older top-level rope_theta; the
imported checkpoint works with inspect, sample and train --init_from; a tokenizer.json beside the
weights that loads and fits the vocabulary is recorded (absolute path) and gdn sample decodes
with it, one that does not gives a warning and is left out; and every unsupported feature or
damaged input is refused with a message that names it.

    python3 tests/e2e/hf_import.py BUILD/gdn
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np

from e2e_common import check, finish, gdn_runner
GDN = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "interop", "fixtures")
NAMES = ["llama_gqa_bf16", "llama_tied_sharded_fp32", "qwen2_bias_fp32", "qwen3_qknorm_fp16"]
TOL = 1e-4


run = gdn_runner(GDN)


def logits_of(ckpt, ids, tmp, *extra):
    """gdn op logits of ids [B,T] with checkpoint ckpt, or None (the failure recorded)."""
    path_in, path_out = os.path.join(tmp, "ids.h5"), os.path.join(tmp, "logits.h5")
    if os.path.exists(path_out):
        os.remove(path_out)
    with h5py.File(path_in, "w") as f:
        f["ids"] = np.asarray(ids, dtype=np.int32)
    r = run("op", "logits", "--ckpt", ckpt, "--in", path_in, "--out", path_out, *extra)
    check(r.returncode == 0, f"gdn op logits on {ckpt} failed: {r.stderr}")
    if r.returncode:
        return None
    with h5py.File(path_out, "r") as f:
        return f["logits"][()]


def compare(name, src, tmp, label):
    """Imports src (a fixture or a rewritten copy) and checks its logits against expected.json."""
    exp = json.load(open(os.path.join(FIX, name, "expected.json")))
    ckpt = os.path.join(tmp, name + ".h5")
    r = run("import", src, "--out", ckpt)
    check(r.returncode == 0, f"{label}: gdn import failed: {r.stderr}")
    if r.returncode:
        return None
    got = logits_of(ckpt, exp["ids"], tmp)
    if got is None:
        return None
    ref = np.array(exp["logits"], dtype=np.float64).reshape(exp["logits_shape"])
    check(got.shape == ref.shape, f"{label}: logits shape {got.shape}, expected {ref.shape}")
    if got.shape == ref.shape:
        err = np.abs(got - ref).max() / np.abs(ref).max()
        print(f"{label}: max |diff| / max |ref| = {err:.2e} (max |ref| {np.abs(ref).max():.3f})")
        check(err <= TOL, f"{label}: logits differ from transformers by {err:.2e} relative (> {TOL})")
        g64 = logits_of(ckpt, exp["ids"], tmp, "--precision", "fp64")
        if g64 is not None:
            err64 = np.abs(g64 - ref).max() / np.abs(ref).max()
            check(err64 <= TOL, f"{label}: fp64 logits differ from transformers by {err64:.2e} relative")
    return ckpt


def copy_fixture(name, tmp, tag):
    dst = os.path.join(tmp, f"{name}-{tag}")
    shutil.copytree(os.path.join(FIX, name), dst)
    return dst


def edit_config(d, fn):
    p = os.path.join(d, "config.json")
    cfg = json.load(open(p))
    fn(cfg)
    json.dump(cfg, open(p, "w"), indent=2)


def old_rope_form(cfg):
    """transformers 4.x: rope_theta at the top level, no rope_parameters."""
    cfg["rope_theta"] = cfg.pop("rope_parameters")["rope_theta"]


def read_st(path):
    """A safetensors file as (header dict, data bytes)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write_st(path, tensors):
    """tensors: name -> (dtype string, shape, raw bytes), laid out in order."""
    header, off, data = {}, 0, b""
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data += raw
    h = json.dumps(header).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)


def edit_tensors(d, fn):
    """Rewrites d/model.safetensors with fn applied to its {name: (dtype, shape, raw)}."""
    p = os.path.join(d, "model.safetensors")
    hdr, data = read_st(p)
    ts = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
          for k, v in hdr.items() if k != "__metadata__"}
    fn(ts)
    write_st(p, ts)


def refused(d, words, what, code=1):
    """gdn import of d fails with status code and a message holding every word of words."""
    out = d + ".h5"
    r = run("import", d, "--out", out)
    msg = r.stderr.strip()
    check(r.returncode == code, f"{what}: gdn import exited {r.returncode}, expected {code} ({msg})")
    for w in words:
        check(w in msg, f"{what}: the message does not name {w!r}: {msg}")
    check(not os.path.exists(out), f"{what}: a refused import left {out}")
    check("Traceback" not in msg and "Sanitizer" not in msg, f"{what}: crashed: {msg}")
    print(f"refused ({what}): {msg}")


def tokenizer_checks(tmp):
    """HF_DIR/tokenizer.json: recorded as the run's tokenizer when it loads and fits the model's
    vocabulary (gdn sample then decodes with it), a warning and no tokenizer otherwise."""
    tiny = os.path.join(HERE, "..", "tokenizer", "tiny_tokenizer.py")
    d = copy_fixture("llama_gqa_bf16", tmp, "tok")
    tok = os.path.join(d, "tokenizer.json")
    subprocess.run([sys.executable, tiny, tok], check=True)
    full = json.load(open(tok))  # 256 bytes, merges and an added token: more ids than the model's 256
    # the bytes alone, in reverse id order: 256 ids, and decoding differs from the byte-level one
    small = dict(full, added_tokens=[])
    small["model"] = dict(full["model"], merges=[],
                          vocab={k: 255 - v for k, v in full["model"]["vocab"].items() if v < 256})
    json.dump(small, open(tok, "w"))
    rel = os.path.relpath(d)
    out = os.path.join(tmp, "tok.h5")
    r = run("import", rel, "--out", out)
    check(r.returncode == 0 and "warning" not in r.stderr, f"import with a tokenizer.json: {r.stderr}")
    if r.returncode == 0:
        with h5py.File(out, "r") as f:
            cfg = json.loads(f.attrs["config"])
        check(cfg.get("tokenizer") == os.path.realpath(tok),
              f"the imported run records tokenizer {cfg.get('tokenizer')!r}, expected {os.path.realpath(tok)!r}")
        check("tokenizer " + os.path.realpath(tok) in r.stdout, f"the import does not report the tokenizer: {r.stdout}")

        def sample(ck, *extra):
            r = subprocess.run([GDN, "sample", "--ckpt", ck, "--prompt", "ab", "--bytes", "24", "--temperature", "0",
                                *extra], capture_output=True)
            check(r.returncode == 0, f"gdn sample {ck} {extra}: {r.stderr!r}")
            return r.stdout

        plain = os.path.join(tmp, "notok.h5")
        run("import", os.path.join(FIX, "llama_gqa_bf16"), "--out", plain)
        recorded, given, raw = sample(out), sample(out, "--tokenizer", tok), sample(plain)
        check(recorded == given and recorded != raw,
              f"gdn sample does not decode with the recorded tokenizer: {recorded!r}, {given!r}, bytes {raw!r}")
        os.rename(tok, tok + ".away")
        r = subprocess.run([GDN, "sample", "--ckpt", out, "--prompt", "ab", "--bytes", "4"], capture_output=True)
        check(r.returncode != 0 and b"tokenizer the run recorded" in r.stderr,
              f"gdn sample without the recorded tokenizer: {r.returncode} {r.stderr}")
        os.rename(tok + ".away", tok)
    # ones that cannot be used: a warning that says why, the checkpoint without a tokenizer
    for content, words, what in [(json.dumps(full), ["ids", "vocab_size is 256"], "a tokenizer with more ids"),
                                 ("{\"model\": ", ["tokenizer.json", "does not load"], "a damaged tokenizer.json"),
                                 (json.dumps(dict(full, model=dict(full["model"], type="WordPiece"))),
                                  ["WordPiece", "does not load"], "another tokenizer model")]:
        open(tok, "w").write(content)
        out = os.path.join(tmp, "badtok.h5")
        r = run("import", d, "--out", out)
        check(r.returncode == 0 and "warning" in r.stderr and all(w in r.stderr for w in words),
              f"{what}: status {r.returncode}, stderr {r.stderr.strip()!r}")
        if r.returncode == 0:
            with h5py.File(out, "r") as f:
                cfg = json.loads(f.attrs["config"])
            check(cfg.get("tokenizer") == "", f"{what}: recorded {cfg.get('tokenizer')!r}")
            os.remove(out)


def main():
    tmp = tempfile.mkdtemp(prefix="gdn_hf_import_")
    try:
        ckpts = {}
        for name in NAMES:
            ckpts[name] = compare(name, os.path.join(FIX, name), tmp, name)
        # the older config form: top-level rope_theta (non-default thetas, so a lost theta shows)
        for name in ["llama_tied_sharded_fp32", "qwen3_qknorm_fp16"]:
            d = copy_fixture(name, tmp, "oldrope")
            edit_config(d, old_rope_form)
            compare(name, d, tmp, name + " (top-level rope_theta)")

        # the comparison is sensitive: the wrong RoPE base (the default 10000 for Qwen3's 1e6)
        # moves the logits far beyond the tolerance
        d = copy_fixture("qwen3_qknorm_fp16", tmp, "theta")
        edit_config(d, lambda c: c["rope_parameters"].update(rope_theta=10000.0))
        exp = json.load(open(os.path.join(FIX, "qwen3_qknorm_fp16", "expected.json")))
        r = run("import", d, "--out", d + ".h5")
        got = logits_of(d + ".h5", exp["ids"], tmp) if r.returncode == 0 else None
        if got is not None:
            ref = np.array(exp["logits"]).reshape(exp["logits_shape"])
            err = np.abs(got - ref).max() / np.abs(ref).max()
            check(err > 100 * TOL, f"a wrong rope_theta changes the logits by only {err:.2e}")

        # the imported checkpoints are ordinary ones
        ck = ckpts["qwen3_qknorm_fp16"]
        if ck:
            r = run("inspect", ck)
            check(r.returncode == 0, f"gdn inspect failed on an imported checkpoint: {r.stderr}")
            check("mixers=A" in r.stdout and "model.layers.1.attn.q_norm.weight" in r.stdout,
                  f"gdn inspect does not show the attention layers: {r.stdout[:400]}")
            r = subprocess.run([GDN, "sample", "--ckpt", ck, "--prompt", "ab", "--bytes", "16", "--temperature", "0"],
                               capture_output=True)  # random weights: any bytes
            check(r.returncode == 0, f"gdn sample failed on an imported checkpoint: {r.stderr!r}")
            check(r.stdout.startswith(b"ab") and len(r.stdout) == 2 + 16 + 1, f"gdn sample wrote {r.stdout!r}")
            with h5py.File(ck, "r") as f:
                cfg = json.loads(f.attrs["config"])
            corpus = os.path.join(tmp, "corpus.txt")
            rng = np.random.default_rng(3)
            open(corpus, "wb").write(bytes(rng.integers(97, 123, 6000, dtype=np.uint8)))
            cfg.update(data=corpus, out=os.path.join(tmp, "run"), steps=2, seq_len=16, batch_size=2,
                       val_tokens=400, eval_batches=1, backend="cpu", warmup_steps=0)
            cfg_path = os.path.join(tmp, "train.json")
            json.dump(cfg, open(cfg_path, "w"))
            r = run("train", "--config", cfg_path, "--init_from", ck)
            check(r.returncode == 0, f"gdn train --init_from an imported checkpoint failed: {r.stderr[-2000:]}")
            check("initialised weights from" in r.stdout, f"gdn train did not start from the import: {r.stdout[-800:]}")

        tokenizer_checks(tmp)

        # refusals: unsupported features, each named
        base = {"llama": "llama_gqa_bf16", "qwen2": "qwen2_bias_fp32", "qwen3": "qwen3_qknorm_fp16"}
        cases = [
            ("llama", lambda c: c.update(model_type="mistral"), ["model_type", "mistral"], "another model_type"),
            ("llama", lambda c: c.update(architectures=["LlamaForSequenceClassification"]),
             ["LlamaForSequenceClassification"], "another architecture"),
            ("llama", lambda c: c.update(rope_scaling={"rope_type": "linear", "factor": 2.0}),
             ["rope_scaling", "linear"], "rope scaling"),
            ("llama", lambda c: c["rope_parameters"].update(rope_type="yarn", factor=4.0), ["rope_type", "yarn"],
             "a non-default rope_type"),
            ("llama", lambda c: c.update(partial_rotary_factor=0.5), ["partial_rotary_factor"], "partial rotary"),
            ("qwen2", lambda c: c.update(use_sliding_window=True, sliding_window=8), ["use_sliding_window"],
             "sliding windows"),
            ("qwen3", lambda c: c.update(layer_types=["full_attention", "sliding_attention"]),
             ["layer_types[1]", "sliding_attention"], "a sliding layer type"),
            ("qwen3", lambda c: c.update(num_experts=8, num_experts_per_tok=2), ["num_experts", "mixture-of-experts"],
             "MoE fields"),
            ("llama", lambda c: c.update(hidden_act="gelu"), ["hidden_act", "gelu"], "another activation"),
            ("llama", lambda c: c.update(attention_bias=True), ["attention_bias"], "an o_proj bias"),
            ("llama", lambda c: c.update(mlp_bias=True), ["mlp_bias"], "MLP biases"),
            ("qwen3", lambda c: c.update(head_dim=512), ["head_dim 512"], "a head_dim too large"),
            ("qwen3", lambda c: c.update(head_dim=15), ["head_dim 15"], "an odd head_dim"),
            ("llama", lambda c: c.update(num_key_value_heads=3), ["num_key_value_heads 3"], "kv heads not dividing"),
            ("llama", lambda c: c.update(quantization_config={"quant_method": "gptq"}), ["quantization_config"],
             "quantized weights"),
            ("llama", lambda c: c.pop("hidden_size"), ["hidden_size"], "a missing config field"),
            ("llama", lambda c: c.update(num_hidden_layers=3), ["missing tensor", "model.layers.2."],
             "a missing layer"),
            ("llama", lambda c: c.update(intermediate_size=95), ["mlp.gate_proj.weight", "shape [96,64]", "[95,64]"],
             "a shape mismatch"),
            ("qwen2", lambda c: c.update(model_type="llama", architectures=["LlamaForCausalLM"]),
             ["_proj.bias", "no place"], "biases a Llama does not have"),
        ]
        for i, (kind, fn, words, what) in enumerate(cases):
            d = copy_fixture(base[kind], tmp, f"case{i}")
            edit_config(d, fn)
            refused(d, words, what)

        # tie_word_embeddings over weights with their own head: tied, as transformers ties them
        d = copy_fixture("llama_gqa_bf16", tmp, "tied")
        edit_config(d, lambda c: c.update(tie_word_embeddings=True))
        r = run("import", d, "--out", d + ".h5")
        check(r.returncode == 0 and "lm_head.weight" in r.stderr and "tie" in r.stderr,
              f"tied config over an untied head: status {r.returncode}, no warning naming lm_head.weight: {r.stderr}")

        # damaged or unexpected weights
        d = copy_fixture("llama_gqa_bf16", tmp, "notensor")
        edit_tensors(d, lambda ts: ts.pop("model.norm.weight"))
        refused(d, ["missing tensor 'model.norm.weight'"], "a missing tensor")
        d = copy_fixture("llama_gqa_bf16", tmp, "extra")
        edit_tensors(d, lambda ts: ts.update({"model.layers.0.self_attn.o_proj.bias": ("BF16", [64], b"\0" * 128)}))
        refused(d, ["o_proj.bias", "no place"], "an unexpected tensor")
        d = copy_fixture("llama_gqa_bf16", tmp, "int")
        edit_tensors(d, lambda ts: ts.update({"model.norm.weight": ("I16", [64], ts["model.norm.weight"][2])}))
        refused(d, ["model.norm.weight", "I16"], "an integer weight")
        d = copy_fixture("llama_gqa_bf16", tmp, "nan")
        edit_tensors(d, lambda ts: ts.update({"model.norm.weight": ("BF16", [64], b"\xc0\x7f" * 64)}))
        refused(d, ["model.norm.weight", "NaN"], "a NaN weight")
        d = copy_fixture("llama_gqa_bf16", tmp, "trunc")
        p = os.path.join(d, "model.safetensors")
        b = open(p, "rb").read()
        open(p, "wb").write(b[:len(b) - 100])
        refused(d, ["model.safetensors", "truncated"], "a truncated file")
        d = copy_fixture("llama_tied_sharded_fp32", tmp, "noshard")
        os.remove(os.path.join(d, "model-00003-of-00007.safetensors"))
        refused(d, ["model-00003-of-00007.safetensors"], "a missing shard")
        d = copy_fixture("llama_tied_sharded_fp32", tmp, "badindex")
        p = os.path.join(d, "model.safetensors.index.json")
        idx = json.load(open(p))
        idx["weight_map"]["model.norm.weight"] = "model-00001-of-00007.safetensors"
        json.dump(idx, open(p, "w"))
        refused(d, ["model.norm.weight", "model-00001-of-00007.safetensors"], "an index that misplaces a tensor")
        d = copy_fixture("llama_gqa_bf16", tmp, "noconfig")
        os.remove(os.path.join(d, "config.json"))
        refused(d, ["config.json"], "no config.json")
        r = run("import", os.path.join(FIX, NAMES[0]))
        check(r.returncode == 2 and "--out" in r.stderr, f"gdn import without --out: {r.returncode} {r.stderr}")

        # op logits refuses ids outside the vocabulary and non-integer ids
        if ckpts["llama_gqa_bf16"]:
            for ids, words in [(np.array([[1, 256]], np.int32), ["ids[0,1] = 256", "vocabulary"]),
                               (np.array([[1.0, 2.0]]), ["integers"])]:
                p = os.path.join(tmp, "bad_ids.h5")
                with h5py.File(p, "w") as f:
                    f["ids"] = ids
                r = run("op", "logits", "--ckpt", ckpts["llama_gqa_bf16"], "--in", p, "--out", os.path.join(tmp, "o.h5"))
                check(r.returncode != 0 and all(w in r.stderr for w in words),
                      f"gdn op logits on bad ids: status {r.returncode}, {r.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    finish("hf_import")


if __name__ == "__main__":
    main()
