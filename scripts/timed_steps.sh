#!/usr/bin/env bash
# Runs `make STEP` for each STEP in order and prints, at the end, how long each took (wall time and
# the CPU time of everything it ran), so that a step that grows is seen in every run. The table is
# printed whether the steps pass or fail (also on Ctrl-C). A failing step stops the run unless
# KEEP_GOING=1; the exit status is the first failure's.
#
# A STEP of the form A+B runs `make A` and `make B` side by side (B's output is printed when both
# have ended); each has its row, marked, and the total counts the pair's wall time once. A side may
# be a sequence, A+B,C: B then C (C only if B passed, unless KEEP_GOING=1), beside A. The sides after
# the first run niced (SIDE_NICE, 19 by default): they take the cores A leaves idle and do not slow
# A, the longer step the pair is there for (on a busy machine the CPU's time is what runs out).
#
# Usage: scripts/timed_steps.sh STEP...      (`make test` calls it with CI's steps)
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
names=() secs=() cpus=() codes=()
status=0 wall=0
TICKS=$(getconf CLK_TCK)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# CPU time (user + system, in clock ticks) of a shell's finished children (this shell's, or the
# side-by-side subshell's): fields 16 and 17 of /proc/PID/stat; the command name (field 2) may hold
# spaces, so count from after its ')'.
children_ticks() {
  local rest
  rest=$(sed 's/^.*) //' "/proc/$1/stat")
  set -- $rest
  echo $((${14} + ${15}))
}
# run_step STEP RESULT_FILE: `make STEP`, its wall seconds, CPU seconds and exit status in the file.
run_step() {
  local me=$BASHPID start ticks rc # this shell (a $(...) is a subshell of its own)
  start=$(date +%s) ticks=$(children_ticks "$me")
  ${NICE:-} $MAKE --no-print-directory "$1"
  rc=$?
  echo "$(($(date +%s) - start)) $((($(children_ticks "$me") - ticks) / TICKS)) $rc" >"$2"
}
# run_lane I STEP...: the steps of side I in order, each with its result file, up to a failure.
run_lane() {
  local i=$1 j=0 rc step
  shift
  for step in "$@"; do
    run_step "$step" "$TMP/result-$i-$j"
    read -r _ _ rc <"$TMP/result-$i-$j"
    j=$((j + 1))
    [ "$rc" = 0 ] || [ "${KEEP_GOING:-0}" = 1 ] || break
  done
}
table() {
  local total_cpu=0 i
  printf '\n%-22s %9s %9s  %s\n' step seconds cpu-s result
  for i in "${!names[@]}"; do
    printf '%-22s %9s %9s  %s\n' "${names[$i]}" "${secs[$i]}" "${cpus[$i]}" "${codes[$i]}"
    total_cpu=$((total_cpu + cpus[i]))
  done
  printf '%-22s %9s %9s\n' total "$wall" "$total_cpu"
}
trap 'table; rm -rf "$TMP"; exit 130' INT TERM
for step in "$@"; do
  IFS=+ read -ra parts <<<"$step"
  start=$(date +%s)
  if [ "${#parts[@]}" = 1 ]; then
    run_step "$step" "$TMP/result"
    results=("$TMP/result")
  else
    results=() lanes=()
    for i in "${!parts[@]}"; do
      IFS=, read -ra lane <<<"${parts[$i]}"
      for j in "${!lane[@]}"; do results+=("$TMP/result-$i-$j") lanes+=("${lane[$j]}"); done
      if [ "$i" = 0 ]; then
        run_lane "$i" "${lane[@]}" &
      else
        NICE="nice -n ${SIDE_NICE:-19}" run_lane "$i" "${lane[@]}" >"$TMP/output-$i" 2>&1 &
      fi
    done
    wait
    for i in "${!parts[@]}"; do
      [ "$i" = 0 ] || { echo "== output of ${parts[$i]} (beside ${parts[0]})"; cat "$TMP/output-$i"; }
    done
    parts=("${lanes[@]}")
  fi
  wall=$((wall + $(date +%s) - start))
  for i in "${!parts[@]}"; do
    [ -s "${results[$i]}" ] || continue # a lane's step after its failure did not run
    read -r s c rc <"${results[$i]}"
    names+=("${parts[$i]}") secs+=("$s") cpus+=("$c")
    if [ "$rc" = 0 ]; then code=ok; else code="FAILED ($rc)"; fi
    [ "$step" = "${parts[$i]}" ] || code="$code (side by side: $step)"
    codes+=("$code")
    if [ "$rc" != 0 ] && [ "$status" = 0 ]; then status=$rc; fi
  done
  if [ "$status" != 0 ] && [ "${KEEP_GOING:-0}" != 1 ]; then break; fi
done
trap - INT TERM
table
exit "$status"
