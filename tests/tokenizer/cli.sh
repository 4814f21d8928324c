#!/usr/bin/env bash
# gdn tokenize, gdn data --tokenizer, gdn train --tokenizer and gdn sample with a small
# tokenizer.json made on the spot (tiny_tokenizer.py; no download): round trips, shards equal to
# gdn tokenize's ids, PREFIX_data.json, the u16 refusal, and the messages for bad input.
#   bash cli.sh PATH/TO/gdn
set -euo pipefail
source "$(dirname "$0")/../e2e/lib.sh"
here=$SRC/tests/tokenizer
py=/usr/bin/python3
tok=$dir/tok.json
$py "$here/tiny_tokenizer.py" "$tok"

# round trip: NFC text, an added token, invalid UTF-8, CRLF
printf 'And God said, Let there be light<|endoftext|>\r\nin the beginning \xff\xfe caf\xc3\xa9\n' > "$dir/a.txt"
"$GDN" tokenize --tokenizer "$tok" --in "$dir/a.txt" --out "$dir/a.json" > /dev/null
grep -q '"\?[0-9]' "$dir/a.json" || fail "no ids written"
"$GDN" tokenize --tokenizer "$tok" --in "$dir/a.json" --out "$dir/a.back" --decode > /dev/null
cmp -s "$dir/a.txt" "$dir/a.back" || fail "decode(encode(text)) differs from the text"
$py - "$dir/a.json" <<'PY' || fail "the added token was not one id"
import json, sys
ids = json.load(open(sys.argv[1]))
assert 256 + 0 <= max(ids) and ids.count(max(ids)) == 1, ids
PY

# gdn data: a glob of a plain and a gzip file, two threads; the shards hold each file's ids
gzip -dc "$SRC/data/kjv.txt.gz" > "$dir/kjv.txt"
for i in 1 2; do head -c $((1500000 * i)) "$dir/kjv.txt" | tail -c 1200000 > "$dir/c$i.txt"; done
gzip -k "$dir/c2.txt" && rm "$dir/c2.txt"
"$GDN" data --in "$dir/c*.txt*" --out "$dir/p" --tokenizer "$tok" --threads 2 --val-tokens 1000 \
  --shard-tokens 200000 > "$dir/data.log"
"$GDN" tokenize --tokenizer "$tok" --in "$dir/c1.txt" --out "$dir/c1.json" > /dev/null
"$GDN" tokenize --tokenizer "$tok" --in "$dir/c2.txt.gz" --out "$dir/c2.json" > /dev/null
$py - "$dir" "$tok" <<'PY' || fail "gdn data's shards or record are wrong"
import glob, json, os, struct, sys
d, tok = sys.argv[1], sys.argv[2]
def shard(p):
    b = open(p, "rb").read()
    magic, version, n = struct.unpack("<3i", b[:12])
    assert magic == 20240520 and version == 1, (p, magic, version)
    return list(struct.unpack("<%dH" % n, b[1024:1024 + 2 * n]))
got = []
for kind in ("train", "val"):
    for p in sorted(glob.glob(f"{d}/p_{kind}_*.bin")):
        got += shard(p)
want = json.load(open(f"{d}/c1.json")) + json.load(open(f"{d}/c2.json"))
assert got == want, (len(got), len(want))
rec = json.load(open(f"{d}/p_data.json"))
assert rec["tokenizer"] == os.path.realpath(tok), rec["tokenizer"]
assert rec["tokenizer_hash"].startswith("fnv1a64:") and len(rec["tokenizer_hash"]) == 24
assert rec["vocab_size"] == max(want) + 1 or rec["vocab_size"] >= max(want) + 1
assert rec["source_bytes"] == 2400000 and rec["train"]["bytes"] + rec["val"]["bytes"] == 2400000
assert rec["val"]["tokens"] == 1000 and rec["train"]["tokens"] == len(want) - 1000
assert rec["train"]["shards"] == len(glob.glob(f"{d}/p_train_*.bin"))
print("gdn data: shards equal gdn tokenize's ids;", rec["train"]["tokens"], "train tokens")
PY

# a vocabulary past u16: u32 by default, u16 refused by name
$py "$here/tiny_tokenizer.py" "$dir/big.json" 70000
"$GDN" data --in "$dir/c1.txt" --out "$dir/b" --tokenizer "$dir/big.json" > /dev/null
$py -c "import struct,sys; assert struct.unpack('<2i', open(sys.argv[1],'rb').read(8))[1] == 2" \
  "$dir/b_train_000000.bin" || fail "a vocabulary past 65536 did not give u32 shards"
expect() { # expect STATUS NEEDLE -- CMD...
  local want=$1 needle=$2; shift 3
  set +e; "$@" > "$dir/out" 2> "$dir/err"; local got=$?; set -e
  [ "$got" -eq "$want" ] || fail "$*: exit status $got, expected $want: $(cat "$dir/err")"
  grep -qF -- "$needle" "$dir/err" || fail "$*: stderr does not mention '$needle': $(cat "$dir/err")"
}
expect 1 "has ids up to 70000, which do not fit u16 shards" -- \
  "$GDN" data --in "$dir/c1.txt" --out "$dir/b" --tokenizer "$dir/big.json" --dtype u16
expect 2 "missing --tokenizer" -- "$GDN" tokenize --in "$dir/a.txt" --out "$dir/x.json"
expect 1 "neither tokenizer.json nor vocab.json + merges.txt" -- \
  "$GDN" tokenize --tokenizer "$dir" --in "$dir/a.txt" --out "$dir/x.json"
printf '{"model": {"vocab": {"a": 0}, "merges": []},\n "pre_tokenizer": {"type": "Metaspace"}}' > "$dir/bad.json"
expect 1 "bad.json:2:19: pre-tokenizer type 'Metaspace' is not supported" -- \
  "$GDN" tokenize --tokenizer "$dir/bad.json" --in "$dir/a.txt" --out "$dir/x.json"
# a write that fails when the file is closed (a full disk) is reported once, the stream closed once
if [ -w /dev/full ]; then
  expect 1 "/dev/full: cannot write: No space left on device" -- \
    "$GDN" tokenize --tokenizer "$tok" --in "$dir/a.txt" --out /dev/full
fi
echo '[1, 2, 99999]' > "$dir/ids.json"
expect 1 "id 99999 (at position 2) is not in the vocabulary" -- \
  "$GDN" tokenize --tokenizer "$tok" --in "$dir/ids.json" --out "$dir/x.txt" --decode
expect 1 "no file matches" -- "$GDN" data --in "$dir/nothing*.txt" --out "$dir/q" --tokenizer "$tok"

# train records the tokenizer; sample decodes with it
"$GDN" train --preset tiny --data "$dir/p_train_*.bin" --vocab_size 512 --tokenizer "$tok" \
  --steps 2 --seq_len 32 --batch_size 2 --eval_every 0 --ckpt_every 0 --out "$dir/run" > "$dir/train.log"
grep -q "\"tokenizer\": \"$(realpath "$tok")\"" "$dir/run/config.json" || fail "the run did not record its tokenizer"
"$GDN" sample --run "$dir/run" --prompt "And God" --bytes 20 --seed 1 > "$dir/sample.txt" 2> /dev/null
head -c 7 "$dir/sample.txt" | grep -q "And God" || fail "sample does not start with the prompt"
expect 2 "needs token shards as data" -- "$GDN" train --preset tiny --data "$dir/c1.txt" --tokenizer "$tok" \
  --vocab_size 512 --steps 1 --out "$dir/run2"
expect 2 "has 280 ids but vocab_size is 256" -- "$GDN" train --preset tiny \
  --data "$dir/p_train_*.bin" --tokenizer "$tok" --steps 1 --out "$dir/run3"
echo "tokenizer CLI: all checks passed"
