#!/usr/bin/env bash
# Runs `make STEP` for each step and prints, at the end, how long each took: its wall time and the
# CPU time of everything it ran, so that a step that grows is seen in every run, and a step slow
# for want of a core is told from one that does more work.
#
# Usage: scripts/timed_steps.sh STEP... [-- LANE...]      (`make test` calls it with CI's steps)
#
# The STEPs before `--` run one after another, their output shown as it comes. Then the LANEs run
# side by side, each one argument of steps separated by spaces, run in order: on two cores a lane
# of builds and one-core checks fills what the test suite beside it leaves idle. The first lane's
# output is shown as it comes; every other lane's goes to $STEPS_DIR/STEP.log (default
# target/steps; results are kept there too, each run starts it afresh), and is printed
# whole, step by step, once all lanes have ended (a line says when each of its steps ends).
#
# A failing step stops its lane, and no lane starts another step, unless KEEP_GOING=1. The table is
# printed whether the steps pass or fail (also on Ctrl-C); the exit status is the first failure's.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
LOGS=${STEPS_DIR:-target/steps}
TICKS=$(getconf CLK_TCK)
rm -rf "$LOGS" && mkdir -p "$LOGS"
began=$(date +%s)

# CPU time (user + system, in clock ticks) of the finished children of the shell PID: fields 16
# and 17 of /proc/PID/stat; the command name (field 2) may hold spaces, so count from after its
# ')'. The caller passes its own BASHPID: a lane is a subshell whose children are its own, and
# this function runs in a command substitution, a subshell of its own.
children_ticks() {
  local rest
  rest=$(sed 's/^.*) //' "/proc/$1/stat")
  set -- $rest
  echo $((${14} + ${15}))
}

# run_step LANE STEP: runs it (its output to the terminal for lane 1, else to its log) and writes
# "LANE SECONDS CPU RC" to $LOGS/STEP.result. Returns the step's status.
run_step() {
  local lane=$1 step=$2 self=$BASHPID start ticks rc
  start=$(date +%s) ticks=$(children_ticks "$self")
  if [ "$lane" -le 1 ]; then
    $MAKE --no-print-directory "$step"
  else
    $MAKE --no-print-directory "$step" >"$LOGS/$step.log" 2>&1
  fi
  rc=$?
  echo "$lane $(($(date +%s) - start)) $((($(children_ticks "$self") - ticks) / TICKS)) $rc" >"$LOGS/$step.result"
  if [ "$lane" -gt 1 ]; then
    printf "\n"; echo "== [lane $lane] $step: $([ "$rc" = 0 ] && echo ok || echo "FAILED ($rc)") ($LOGS/$step.log)"
  fi
  if [ "$rc" != 0 ] && [ "${KEEP_GOING:-0}" != 1 ]; then touch "$LOGS/.stop"; fi
  return "$rc"
}

# run_lane LANE STEP...: the steps in order, until one fails or another lane has failed.
run_lane() {
  local lane=$1 step
  shift
  for step in "$@"; do
    [ -e "$LOGS/.stop" ] && return
    run_step "$lane" "$step" || [ "${KEEP_GOING:-0}" = 1 ] || return
  done
}

sequential=() lanes=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do sequential+=("$1"); shift; done
[ $# -gt 0 ] && shift && lanes=("$@")
order=("${sequential[@]}")
for l in "${lanes[@]}"; do read -ra words <<<"$l"; order+=("${words[@]}"); done

table() {
  local cpu=0 status=0 step lane secs c rc result
  printf '\n%-22s %9s %9s %5s  %s\n' step seconds cpu-s lane result
  for step in "${order[@]}"; do
    [ -e "$LOGS/$step.result" ] || continue
    read -r lane secs c rc <"$LOGS/$step.result"
    if [ "$rc" = 0 ]; then result=ok; else result="FAILED ($rc)"; fi
    if [ "$lane" = 0 ]; then lane=-; fi
    printf '%-22s %9s %9s %5s  %s\n' "$step" "$secs" "$c" "$lane" "$result"
    cpu=$((cpu + c))
    if [ "$rc" != 0 ] && [ "$status" = 0 ]; then status=$rc; fi
  done
  printf '%-22s %9s %9s\n' total "$(($(date +%s) - began))" "$cpu"
  return "$status"
}
stop() {
  # shellcheck disable=SC2046
  kill $(jobs -p) 2>/dev/null
  table
  exit 130
}
trap stop INT TERM

run_lane 0 "${sequential[@]}"
if [ ${#lanes[@]} -gt 0 ] && [ ! -e "$LOGS/.stop" ]; then
  n=0
  for l in "${lanes[@]}"; do
    n=$((n + 1))
    read -ra words <<<"$l"
    run_lane "$n" "${words[@]}" &
  done
  wait
  for l in "${lanes[@]:1}"; do
    read -ra words <<<"$l"
    for step in "${words[@]}"; do
      [ -e "$LOGS/$step.log" ] || continue
      printf '\n==== %s (a lane beside the first; %s) ====\n' "$step" "$LOGS/$step.log"
      cat "$LOGS/$step.log"
    done
  done
fi
trap - INT TERM
table
