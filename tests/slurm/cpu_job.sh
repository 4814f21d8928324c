#!/usr/bin/env bash
# jobs/train_cpu.sbatch submitted with sbatch to the local Slurm cluster:
#  - the job completes (exit 0:0, no restart); one metrics line per step; the final checkpoint
#    verifies; the losses equal, bitwise, those of the same training run outside Slurm;
#  - the environment-variable form (GDN_CONFIG, GDN_RUN_DIR) does the same;
#  - a missing config file fails the job with a message that names it.
set -euo pipefail
GDN=$1 STATE=$2
. "$(dirname "$0")/lib.sh"
slurm_attach

write_config tiny.json
job=$(sbatch --parsable --cpus-per-task=1 "$SRC/jobs/train_cpu.sbatch" tiny.json run)
job_env=$(GDN_CONFIG=tiny.json GDN_RUN_DIR=run_env sbatch --parsable --cpus-per-task=1 "$SRC/jobs/train_cpu.sbatch")
job_bad=$(sbatch --parsable --cpus-per-task=1 "$SRC/jobs/train_cpu.sbatch" missing.json run_bad)
"$GDN" train --config tiny.json --backend cpu --threads 1 --out direct > direct.log

expect_done "$job" 0
expect_run run 40
expect_same_losses direct run 0
grep -q "done: 40 steps" "gdn-cpu-$job.out" || fail "no 'done: 40 steps' in the job log"
"$PY" -c "import json,sys; c=json.load(open('run/config.json')); sys.exit(c['threads'] != 1 or c['backend'] != 'cpu')" ||
    fail "run/config.json: threads should be the job's CPUs (1) and backend cpu"

expect_done "$job_env" 0
expect_run run_env 40
expect_same_losses direct run_env 0

wait_job "$job_bad" 60
[ "$JOB_STATE" = FAILED ] && [ "$(job_field "$job_bad" ExitCode)" = 2:0 ] ||
    fail "job with a missing config ended $JOB_STATE, exit $(job_field "$job_bad" ExitCode); expected FAILED 2:0"
grep -q "cannot read the config file missing.json" "gdn-cpu-$job_bad.out" || fail "no message naming missing.json"
[ ! -e run_bad ] || fail "a failed job created its run directory"
echo "slurm_cpu_job: ok"
