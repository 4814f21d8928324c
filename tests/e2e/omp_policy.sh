#!/usr/bin/env bash
# gdn runs its OpenMP threads with a passive wait policy unless the user chose one: once a run
# has made progress (its first metrics line), its environment holds OMP_WAIT_POLICY=passive, and
# a policy the user set (OMP_WAIT_POLICY or GOMP_SPINCOUNT) is left as it was.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
args=(--preset tiny --data "$SRC/data/kjv.txt.gz" --d_model 32 --n_layers 1 --d_ff 64 --seq_len 32
      --batch_size 2 --eval_every 0 --ckpt_every 0 --steps 1000000)

policy_of_run() { # policy_of_run NAME [env...]: the OMP_ variables of a running trainer
  local out="$dir/$1"; shift
  env "$@" "$GDN" train "${args[@]}" --out "$out" > "$out.log" 2>&1 &
  local pid=$! i
  for i in $(seq 600); do # progress, not time: the first metrics line (bound: 60 s)
    [ -s "$out/metrics.jsonl" ] && break
    kill -0 $pid 2> /dev/null || { cat "$out.log" >&2; fail "gdn train ($1) ended early"; }
    sleep 0.1
  done
  [ -s "$out/metrics.jsonl" ] || fail "gdn train ($1) made no step in 60 s"
  tr '\0' '\n' < /proc/$pid/environ | grep -E '^(OMP_WAIT_POLICY|GOMP_SPINCOUNT)=' | sort | tr '\n' ' '
  kill $pid; wait $pid 2> /dev/null || true
}
got=$(policy_of_run default -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
[ "$got" = "OMP_WAIT_POLICY=passive " ] || fail "default run: environment has [$got], expected passive"
got=$(policy_of_run active -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active)
[ "$got" = "OMP_WAIT_POLICY=active " ] || fail "user's OMP_WAIT_POLICY=active became [$got]"
got=$(policy_of_run spin -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1000)
[ "$got" = "GOMP_SPINCOUNT=1000 " ] || fail "user's GOMP_SPINCOUNT=1000 became [$got]"
echo "omp_policy: ok (passive by default, the user's policy kept)"
