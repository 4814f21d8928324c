#!/usr/bin/env bash
# jobs/train_array.sbatch: a job array over a list of 3 configurations (a learning-rate sweep)
# trains 3 run directories, each with its own configuration, all steps and a verified final
# checkpoint. One task is preempted (SIGUSR1 through Slurm): the task that carries the array's
# own job id, where requeueing $SLURM_JOB_ID would requeue the whole array. It must be
# requeued alone: that task restarts once and resumes; the other two never restart.
set -euo pipefail
GDN=$1 STATE=$2
. "$(dirname "$0")/lib.sh"
slurm_attach
steps=200

mkdir sweep
files=(lr1 lr2 lr4)
names=(lr1 lr2 lr-4e-3) # the third entry names its run directory
lrs=(1e-3 2e-3 4e-3)
for i in 0 1 2; do
    write_config "sweep/${files[$i]}.json" steps=$steps lr="${lrs[$i]}" eval_every=100 ckpt_every=100
done
cat > sweep/list.txt <<LIST
# learning-rate sweep: CONFIG [NAME]
lr1.json

lr2.json
lr4.json  lr-4e-3
LIST
array=$(sbatch --parsable --array=0-2 --cpus-per-task=1 "$SRC/jobs/train_array.sbatch" sweep/list.txt runs)

# Wait for the task that holds the array's job id to run, then signal it (it usually runs last).
end=$((SECONDS + 180))
target=
while [ -z "$target" ]; do
    for i in 0 1 2; do
        line=$(scontrol -o show job "${array}_$i" 2>/dev/null || true)
        if [[ " $line " == *" JobId=$array "* && " $line " == *" ArrayTaskId=$i "* &&
              " $line " == *" JobState=RUNNING "* ]]; then
            target=$i
        fi
    done
    [ -n "$target" ] || [ $SECONDS -lt $end ] || fail "the task with the array's job id never ran"
    [ -n "$target" ] || sleep 0.2
done
wait_steps "${array}_$target" "runs/${names[$target]}" 10 120
scancel --signal=USR1 "${array}_$target"

for i in 0 1 2; do
    want=0
    [ "$i" = "$target" ] && want=1
    expect_done "${array}_$i" $want
    run="runs/${names[$i]}"
    expect_run "$run" $steps
    "$PY" -c "import json,sys; sys.exit(json.load(open('$run/config.json'))['lr'] != float('${lrs[$i]}'))" ||
        fail "$run/config.json does not have lr ${lrs[$i]}"
done
grep -q "requeueing ${array}_$target" gdn-array-"${array}_$target".out || fail "task $target was not requeued by its script"
grep -q "resuming from" gdn-array-"${array}_$target".out || fail "task $target did not resume"
[ "$(ls runs | wc -l)" -eq 3 ] || fail "expected 3 run directories, found: $(ls runs)"
echo "array ${array}: 3 run directories; task $target (job id = array id) preempted, requeued alone, resumed"
echo "slurm_array: ok"
