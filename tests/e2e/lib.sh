# Common preamble of the gdn train end-to-end scripts; source it after `set -euo pipefail`.
# Sets GDN (the gdn binary, the script's first argument), SRC (the source tree) and dir (a
# temporary folder removed on exit), and defines fail MESSAGE.
GDN=$1
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
