# Shared set-up of the 2-GPU scripts (test_gpu_dp.sh, test_gpu_sp.sh), sourced after `set -uo
# pipefail` with the script's arguments: BUILD_DIR [OUT_DIR]. Defines BUILD, OUT_DIR, SRC, GDN,
# dir (a temporary folder, removed at exit), logs ($dir/logs, packed into OUT_DIR/$LOGS_TGZ at
# exit), status and fail, PY, MPIRUN (2 ranks), children_of, gpus_idle and random_shard; exits 77
# with fewer than 2 GPUs or no mpiexec. The caller sets NAME (for messages) and LOGS_TGZ first.
BUILD=$(cd "$1" && pwd)
OUT_DIR=${2:-${OUT:-$BUILD/out}}
mkdir -p "$OUT_DIR"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GDN=$BUILD/gdn
dir=$(mktemp -d)
logs=$dir/logs
mkdir -p "$logs"
finish() { tar -C "$dir" -czf "$OUT_DIR/$LOGS_TGZ" logs 2>/dev/null; rm -rf "$dir"; }
trap finish EXIT
status=0
fail() { echo "FAIL: $*"; status=1; }
PY=${PY:-python3}

n_gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') || n_gpu=0
if [ "$n_gpu" -lt 2 ]; then echo "$NAME: skipped ($n_gpu GPUs; needs 2)"; exit 77; fi
command -v mpiexec > /dev/null || { echo "$NAME: skipped (no mpiexec)"; exit 77; }
# NVLink multicast (NVLS) stays off: the launcher passes the environment to the ranks
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpiexec -n 2 -x NCCL_NVLS_ENABLE)
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader > "$logs/gpus.txt"

# the processes whose parent is $1 (the ranks mpiexec started), from /proc
children_of() {
  local s st ppid
  for s in /proc/[0-9]*/stat; do
    st=$(cat "$s" 2>/dev/null) || continue
    read -r _ ppid _ <<< "${st##*) }"
    if [ "$ppid" = "$1" ]; then echo "${st%% *}"; fi
  done | sort -n
}
# waits until no process holds GPU memory (a killed run's memory is released as it ends)
gpus_idle() {
  for _ in $(seq 60); do
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ] && return; sleep 0.25
  done
}
# random_shard FILE: 8M random tokens (vocabulary 32000, seed 0) as one uint16 shard (llm.c format)
random_shard() {
  $PY - "$1" <<'PY'
import sys, numpy as np
n = 8_000_000
hdr = np.zeros(256, np.int32); hdr[:3] = (20240520, 1, n)
with open(sys.argv[1], "wb") as f:
    f.write(hdr.tobytes()); f.write(np.random.default_rng(0).integers(0, 32000, n, dtype=np.uint16).tobytes())
PY
}
