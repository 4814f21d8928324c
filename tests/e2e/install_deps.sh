#!/usr/bin/env bash
# jobs/install_deps.sh --check: hides one need at a time (a command left off PATH, a header the
# compiler "cannot find", an old cmake, a python without h5py) and checks that exactly that need
# is added to what this machine already reports missing, that the main job never asks for the
# test-only needs, and that without a package archive it fails naming what to provide.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deps="$SRC/jobs/install_deps.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# PATH without the names given: each PATH folder holding one of them is replaced by a copy made
# of links (cp -s, one process), less those names.
fake_path() { # fake_path HIDDEN...: prints the new PATH
  local out=() p h real shadow
  local top; top=$(mktemp -d "$dir/path.XXXXXX")
  IFS=: read -r -a ps <<< "$PATH"
  for p in "${ps[@]}"; do
    for h in "$@"; do
      if [ -e "$p/$h" ]; then
        real=$(cd "$p" && pwd -P)
        shadow="$top/${real//\//_}"
        if [ ! -d "$shadow" ]; then
          mkdir -p "$shadow"
          cp -s "$real"/* "$shadow"/ 2> /dev/null || true
          (cd "$shadow" && rm -f "$@")
        fi
        p=$shadow
        break
      fi
    done
    out+=("$p")
  done
  (IFS=:; echo "${out[*]}")
}
# The names of the missing needs reported by --check, sorted, one line.
missing_set() { # missing_set [env assignments...] -- [install_deps args...]
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local out rc=0
  out=$(env ${envs[@]+"${envs[@]}"} bash "$deps" --check "$@" 2>&1) || rc=$?
  [ $rc -le 1 ] || fail "--check $* exited $rc: $out"
  local set; set=$(printf '%s\n' "$out" | sed -n 's/^missing \([^ ]*\): .*/\1/p' | sort | tr '\n' ' ')
  # exit status 1 exactly when something is missing
  if [ -n "$set" ] && [ $rc -ne 1 ]; then fail "--check $*: missing [$set] but exit 0"; fi
  if [ -z "$set" ] && [ $rc -ne 0 ]; then fail "--check $*: exit $rc with nothing reported: $out"; fi
  echo "$set"
}
expect() { # expect WHAT GOT WANTED-NAMES...: WANTED = this machine's baseline plus the names
  local what=$1 got=$2; shift 2
  local want; want=$(printf '%s\n' $base "$@" | grep -v '^$' | sort -u | tr '\n' ' ')
  [ "$got" = "$want" ] || fail "$what: reported missing [$got], expected [$want]"
  echo "ok: $what -> [$got]"
}

base=$(missing_set -- --tests)
echo "this machine already lacks: [${base}]"
base_main=$(missing_set --)
case " $base_main " in *" cmocka "*|*" h5py "*) fail "the main job asks for test-only needs: [$base_main]" ;; esac

# A compiler that cannot find the headers matching $HIDE (as if they were not installed).
cat > "$dir/cc" <<'SH'
#!/usr/bin/env bash
for a; do case $a in *.c) if grep -qE "$HIDE" "$a"; then echo "fatal error: no such header" >&2; exit 1; fi;; esac; done
exec cc "$@"
SH
chmod +x "$dir/cc"
# An old cmake, and a python that cannot import h5py.
mkdir -p "$dir/old"
printf '#!/bin/sh\necho "cmake version 3.10.2"\n' > "$dir/old/cmake"
printf '#!/bin/sh\necho "ModuleNotFoundError: h5py" >&2; exit 1\n' > "$dir/old/python3"
chmod +x "$dir/old/cmake" "$dir/old/python3"

# Several needs hidden at once, each detected by its own probe: commands off PATH, headers the
# compiler cannot find, a python without h5py (nor scipy), a Debian package that does not exist.
p=$(fake_path cmake mpiexec mpirun pkg-config pkgconf make h5cc)
expect "no cmake, mpiexec, pkg-config, make, hdf5.h, zlib.h, cmocka.h, h5py; an unknown package" \
  "$(missing_set PATH="$dir/old:$p" CC="$dir/cc" HIDE='hdf5\.h|zlib\.h|cmocka\.h' \
     GDN_SYSTEM_PYTHON=/nonexistent -- --tests gdn-no-such-package)" \
  cmake mpi pkg-config make hdf5 zlib cmocka h5py scipy package:gdn-no-such-package
# A python with h5py but without scipy (or matplotlib): the scaling analysis's need alone.
real_py=""
for py in python3 /usr/bin/python3; do
  if "$py" -c 'import h5py, numpy' > /dev/null 2>&1; then real_py=$(command -v "$py"); break; fi
done
if [ -n "$real_py" ]; then
  mkdir -p "$dir/noscipy"
  printf '#!/bin/sh\ncase "$*" in *scipy*) echo "ModuleNotFoundError: scipy" >&2; exit 1;; esac\nexec %s "$@"\n' \
    "$real_py" > "$dir/noscipy/python3"
  chmod +x "$dir/noscipy/python3"
  expect "a python without scipy" \
    "$(missing_set PATH="$dir/noscipy:$PATH" GDN_SYSTEM_PYTHON=/nonexistent -- --tests)" scipy
else
  echo "skipped: a python without scipy (no python here imports h5py to wrap)"
fi
# cmake too old, no mpicc, no OpenMP.
expect "cmake 3.10, no mpicc, no omp.h" \
  "$(missing_set PATH="$dir/old:$(fake_path mpicc)" CC="$dir/cc" HIDE='omp\.h' -- --tests)" cmake mpi openmp
expect "no C compiler" "$(missing_set CC=/nonexistent/cc -- --tests)" compiler
# pkg-config finds no .pc file: OpenBLAS, PCRE2 and utf8proc are what CMake asks it for.
mkdir -p "$dir/no_pc"
expect "no .pc files" "$(missing_set PKG_CONFIG_LIBDIR="$dir/no_pc" PKG_CONFIG_PATH= -- --tests)" \
  openblas pcre2 utf8proc
# The main job ignores what only the tests need.
got=$(missing_set PATH="$dir/old:$PATH" CC="$dir/cc" HIDE='cmocka\.h' GDN_SYSTEM_PYTHON=/nonexistent --)
base=$base_main expect "main job, no cmocka/h5py, old cmake" "$got" cmake

# Without --check, no package archive (no apt-get, no sudo): exit 1 naming what to provide.
p=$(fake_path cmake apt-get sudo)
if out=$(PATH="$p" bash "$deps" 2>&1); then fail "install without cmake and apt succeeded: $out"; fi
grep -q "missing cmake: cmake >= .* (Debian: cmake)" <<< "$out" || fail "no 'missing cmake' line: $out"
grep -q "apt-get is not available" <<< "$out" || fail "the reason is not given: $out"
echo "ok: no apt-get -> exit 1 naming cmake"
bash "$deps" --bogus > /dev/null 2>&1 && fail "an unknown option was accepted"
echo "install_deps: ok"
