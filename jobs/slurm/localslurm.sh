#!/usr/bin/env bash
# A real single-node Slurm on localhost: munged, slurmctld and slurmd from Debian's munge and
# slurm-wlm packages, configured in a directory of their own (nothing in /etc is used). For
# trying the job scripts in jobs/ and for the tests in tests/slurm/.
#
#   localslurm.sh start [DIR]    install missing packages, write the configuration into DIR (a
#                                new directory under /tmp by default), start the daemons and
#                                wait for the node; prints DIR. Then `. DIR/env` points sbatch,
#                                srun, squeue and scontrol at this cluster (SLURM_CONF).
#   localslurm.sh stop DIR [LOGDIR]
#                                cancel the cluster's jobs, stop the daemons started in DIR (and
#                                nothing else), copy the logs to LOGDIR if given, remove DIR.
#   localslurm.sh run -- CMD...  start, run CMD with the cluster's environment, stop (also when
#                                CMD fails or is interrupted); exits with CMD's status.
#
# Needs root: munged runs as the munge user and slurmd launches jobs. Without root, start and
# run exit with status 77 (the tests then skip). Environment: GDN_SLURM_GPUS, the number of
# placeholder GPUs on the node, so that scripts asking for GPUs are accepted (default 4).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

say() { echo "localslurm: $*" >&2; }
die() { say "$*"; exit 1; }

# ---- packages -----------------------------------------------------------------------------------
have_packages() {
    command -v munged >/dev/null && command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v sbatch >/dev/null && command -v setpriv >/dev/null
}

ensure_packages() {
    have_packages && return 0
    if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
        say "needs munge and slurm-wlm (apt-get install munge slurm-wlm) and root to install them"
        exit 77
    fi
    bash "$ROOT/jobs/install_deps.sh" munge slurm-wlm
    have_packages || die "munge / slurm-wlm installed but munged, slurmctld, slurmd or sbatch is not on PATH"
}

# ---- helpers --------------------------------------------------------------------------------------
# Two TCP ports that nothing listens on (the kernel hands out free ephemeral ports).
free_ports() {
    python3 - <<'PY'
import socket
socks = []
for _ in range(2):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# Starts CMD in the background, output to LOG, and records "NAME PID" in DIR/pids.
spawn() { # DIR NAME LOG CMD...
    local dir=$1 name=$2 log=$3
    shift 3
    "$@" < /dev/null > "$log" 2>&1 &
    echo "$name $!" >> "$dir/pids"
}

# True while PID runs a process whose command line mentions DIR (guards against a recycled PID).
ours() { # DIR PID
    [ -r "/proc/$2/cmdline" ] && tr '\0' ' ' < "/proc/$2/cmdline" | grep -qF -- "$1"
}

wait_for() { # SECONDS DESCRIPTION CMD...: polls CMD every 0.2 s
    local limit=$1 what=$2
    shift 2
    local end=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $end ] || { say "timed out after ${limit}s waiting for $what"; return 1; }
        sleep 0.2
    done
}

node_idle() { # DIR
    SLURM_CONF="$1/slurm.conf" scontrol show node localhost 2>/dev/null | grep -q "State=IDLE"
}

show_logs() { # DIR
    local f
    for f in "$1"/log/*; do
        [ -s "$f" ] || continue
        echo "---- $f (last 30 lines) ----" >&2
        tail -n 30 "$f" >&2
    done
}

# ---- start ----------------------------------------------------------------------------------------
start() { # [DIR]
    ensure_packages >&2 # standard output carries DIR only
    [ "$(id -u)" -eq 0 ] || { say "needs root (munged runs as the munge user, slurmd starts jobs)"; exit 77; }
    id munge >/dev/null 2>&1 || die "no munge user (the munge package creates it)"
    local dir=${1:-}
    if [ -z "$dir" ]; then
        dir=$(mktemp -d /tmp/gdn-slurm.XXXXXX)
    else
        mkdir -p "$dir"
        [ -z "$(ls -A "$dir")" ] || die "$dir is not empty"
        dir=$(cd "$dir" && pwd)
    fi
    # Unix socket paths are limited to 107 bytes (munge's and slurmd's live in here).
    [ ${#dir} -le 60 ] || die "$dir: path too long for the daemons' sockets (keep it under 60 characters)"
    # From here on a failure stops whatever was started.
    trap 'say "start failed; logs follow"; show_logs "$dir"; stop "$dir" >/dev/null 2>&1 || true' ERR
    chmod 755 "$dir"
    mkdir -p "$dir/munge" "$dir/log" "$dir/ctld" "$dir/slurmd"
    : > "$dir/pids"

    # munged with a key of its own, as the munge user (it insists on a private key file);
    # in the foreground it logs to its standard error (log/munged.out).
    mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null
    chown -R munge:munge "$dir/munge"
    chmod 755 "$dir/munge"
    chmod 400 "$dir/munge/munge.key"
    local sock="$dir/munge/munge.socket.2"
    spawn "$dir" munged "$dir/log/munged.out" \
        setpriv --reuid=munge --regid=munge --init-groups \
        munged --foreground --socket="$sock" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed"
    wait_for 20 "munged" bash -c "munge -S '$sock' -n | unmunge -S '$sock'"

    # slurm.conf and gres.conf from the template: this machine's cores and memory, free ports.
    local ports ctld_port slurmd_port hw cpus mem_mb gpus=${GDN_SLURM_GPUS:-4}
    ports=$(free_ports)
    ctld_port=${ports% *}
    slurmd_port=${ports#* }
    # The node's layout as slurmd sees it: CPUs=.. Boards=.. SocketsPerBoard=.. CoresPerSocket=.. ThreadsPerCore=..
    hw=$(slurmd -C | head -1 | tr ' ' '\n' | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=' | tr '\n' ' ')
    cpus=$(echo "$hw" | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p')
    mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
    sed -e "s|@DIR@|$dir|g" -e "s|@CTLD_PORT@|$ctld_port|g" -e "s|@SLURMD_PORT@|$slurmd_port|g" \
        -e "s|@HARDWARE@|$hw|g" -e "s|@MEM_MB@|$mem_mb|g" -e "s|@GPUS@|$gpus|g" \
        "$HERE/slurm.conf.in" > "$dir/slurm.conf"
    # Placeholder GPUs: Slurm wants a device file per GPU; character devices like /dev/null
    # (plain files where mknod is not allowed; slurmd then logs an error and still counts them).
    mkdir "$dir/dev"
    local i
    for ((i = 0; i < gpus; i++)); do
        mknod "$dir/dev/gpu$i" c 1 3 2>/dev/null || : > "$dir/dev/gpu$i"
    done
    echo "NodeName=localhost Name=gpu File=$dir/dev/gpu[0-$((gpus - 1))]" > "$dir/gres.conf"
: > "$dir/plugstack.conf"
    echo "export SLURM_CONF=$dir/slurm.conf" > "$dir/env"

    export SLURM_CONF="$dir/slurm.conf" # the daemons find gres.conf beside it
    spawn "$dir" slurmctld "$dir/log/slurmctld.out" slurmctld -D -c -f "$dir/slurm.conf"
    spawn "$dir" slurmd "$dir/log/slurmd.out" slurmd -D -f "$dir/slurm.conf" -N localhost
    wait_for 30 "the node to become idle" node_idle "$dir"
    trap - ERR
    say "cluster up in $dir (slurmctld port $ctld_port, slurmd port $slurmd_port, $cpus CPUs, $gpus placeholder GPUs)"
    echo "$dir"
}

# ---- stop -----------------------------------------------------------------------------------------
stop() { # DIR [LOGDIR]
    local dir=$1 logdir=${2:-}
    [ -f "$dir/pids" ] || die "$dir has no pids file: not a cluster directory of this harness"
    local name pid
    # Cancel every job first so that no job processes outlive the node daemon.
    if grep -q '^slurmctld ' "$dir/pids" && ours "$dir" "$(awk '$1 == "slurmctld" { print $2 }' "$dir/pids")"; then
        export SLURM_CONF="$dir/slurm.conf"
        local ids
        ids=$(squeue -h -o %A 2>/dev/null || true)
        if [ -n "$ids" ]; then
            # shellcheck disable=SC2086
            scancel $ids 2>/dev/null || true
            wait_for 30 "the jobs to end" bash -c '[ -z "$(squeue -h -o %A)" ]' || true
        fi
    fi
    # Then the daemons, newest first: SIGTERM, SIGKILL after 15 s.
    for name in slurmd slurmctld munged; do
        pid=$(awk -v n="$name" '$1 == n { print $2 }' "$dir/pids")
        [ -n "$pid" ] || continue
        ours "$dir" "$pid" || continue
        kill -TERM "$pid" 2>/dev/null || true
        local end=$((SECONDS + 15))
        while ours "$dir" "$pid" && [ $SECONDS -lt $end ]; do sleep 0.2; done
        if ours "$dir" "$pid"; then
            say "$name ($pid) ignored SIGTERM; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    if [ -n "$logdir" ]; then
        mkdir -p "$logdir"
        cp "$dir"/log/* "$dir/slurm.conf" "$logdir/" 2>/dev/null || true
    fi
    rm -rf "$dir"
}

# ---- run ------------------------------------------------------------------------------------------
run() { # -- CMD...
    [ "${1:-}" = "--" ] && shift
    [ $# -gt 0 ] || die "usage: localslurm.sh run -- CMD..."
    RUN_DIR=$(start)
    trap 'stop "$RUN_DIR"' EXIT
    # CMD runs in the background so that a signal to this script stops it at once (then the
    # EXIT trap stops the cluster); it keeps this script's standard input.
    (export SLURM_CONF="$RUN_DIR/slurm.conf"; exec "$@") 0<&0 &
    RUN_PID=$!
    trap 'kill -TERM "$RUN_PID" 2>/dev/null; exit 143' TERM
    trap 'kill -INT "$RUN_PID" 2>/dev/null; exit 130' INT
    local status=0
    wait "$RUN_PID" || status=$?
    exit $status
}

case "${1:-}" in
    start) shift; start "$@" ;;
    stop) shift; [ $# -ge 1 ] || die "usage: localslurm.sh stop DIR [LOGDIR]"; stop "$@" ;;
    run) shift; run "$@" ;;
    *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
