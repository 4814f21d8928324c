#!/usr/bin/env bash
# The CTest fixture of the Slurm tests: one real single-node cluster (jobs/slurm/localslurm.sh)
# shared by every test labelled slurm.
#   cluster.sh up STATE     start it; its directory goes to STATE/cluster (or "skip:<why>"
#                           with exit status 77 when this machine cannot run it: not root)
#   cluster.sh down STATE   stop it and keep its logs in STATE/logs
# A cluster left behind by an interrupted run (STATE/cluster still naming a live one) is
# stopped before a new one starts.
set -euo pipefail
HARNESS="$(cd "$(dirname "$0")/../.." && pwd)/jobs/slurm/localslurm.sh"
[ $# -eq 2 ] || { echo "usage: cluster.sh up|down STATE_DIR" >&2; exit 2; }
cmd=$1 state=$2
mkdir -p "$state"

stop_recorded() {
    local dir
    dir=$(cat "$state/cluster" 2>/dev/null || true)
    rm -f "$state/cluster"
    if [ -n "$dir" ] && [ -f "$dir/pids" ]; then
        rm -rf "$state/logs"
        bash "$HARNESS" stop "$dir" "$state/logs"
        echo "cluster in $dir stopped; its logs are in $state/logs"
    fi
}

case "$cmd" in
    up)
        stop_recorded
        status=0
        dir=$(bash "$HARNESS" start) || status=$?
        if [ $status -eq 77 ]; then
            echo "skip:the local Slurm cluster needs root (and the munge and slurm-wlm packages)" > "$state/cluster"
            echo "SKIP: the local Slurm cluster needs root (and the munge and slurm-wlm packages)"
            exit 77
        fi
        [ $status -eq 0 ] || exit $status
        [ -f "$dir/env" ] || { echo "localslurm.sh start printed '$dir', not a cluster directory" >&2; exit 1; }
        echo "$dir" > "$state/cluster"
        . "$dir/env"
        sinfo
        ;;
    down) stop_recorded ;;
    *) echo "usage: cluster.sh up|down STATE_DIR" >&2; exit 2 ;;
esac
