#!/usr/bin/env bash
# Makes sure what gdn needs is present, and installs only what is missing (apt-get, as root or
# via sudo). Each need is detected the way the build finds it, whatever installed it (Debian
# packages, pip, environment modules, a source build): commands on PATH, headers and libraries
# by compiling and linking a tiny program, CMake's version against the CMakeLists minimum.
#
# Usage: jobs/install_deps.sh [--check] [--tests] [DEBIAN_PACKAGE...]
#   (no option)     what building and running gdn needs: C compiler with OpenMP, make, cmake,
#                   pkg-config, MPI (mpicc, mpiexec), serial HDF5, OpenBLAS, zlib, PCRE2,
#                   utf8proc
#   --tests         also what tests/run.sh needs: cmocka, a python3 that imports h5py and numpy,
#                   and one that imports numpy, scipy and matplotlib (jobs/scaling/analyze.py)
#   --check         install nothing: print one "missing NAME: ..." line per missing need and
#                   exit 1 if anything is missing, 0 if not
#   DEBIAN_PACKAGE  extra packages (e.g. clang-14 libclang-rt-14-dev), needed when dpkg does not
#                   list them as installed
# Environment: CC (the C compiler, as for CMake), GDN_SYSTEM_PYTHON (the second interpreter tried
# for h5py after python3 on PATH; default /usr/bin/python3, as tests/CMakeLists.txt does).
# Exit status: 0 when everything is present (after installing), 1 when something is missing and
# could not be installed (the message lists each thing and how to provide it), 2 on bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."

check_only=0 tests=0 extra=()
for a in "$@"; do
  case $a in
    --check) check_only=1 ;;
    --tests) tests=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    -*) echo "install_deps.sh: unknown option '$a' (see --help)" >&2; exit 2 ;;
    *) extra+=("$a") ;;
  esac
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gdn_deps.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake_min=$(sed -n 's/^cmake_minimum_required(VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)

# try_build CC SOURCE [FLAGS...]: compiles and links SOURCE (text) with CC; 0 when it works.
try_build() {
  local cc=$1 src=$2; shift 2
  printf '%s\n' "$src" > "$tmp/t.c"
  # in $tmp: wrappers such as h5cc leave their object files in the current folder
  # shellcheck disable=SC2086
  (cd "$tmp" && $cc t.c -o t "$@") > "$tmp/cc.log" 2>&1
}
have() { command -v "$1" > /dev/null 2>&1; }
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]; }
multiarch=$( (gcc -print-multiarch || dpkg-architecture -qDEB_HOST_MULTIARCH) 2>/dev/null || true)

missing=() pkgs=() hints=()
# need NAME DEBIAN_PACKAGES HINT: records a missing need.
need() { missing+=("$1"); pkgs+=("$2"); hints+=("$3"); }

detect() {
  missing=() pkgs=() hints=()
  local cc=""
  if [ -n "${CC:-}" ]; then cc=$CC; else for c in cc gcc clang; do have "$c" && { cc=$c; break; }; done; fi
  if [ -z "$cc" ] || ! try_build "$cc" 'int main(void) { return 0; }'; then
    need compiler build-essential "a C11 compiler as cc (or set CC), e.g. gcc"
    cc=""
  elif ! try_build "$cc" '#include <omp.h>
int main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }' -fopenmp; then
    need openmp "build-essential libgomp1" "OpenMP for $cc (gcc ships libgomp; clang needs libomp-dev)"
  fi
  have make || need make make "GNU make on PATH"
  if ! have cmake; then
    need cmake cmake "cmake >= $cmake_min on PATH (Debian package, or pip install cmake)"
  else
    local v; v=$(cmake --version 2>/dev/null | sed -n '1s/.* \([0-9][0-9.]*\).*/\1/p')
    version_ge "${v:-0}" "$cmake_min" ||
      need cmake cmake "cmake >= $cmake_min on PATH (found ${v:-an unreadable version}; pip install cmake)"
  fi
  have pkg-config || need pkg-config pkg-config "pkg-config on PATH (CMake finds OpenBLAS with it)"
  # OpenBLAS: CMake asks pkg-config for 'openblas'; without pkg-config, link it directly.
  if have pkg-config; then
    pkg-config --exists openblas ||
      need openblas libopenblas-dev "OpenBLAS with its openblas.pc on PKG_CONFIG_PATH"
  elif [ -n "$cc" ] && ! try_build "$cc" '#include <cblas.h>
int main(void) { return (int)cblas_sdot(0, 0, 1, 0, 1); }' -I/usr/include/openblas -I/usr/include/"$multiarch" -lopenblas; then
    need openblas libopenblas-dev "OpenBLAS (cblas.h and libopenblas)"
  fi
  # MPI: CMake's FindMPI takes its flags from the mpicc wrapper and runs jobs with mpiexec.
  local mpi_src='#include <mpi.h>
int main(int argc, char **argv) { MPI_Init(&argc, &argv); return MPI_Finalize(); }'
  if ! have mpicc || ! have mpiexec || ! try_build mpicc "$mpi_src"; then
    need mpi "openmpi-bin libopenmpi-dev" "MPI: mpicc and mpiexec on PATH (e.g. module load openmpi)"
  fi
  # serial HDF5: the h5cc wrapper (what FindHDF5 asks first), else the usual header places.
  local h5_src='#include <hdf5.h>
int main(void) { return H5open() < 0; }' h5_ok=0
  if have h5cc && try_build h5cc "$h5_src"; then h5_ok=1
  elif [ -n "$cc" ]; then
    for flags in "-I/usr/include/hdf5/serial -L/usr/lib/$multiarch/hdf5/serial -lhdf5" "-lhdf5" \
                 "$(pkg-config --cflags --libs hdf5 2> /dev/null || true)"; do
      # shellcheck disable=SC2086
      [ -n "$flags" ] && try_build "$cc" "$h5_src" $flags && { h5_ok=1; break; }
    done
  fi
  [ $h5_ok = 1 ] || need hdf5 libhdf5-dev "serial HDF5 (hdf5.h, libhdf5; h5cc on PATH or HDF5_ROOT for CMake)"
  # PCRE2 and utf8proc (the BPE tokenizers' patterns and normalization): CMake asks pkg-config
  if have pkg-config; then
    pkg-config --exists libpcre2-8 ||
      need pcre2 libpcre2-dev "PCRE2 (8-bit) with its libpcre2-8.pc on PKG_CONFIG_PATH"
    pkg-config --exists libutf8proc ||
      need utf8proc libutf8proc-dev "utf8proc with its libutf8proc.pc on PKG_CONFIG_PATH"
  fi
  if [ -n "$cc" ] && ! try_build "$cc" '#include <zlib.h>
int main(void) { return zlibVersion() == 0; }' -lz; then
    need zlib zlib1g-dev "zlib (zlib.h, libz)"
  fi

  if [ $tests = 1 ]; then
    if [ -n "$cc" ] && ! try_build "$cc" '#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
static void t(void **s) { (void)s; }
int main(void) { const struct CMUnitTest ts[] = {cmocka_unit_test(t)}; return cmocka_run_group_tests(ts, NULL, NULL); }' \
        -lcmocka; then
      need cmocka libcmocka-dev "cmocka (cmocka.h, libcmocka and its CMake package file)"
    fi
    local py_ok=0 py
    for py in python3 "${GDN_SYSTEM_PYTHON:-/usr/bin/python3}"; do
      if have "$py" && "$py" -c 'import h5py, numpy' > /dev/null 2>&1; then py_ok=1; break; fi
    done
    [ $py_ok = 1 ] || need h5py "python3 python3-h5py python3-numpy" \
      "a python3 that imports h5py and numpy (python3 on PATH or ${GDN_SYSTEM_PYTHON:-/usr/bin/python3}; pip install h5py numpy)"
    # the scaling analysis (jobs/scaling/analyze.py and its tests): numpy, scipy and matplotlib
    py_ok=0
    for py in python3 "${GDN_SYSTEM_PYTHON:-/usr/bin/python3}"; do
      if have "$py" && "$py" -c 'import numpy, scipy, matplotlib' > /dev/null 2>&1; then py_ok=1; break; fi
    done
    [ $py_ok = 1 ] || need scipy "python3-numpy python3-scipy python3-matplotlib" \
      "a python3 that imports numpy, scipy and matplotlib (python3 on PATH or ${GDN_SYSTEM_PYTHON:-/usr/bin/python3}; pip install numpy scipy matplotlib)"
  fi

  local p
  for p in ${extra[@]+"${extra[@]}"}; do
    dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" ||
      need "package:$p" "$p" "the Debian package $p"
  done
}

report() { # report PREFIX: one line per missing need
  local i
  for i in "${!missing[@]}"; do
    echo "$1 ${missing[$i]}: ${hints[$i]} (Debian: ${pkgs[$i]})"
  done
}

detect
if [ ${#missing[@]} -eq 0 ]; then
  [ $check_only = 1 ] && echo "gdn deps: nothing missing"
  exit 0
fi
if [ $check_only = 1 ]; then report "missing"; exit 1; fi

# Install: apt-get as root or via sudo; a package archive that cannot be reached ends here with
# the list of what to provide by other means.
read -r -a to_install <<< "${pkgs[*]}"
echo "gdn: missing ${missing[*]}; installing: ${to_install[*]}"
sudo=""
why=""
if ! have apt-get; then why="apt-get is not available"
elif [ "$(id -u)" -ne 0 ]; then
  if have sudo && sudo -n true 2> /dev/null; then sudo="sudo"
  elif have sudo && [ -t 0 ]; then sudo="sudo"
  else why="installing needs root or sudo"; fi
fi
if [ -z "$why" ]; then
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q || echo "gdn: apt-get update failed; trying the install with the current lists"
  $sudo apt-get install -y -q --no-install-recommends "${to_install[@]}" || why="apt-get install failed"
  detect
  [ ${#missing[@]} -eq 0 ] && exit 0
  why=${why:-"still missing after apt-get install"}
fi
{
  echo "gdn: cannot build without these ($why):"
  report "  missing"
  echo "Provide each (any way: Debian packages, pip, environment modules, a source build), then rerun."
  echo "'bash jobs/install_deps.sh --check$([ $tests = 1 ] && echo ' --tests')' lists what is still missing."
} >&2
exit 1
