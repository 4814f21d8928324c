#!/usr/bin/env bash
# The time-limit path: Slurm itself sends the #SBATCH --signal signal before the limit. A
# jobs/train_cpu.sbatch job with a 1-minute limit and --signal=USR1@20 (the script's USR1@120
# does not fit in one minute) trains an open-ended run. slurmctld checks time limits every 30 s
# and sends the signal at the first check less than 20 + 30 s before the limit, so 10-40 s
# into the run (never before gdn is up); gdn checkpoints and exits 75, and the script requeues
# the job. While the job waits to start again the
# test shortens the run (steps in its config; the schedule length is fixed by decay_steps), and
# the requeued run resumes and finishes: losses bitwise equal to an uninterrupted run.
set -euo pipefail
GDN=$1 STATE=$2
. "$(dirname "$0")/lib.sh"
slurm_attach

write_config tl.json steps=1000000 decay_steps=1000 eval_every=0 ckpt_every=0 log_every=50
job=$(sbatch --parsable --cpus-per-task=1 --time=1 --signal=USR1@20 "$SRC/jobs/train_cpu.sbatch" tl.json run)
end=$((SECONDS + 150))
until [ "$(job_field "$job" Restarts)" = 1 ]; do
    state=$(job_field "$job" JobState)
    case "$state" in
        # on the way to the requeue: SIGNALING while slurmctld delivers the USR1, STAGE_OUT and
        # COMPLETING as the batch step ends
        PENDING | RUNNING | CONFIGURING | SIGNALING | STAGE_OUT | COMPLETING | REQUEUED) ;;
        *) fail "job $job ended (state '$state') without being requeued" ;;
    esac
    [ $SECONDS -lt $end ] || fail "job $job was not signalled and requeued before its time limit"
    sleep 0.5
done
log="gdn-cpu-$job.out"
k=$(sed -n 's/^stopped by signal 10 at step \([0-9]*\) after writing a checkpoint; exit status 75.*/\1/p' "$log")
[ -n "$k" ] || fail "the job log has no 'stopped by signal 10 ... exit status 75' line"
n=$((k + 20))
write_config tl.json steps=$n decay_steps=1000 eval_every=0 ckpt_every=0 log_every=50
state=$(job_field "$job" JobState)
[ "$state" = PENDING ] || [ "$state" = REQUEUED ] || [ "$state" = COMPLETING ] ||
    fail "the requeued job is already $state; the test could not shorten the run in time"
"$GDN" train --config tl.json --backend cpu --threads 1 --out direct > direct.log

expect_done "$job" 1
grep -q "resuming from run/ckpt_$(printf %08d "$k").h5 at step $k" "$log" ||
    fail "the requeued run did not resume from the checkpoint of step $k"
expect_run run $n
expect_same_losses direct run 0
echo "time limit: Slurm's USR1 stopped the run at step $k, requeued, resumed, finished at step $n"
echo "slurm_time_limit: ok"
