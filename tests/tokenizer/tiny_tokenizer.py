#!/usr/bin/env python3
"""Writes a small byte-level BPE tokenizer.json in the Llama 3 / Qwen shape (NFC normalizer,
Split regex + ByteLevel, merges as pairs, added tokens), for tests that need no download.

    python3 tiny_tokenizer.py OUT.json [EXTRA_ADDED_ID]

EXTRA_ADDED_ID: also an added token "<|big|>" with this id (e.g. 70000, past what u16 holds)."""
import json
import sys


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def main():
    m = bytes_to_unicode()
    vocab = {m[b]: b for b in range(256)}
    merges = []
    for word in ["the", " the", " and", "And", " God", " of", "in", " in", "ing", " said"]:
        sym = [m[b] for b in word.encode()]
        while len(sym) > 1:  # left to right: each prefix becomes a token
            a, b = sym[0], sym[1]
            if a + b not in vocab:
                vocab[a + b] = len(vocab)
                merges.append([a, b])
            sym = [a + b] + sym[2:]
    added = [{"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}]
    if len(sys.argv) > 2:
        added.append({"id": int(sys.argv[2]), "content": "<|big|>", "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": {"type": "NFC"},
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                     "ignore_merges": False, "vocab": vocab, "merges": merges}}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
