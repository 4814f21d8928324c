#!/usr/bin/env bash
# Preemption through Slurm: a running jobs/train_cpu.sbatch job gets SIGUSR1 from Slurm
# (scancel --signal, the signal that #SBATCH --signal=USR1@120 sends before the time limit);
# gdn train checkpoints and exits 75, the script requeues the job, and the requeued job resumes
# from that checkpoint and finishes: restart count 1, steps 1..N each logged once, and every
# loss bitwise equal to an uninterrupted run of the same configuration.
set -euo pipefail
GDN=$1 STATE=$2
. "$(dirname "$0")/lib.sh"
slurm_attach
steps=300

write_config long.json steps=$steps eval_every=100 ckpt_every=100
job=$(sbatch --parsable --cpus-per-task=1 "$SRC/jobs/train_cpu.sbatch" long.json run)
wait_steps "$job" run 10 180
scancel --signal=USR1 "$job"
t_signal=$SECONDS
# The uninterrupted reference, while the job checkpoints, waits to be eligible again and resumes.
"$GDN" train --config long.json --backend cpu --threads 1 --out direct > direct.log

expect_done "$job" 1
log="gdn-cpu-$job.out"
k=$(sed -n 's/^stopped by signal 10 at step \([0-9]*\) after writing a checkpoint; exit status 75.*/\1/p' "$log")
[ -n "$k" ] || fail "the job log has no 'stopped by signal 10 ... exit status 75' line"
[ "$k" -lt $steps ] || fail "the signal arrived only after the last step"
grep -q "requeueing $job" "$log" || fail "the script did not requeue the job"
grep -q "(restart 1)" "$log" || fail "no second run with restart count 1"
grep -q "resuming from run/ckpt_$(printf %08d "$k").h5 at step $k" "$log" ||
    fail "the requeued run did not resume from the checkpoint of step $k"
expect_run run $steps
expect_same_losses direct run 0
echo "SIGUSR1 at step $k: checkpoint, exit 75, requeued, resumed at step $k; done $((SECONDS - t_signal)) s after the signal"
echo "slurm_preempt: ok"
