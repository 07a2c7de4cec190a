#!/usr/bin/env bash
# Runs `make STEP` for each STEP in order and prints, at the end, how long each took (wall time and
# the CPU time of everything it ran), so that a step that grows is seen in every run. The table is printed whether the steps pass or fail (also on
# Ctrl-C). A failing step stops the run unless KEEP_GOING=1; the exit status is the first failure's.
#
# Usage: scripts/timed_steps.sh STEP...      (`make test` calls it with CI's steps)
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
names=() secs=() cpus=() codes=()
status=0
TICKS=$(getconf CLK_TCK)
# CPU time (user + system, in clock ticks) of this shell's finished children: fields 16 and 17 of
# /proc/PID/stat; the command name (field 2) may hold spaces, so count from after its ')'.
children_ticks() {
  local rest
  rest=$(sed 's/^.*) //' /proc/$$/stat)
  set -- $rest
  echo $((${14} + ${15}))
}
table() {
  local total=0 total_cpu=0 i
  printf '\n%-22s %9s %9s  %s\n' step seconds cpu-s result
  for i in "${!names[@]}"; do
    printf '%-22s %9s %9s  %s\n' "${names[$i]}" "${secs[$i]}" "${cpus[$i]}" "${codes[$i]}"
    total=$((total + secs[i])) total_cpu=$((total_cpu + cpus[i]))
  done
  printf '%-22s %9s %9s\n' total "$total" "$total_cpu"
}
trap 'table; exit 130' INT TERM
for step in "$@"; do
  start=$(date +%s) ticks=$(children_ticks)
  $MAKE --no-print-directory "$step"
  rc=$?
  names+=("$step") secs+=("$(($(date +%s) - start))") cpus+=("$((($(children_ticks) - ticks) / TICKS))")
  if [ "$rc" = 0 ]; then codes+=(ok); else codes+=("FAILED ($rc)"); fi
  if [ "$rc" != 0 ] && [ "$status" = 0 ]; then status=$rc; fi
  if [ "$rc" != 0 ] && [ "${KEEP_GOING:-0}" != 1 ]; then break; fi
done
trap - INT TERM
table
exit "$status"
