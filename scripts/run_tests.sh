#!/usr/bin/env bash
# Runs each Criterion test binary verbosely (so GPU skips are visible), then prints one summary
# line "N passed, N failed, N skipped". Exit status is non-zero if any test failed or crashed.
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
pass=0; fail=0; skip=0; bad=0
for t in "$@"; do
  name=$(basename "$t")
  jobs=2
  case "$name" in test_plan_*|test_kern_*|test_prof_*) ;; *) jobs=1;; esac  # mpirun tests: one at a time
  out=$("$t" --verbose --jobs "$jobs" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -E '^\[(SKIP|FAIL|----)\]|^\[====\] Synthesis' | grep -v '^\[----\] Criterion' 
  syn=$(printf '%s\n' "$out" | grep 'Synthesis:' | tail -n1)
  if [ -z "$syn" ]; then echo "$name: no Criterion summary (exit $rc)"; printf '%s\n' "$out" | tail -n 20; bad=$((bad+1)); continue; fi
  num() { printf '%s' "$syn" | sed -n "s/.*$1: \([0-9]*\).*/\1/p"; }
  tested=$(num Tested); passing=$(num Passing); failing=$(num Failing); crashing=$(num Crashing)
  skipped=$(printf '%s\n' "$out" | grep -c '^\[SKIP\]')
  pass=$((pass + passing)); fail=$((fail + failing + crashing)); skip=$((skip + skipped))
  [ "$rc" = 0 ] || { [ $((failing + crashing)) -gt 0 ] || bad=$((bad+1)); echo "$name: exit $rc"; }
  echo "# $name: tested $tested, passing $passing, failing $failing, crashing $crashing, skipped $skipped"
done
# PYTEST: a pytest command line (the Python package and the browser test, make test): its own
# summary line counted with the rest, its skips shown
if [ -n "${PYTEST:-}" ]; then
  out=$(sh -c "$PYTEST" 2>&1); rc=$?
  printf '%s\n' "$out" | grep -E '^(SKIPPED|FAILED|ERROR) '
  syn=$(printf '%s\n' "$out" | grep -E '^=*[ ]*[0-9]+ (passed|failed|skipped|error)' | tail -n1)
  count() { printf '%s' "$syn" | sed -n "s/.*\b\([0-9][0-9]*\) $1.*/\1/p"; }
  p=$(count passed); f=$(count failed); s=$(count skipped); e=$(count error)
  pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0} + ${e:-0})); skip=$((skip + ${s:-0}))
  if [ -z "$syn" ] || { [ "$rc" != 0 ] && [ $((${f:-0} + ${e:-0})) = 0 ]; }; then
    echo "pytest: no summary or exit $rc"; printf '%s\n' "$out" | tail -n 20; bad=$((bad+1))
  fi
  echo "# pytest: passing ${p:-0}, failing $((${f:-0} + ${e:-0})), skipped ${s:-0}"
fi
fail=$((fail + bad))
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
