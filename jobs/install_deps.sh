#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages gdn needs, when any is missing (apt-get, as root or via sudo).
# Usage: jobs/install_deps.sh [extra packages...]
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libhdf5-dev openmpi-bin libopenmpi-dev
      libcmocka-dev zlib1g-dev python3 python3-h5py python3-numpy "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "gdn: installing missing packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "gdn: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q || echo "gdn: apt-get update failed; trying the install with the current lists"
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
