# Shared by the Slurm tests (sourced). Usage in a test: GDN=$1 STATE=$2; . lib.sh; slurm_attach.
# The cluster is started by cluster.sh up (the CTest fixture) and named in $STATE/cluster.
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=/usr/bin/python3
TEST=$(basename "$0" .sh)

fail() {
    echo "FAIL ($TEST): $*" >&2
    local f
    for f in "${WORK:-/nonexistent}"/*.out; do
        [ -f "$f" ] || continue
        echo "---- $f (last 40 lines) ----" >&2
        tail -n 40 "$f" >&2
    done
    if [ -n "${SLURM_CONF:-}" ]; then
        echo "---- slurmctld.log (last 20 lines) ----" >&2
        tail -n 20 "$(dirname "$SLURM_CONF")/log/slurmctld.log" >&2 || true
    fi
    exit 1
}

# Points the Slurm commands at the test cluster and makes a fresh work directory for this test
# ($WORK; kept after the test for inspection). Exits 77 (skip) when the cluster could not be
# started for a reason the setup reported as a skip (not root, no packages).
slurm_attach() {
    [ -f "$STATE/cluster" ] || fail "no cluster: the fixture test slurm_cluster_up did not run"
    local dir
    dir=$(cat "$STATE/cluster")
    case "$dir" in
        skip:*) echo "SKIP: ${dir#skip:}"; exit 77 ;;
    esac
    [ -f "$dir/env" ] || fail "cluster directory $dir is gone"
    # shellcheck disable=SC1091
    . "$dir/env"
    WORK="$STATE/work/$TEST"
    rm -rf "$WORK"
    mkdir -p "$WORK"
    cd "$WORK"
    export GDN
}

# A small training configuration (JSON) with KEY=VALUE overrides (values are JSON).
write_config() { # FILE [KEY=VALUE...]
    local file=$1
    shift
    "$PY" - "$file" "$SRC/data/kjv.txt.gz" "$@" <<'PY'
import json, sys
cfg = {"data": sys.argv[2], "d_model": 64, "n_layers": 2, "n_heads": 2, "head_dim": 32,
       "d_ff": 128, "chunk_size": 16, "seq_len": 64, "batch_size": 8, "steps": 40,
       "warmup_steps": 4, "eval_every": 10, "eval_batches": 2, "ckpt_every": 10, "seed": 11}
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    cfg[k] = json.loads(v)
json.dump(cfg, open(sys.argv[1], "w"), indent=1)
PY
}

# One field of `scontrol show job` (JobState, ExitCode, Restarts, JobId, ...).
# scontrol can fail to reach a busy slurmctld for a moment: a failed query is asked again (up to
# 20 times, 0.25 s apart) before the field is reported empty, so callers never mistake a
# controller that did not answer for a job it does not know.
job_field() { # JOB FIELD
    local out tries=0
    until out=$(scontrol -o show job "$1" 2>/dev/null) && [ -n "$out" ]; do
        tries=$((tries + 1))
        [ $tries -lt 20 ] || return 0
        sleep 0.25
    done
    printf '%s\n' "$out" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}

# Waits until JOB is finished for good (not pending, running, requeued or completing); sets
# JOB_STATE to its final state. Fails after LIMIT seconds.
wait_job() { # JOB LIMIT
    local job=$1 end=$((SECONDS + $2)) state
    while :; do
        state=$(job_field "$job" JobState)
        case "$state" in
            COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
                JOB_STATE=$state
                return 0 ;;
            "") fail "job $job is unknown to slurmctld" ;;
        esac
        [ "$(job_field "$job" Reason)" != "JobHeldUser" ] || fail "job $job is held (requeue-hold)"
        [ $SECONDS -lt $end ] || fail "job $job still $state after $2 s"
        sleep 0.5
    done
}

# Waits until RUN_DIR/metrics.jsonl has at least N lines (the trainer is past its set-up and
# handles signals); fails if JOB ends first or after LIMIT seconds.
wait_steps() { # JOB RUN_DIR N LIMIT
    local end=$((SECONDS + $4)) state
    until [ -f "$2/metrics.jsonl" ] && [ "$(wc -l < "$2/metrics.jsonl")" -ge "$3" ]; do
        state=$(job_field "$1" JobState)
        case "$state" in
            PENDING | RUNNING | CONFIGURING) ;;
            *) fail "job $1 ended (state '$state') before step $3 of $2" ;;
        esac
        [ $SECONDS -lt $end ] || fail "$2 did not reach step $3 within $4 s"
        sleep 0.2
    done
}

# Asserts that a job ended normally: COMPLETED, exit code 0:0, RESTARTS restarts.
expect_done() { # JOB RESTARTS
    local code restarts
    wait_job "$1" 240
    code=$(job_field "$1" ExitCode)
    restarts=$(job_field "$1" Restarts)
    [ "$JOB_STATE" = COMPLETED ] && [ "$code" = 0:0 ] || fail "job $1 ended $JOB_STATE with exit code $code"
    [ "$restarts" = "$2" ] || fail "job $1 was restarted $restarts times, expected $2"
}

# Asserts the run directory holds steps 1..N exactly once each and a verified checkpoint at N.
expect_run() { # RUN_DIR N
    "$PY" - "$1" "$2" <<'PY' || fail "$1: metrics do not hold steps 1..$2 once each"
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1] + "/metrics.jsonl")]
n = int(sys.argv[2])
if steps != list(range(1, n + 1)):
    print(f"{sys.argv[1]}: steps {steps[:3]} ... {steps[-3:]} ({len(steps)} lines), expected 1..{n}")
    sys.exit(1)
PY
    local ckpt
    ckpt="$1/$(printf 'ckpt_%08d.h5' "$2")"
    [ -f "$ckpt" ] || fail "no final checkpoint $ckpt"
    "$GDN" inspect "$ckpt" > "$WORK/inspect.txt" 2>&1 || { cat "$WORK/inspect.txt" >&2; fail "$ckpt does not verify"; }
}

# Asserts two runs have the same losses at every step: bitwise (TOL=0) or within TOL.
expect_same_losses() { # RUN_A RUN_B TOL
    "$PY" - "$1" "$2" "$3" <<'PY' || fail "losses of $1 and $2 differ"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
b = [json.loads(l) for l in open(sys.argv[2] + "/metrics.jsonl")]
tol = float(sys.argv[3])
assert [r["step"] for r in a] == [r["step"] for r in b], "different steps"
worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
for x, y in zip(a, b):
    if abs(x["loss"] - y["loss"]) > tol:
        print(f"step {x['step']}: loss {x['loss']!r} vs {y['loss']!r} (tolerance {tol})")
        sys.exit(1)
print(f"{len(a)} steps, largest loss difference {worst:.3g}, final loss {b[-1]['loss']:.6f}")
PY
}
