#!/usr/bin/env bash
# The Europarl CPU run (docs/results/europarl_en_it_cpu) goes on across sessions and machines:
# `start` at the beginning of a session, `stop` before its end (carry/README.md says why).
#
#   recipes/europarl_en_it/cpu_session.sh start [RESULTS]
#   recipes/europarl_en_it/cpu_session.sh stop  [RESULTS]   # waits for the next checkpoint
#   STOP_NOW=1 recipes/europarl_en_it/cpu_session.sh stop   # keeps only the last checkpoint's work
#
# start: the steps made from the corpus (data, syntax_data) under the carried invocation
#   (carry.json), `carry unpack` where RESULTS has no partial training yet (a machine handed back
#   as it was keeps its own, newer one), then the whole recipe (this script's SETS: the run's own
#   settings; the baseline, and once it has stopped, the paper's protocol on it) and the formation
#   watcher in the background, their process groups in RESULTS/session.pids, their output in
#   RESULTS/session_*.out; every process under the recipes' memory settings (cpu_memory.py).
# stop: waits until the running training (the baseline's or a protocol phase's) has saved its next
#   checkpoint (nothing trained is lost), stops the recipe and the watcher, computes the formation
#   points due (the watcher's --once), and packs the run into carry/ (replaced whole; finished steps
#   descending from a training go along): `git add carry/europarl_en_it_cpu`.
#
# RESULTS defaults to ../runs/europarl_en_it_cpu beside the repository, outside the work tree,
# which a session laid out anew does not keep. Run from the repository root with .venv's
# fairseq-heads on PATH.
set -euo pipefail

ACTION=${1:?usage: cpu_session.sh start|stop [RESULTS]}
R=${2:-../runs/europarl_en_it_cpu}
CARRY=carry/europarl_en_it_cpu
# the run: seed 2, autocast from the recipe (auto); the protocol's fine-tune seeds begin with the
# baseline's, so that the full layout trained from scratch at the first seed (the reference of
# "trained vs scratch") is the baseline itself, reused, not a second ~10-hour training
# (nmt_converged.scratch_steps, baseline_is_full_scratch); the headline point still has three seeds
SETS=(--set train.seed=2 --set converged.seeds=2,1,3)
STEP=baseline_s2
PIDS=$R/session.pids
PY=${PYTHON:-python}

carried_sets() {  # the --set options of the invocation the pack was made under
    "$PY" -c 'import json, sys; print(" ".join("--set " + o for o in json.load(open(sys.argv[1]))["invocation"]["overrides"]))' \
        "$CARRY/carry.json"
}

running_trainings() {  # "PID LOG" of each fairseq-train of RESULTS that runs now
    local pid dir models
    models=$(cd "$R" && pwd)/models/
    for pid in $(pgrep -f fairseq_cli.train || true); do
        dir=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | grep -A1 -x -- --save-dir | tail -1 || true)
        case $dir in "$models"*) echo "$pid $R/logs/$(basename "$dir" .partial).log" ;; esac
    done
}

saved_update() {  # the update of the last checkpoint LOG says its training saved (empty: none yet)
    { grep -o 'Saved checkpoint .*(epoch [0-9]* @ [0-9]* updates' "$1" 2>/dev/null || true; } \
        | tail -1 | sed -E 's/.*@ ([0-9]+) updates/\1/'
}

with_memory_env() {  # execs its arguments under the recipes' memory settings (`fairseq-heads cpu-env`):
    # call it as a background job (its pid is then the command's) or in a subshell
    eval "$(fairseq-heads cpu-env)"; exec "$@"
}

session_runs() {  # whether a process group of RESULTS/session.pids is still alive
    [ -f "$PIDS" ] || return 1
    local pid
    while read -r pid; do
        if kill -0 -- "-$pid" 2>/dev/null; then return 0; fi
    done < "$PIDS"
    return 1
}

case $ACTION in
start)
    if session_runs; then
        echo "cpu_session: a session already runs in $R ($PIDS)" >&2; exit 2
    fi
    # shellcheck disable=SC2046
    fairseq-heads recipe europarl_en_it --scale cpu $(carried_sets) --results "$R" --only data,syntax_data
    if [ ! -d "$R/models/$STEP.partial" ] && [ ! -d "$R/models/$STEP" ]; then
        fairseq-heads carry unpack "$CARRY" "$R"
    else
        echo "cpu_session: $R/models already holds $STEP; the carried state is not laid out"
    fi
    # the whole recipe: the baseline, and once it has stopped, the paper's protocol on it; the
    # protocol's phases two at a time on a core each once the baseline is done (1.25x the updates
    # of one on both cores: benchmarks/results/train_parallel_cpu_europarl_xeon_amx.json); the
    # baseline alone on both cores
    jobs=1
    if [ -d "$R/models/$STEP" ]; then jobs=2; fi
    setsid nohup fairseq-heads recipe europarl_en_it --scale cpu "${SETS[@]}" --results "$R" --jobs "$jobs" \
        > "$R/session_recipe.out" 2>&1 < /dev/null &
    echo $! > "$PIDS"
    sleep 60  # the watcher reads the recipe.json the recipe has just written
    with_memory_env env OMP_NUM_THREADS=1 setsid nohup "$PY" recipes/europarl_en_it/watch_formation.py "$R" --every 2 \
        > "$R/session_watch.out" 2>&1 < /dev/null &
    echo $! >> "$PIDS"
    echo "cpu_session: training and watcher started (process groups $(tr '\n' ' ' < "$PIDS")); $R/logs/$STEP.log"
    ;;
stop)
    [ -f "$PIDS" ] || { echo "cpu_session: no $PIDS: nothing started here" >&2; exit 2; }
    if [ -z "${STOP_NOW:-}" ]; then
        # each training that runs (the baseline, or the protocol's phases side by side) is paused
        # (SIGSTOP) once it has saved its next checkpoint, so that none loses what it trained
        mapfile -t pending < <(running_trainings)
        declare -A from
        for t in "${pending[@]}"; do read -r pid log <<< "$t"; from[$pid]=$(saved_update "$log"); done
        echo "cpu_session: waiting for the next checkpoint of ${#pending[@]} training(s)"
        while [ ${#pending[@]} -gt 0 ]; do
            still=()
            for t in "${pending[@]}"; do
                read -r pid log <<< "$t"
                kill -0 "$pid" 2>/dev/null || continue  # ended by itself (its plateau stop, an error)
                if [ "$(saved_update "$log")" != "${from[$pid]}" ]; then
                    kill -STOP "$pid"; echo "cpu_session: $(basename "$log" .log) paused at update $(saved_update "$log")"
                else
                    still+=("$t")
                fi
            done
            pending=("${still[@]}")
            if [ ${#pending[@]} -gt 0 ]; then sleep 20; fi
        done
    fi
    echo "cpu_session: stopping"
    while read -r pid; do kill -TERM -- "-$pid" 2>/dev/null || true; kill -CONT -- "-$pid" 2>/dev/null || true; done < "$PIDS"
    while read -r pid; do while kill -0 -- "-$pid" 2>/dev/null; do sleep 2; done; done < "$PIDS"
    rm -f "$PIDS"
    (with_memory_env env OMP_NUM_THREADS=2 "$PY" recipes/europarl_en_it/watch_formation.py "$R" --every 2 --once)
    fairseq-heads carry pack "$R" "$CARRY"
    echo "cpu_session: packed; now git add $CARRY (and publish: docs/results/europarl_en_it_cpu/README.md)"
    ;;
*)
    echo "cpu_session: unknown action $ACTION (start or stop)" >&2; exit 2
    ;;
esac
