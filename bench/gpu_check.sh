#!/usr/bin/env bash
# bench/gpu_check.sh OUTDIR — the prepared GPU check of issue 6, one command on a GPU machine:
#   build (CUDA on) -> smoke run -> GPU tests (kernels, CUPTI, overheads, device, NCCL comm, the
#   GPU engine against the CPU) -> can several ranks share one GPU as fake hosts? -> memplan
#   validate --device cuda --cupti (ddp, zero1, zero2, zero3) on gpt2 and gpt2-medium shapes ->
#   fixed overheads (alone and on 2 ranks) -> NCCL bus-bandwidth sweep -> a summary table, last.
# Every step has its own timeout, cut to what is left of the whole budget (GPU_CHECK_BUDGET,
# default 460 s: under 8 minutes with the summary); a failing or timed-out step is recorded and
# the script goes on. Full logs go to OUTDIR/logs, JSON to OUTDIR, the table to
# OUTDIR/summary.txt, the machine to OUTDIR/env.txt. Without a GPU every GPU step says
# "skipped: no CUDA device (<reason>)" and the script ends in seconds (after the build).
#
# Several ranks on one GPU: NCCL refuses two ranks of one host on one GPU; it tells hosts apart
# by NCCL_HOSTID, so each rank gets its own (OUTDIR/fake_host.sh) and they talk over sockets on
# loopback (NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1). The probe step records whether that works
# (OUTDIR/fake_hosts.txt); if not, the runs fall back to one rank (memplan run: validate needs 2).
#
# Environment: BUILD (default build), GPU_CHECK_BUDGET (seconds), JOBS (make -j, default nproc).
# Exit status: 0 if no step failed or timed out (skips are fine), else 1.
set -u

OUT=${1:-}
if [ -z "$OUT" ]; then
  echo "usage: bench/gpu_check.sh OUTDIR" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
mkdir -p "$OUT/logs" || exit 2
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build}
BUDGET=${GPU_CHECK_BUDGET:-460}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
START=$(date +%s)

S_NAME=() S_STATUS=() S_SECS=() S_NOTE=()
NO_GPU=""          # the reason, once known that there is no usable GPU
BUILD_OK=1

elapsed() { echo $(( $(date +%s) - START )); }

record() {  # record NAME STATUS SECONDS NOTE
  S_NAME+=("$1"); S_STATUS+=("$2"); S_SECS+=("$3"); S_NOTE+=("$4")
  printf '#   %-22s %-8s %4ss  %s\n' "$1" "$2" "$3" "$4"
}

skip() {  # skip NAME REASON
  local n=${#S_NAME[@]}
  echo "# [$n] $1: skipped: $2"
  record "$1" skipped 0 "$2"
}

# step NAME TIMEOUT CMD... — runs CMD with its own timeout (cut to the budget left), output to
# OUT/logs/NN_NAME.log; sets LAST_LOG and LAST_RC. Returns 0 if it succeeded.
step() {
  local name=$1 limit=$2
  shift 2
  local n=${#S_NAME[@]}
  LAST_LOG=$(printf '%s/logs/%02d_%s.log' "$OUT" "$n" "$name")
  LAST_RC=1
  local left=$(( BUDGET - $(elapsed) - 10 ))
  if [ "$left" -lt 15 ]; then
    echo "# [$n] $name: skipped: out of time (budget ${BUDGET} s)"
    record "$name" skipped 0 "out of time (budget ${BUDGET} s)"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "# [$n] $name (timeout ${limit} s): $*" | cut -c1-200
  local t0 rc status note
  t0=$(date +%s)
  { echo "# $*"; echo "# started $(date -u '+%Y-%m-%dT%H:%M:%SZ'), timeout ${limit} s"; } > "$LAST_LOG"
  timeout --kill-after=10 "$limit" "$@" >> "$LAST_LOG" 2>&1
  rc=$?
  LAST_RC=$rc
  case $rc in
    0) status=ok; note="" ;;
    124|137) status=timeout; note="killed after ${limit} s" ;;
    *) status=FAIL; note="exit $rc: $(grep -m1 -E 'FAIL|rror|memplan:|skipped' "$LAST_LOG" | cut -c1-90)" ;;
  esac
  record "$name" "$status" $(( $(date +%s) - t0 )) "$note"
  [ "$rc" = 0 ]
}

note_last() {  # replaces the note of the last recorded step
  S_NOTE[${#S_NOTE[@]}-1]=$1
}

gpu_step() {  # gpu_step NAME TIMEOUT CMD... — a step that needs a GPU and a build
  if [ "$BUILD_OK" != 1 ]; then skip "$1" "the build failed"; return 1; fi
  if [ -n "$NO_GPU" ]; then skip "$1" "$NO_GPU"; return 1; fi
  step "$@"
}

# ---- the machine ----
{
  echo "date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
  echo "host: $(hostname)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "kernel: $(uname -sr)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv 2>&1
    nvidia-smi -L 2>&1
  else
    echo "nvidia-smi: not found"
  fi
  cuda=${CUDA_HOME:-/usr/local/cuda}
  "$cuda/bin/nvcc" --version 2>&1 | tail -n 2
  grep -hE '^#define NCCL_(MAJOR|MINOR|PATCH)' "$cuda/include/nccl.h" 2>/dev/null
  mpirun --version 2>&1 | head -n 1
} > "$OUT/env.txt" 2>&1
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ -n "$NGPU" ] || NGPU=0
echo "# gpu_check: output in $OUT; budget ${BUDGET} s; $NGPU GPU(s) listed by nvidia-smi"

# ---- 1. build ----
if ! step build 240 make -j"$JOBS" NO_DEPS=1 REQUIRE_CUDA=1 BUILD="$BUILD" all test-bin bench; then
  BUILD_OK=0
fi
M="$BUILD/memplan"

# ---- 2. is there a GPU? (the CUDA runtime's own answer, as memplan gets it), then a smoke run ----
if [ "$BUILD_OK" = 1 ]; then
  probe=$(timeout 60 "$M" run --model gpt2-tiny --device cuda --steps 1 --batch 1 --seq 8 2>&1)
  case $probe in
    *"no CUDA device"*) NO_GPU=$(printf '%s\n' "$probe" | grep -o -m1 'no CUDA device[^:]*') ;;
  esac
  if gpu_step smoke 60 "$M" run --model gpt2-tiny --device cuda --steps 2 --batch 1 --seq 16; then
    note_last "gpt2-tiny, 2 steps on the GPU"
  fi
else
  skip smoke "the build failed"
fi
[ "$NGPU" -ge 1 ] || [ -n "$NO_GPU" ] || NGPU=1   # a GPU without nvidia-smi: count one

# ---- 3. GPU tests (verbose: skips are visible) ----
gpu_step test_kern_cuda 120 "$BUILD/tests/test_kern_cuda" --verbose --jobs 4
gpu_step test_prof_cupti 90 "$BUILD/tests/test_prof_cupti" --verbose --jobs 1
gpu_step test_prof_overhead 60 "$BUILD/tests/test_prof_overhead" --verbose --jobs 1
gpu_step test_exec_device 60 "$BUILD/tests/test_exec_device" --verbose --jobs 1
gpu_step test_exec_comm_nccl 90 "$BUILD/tests/test_exec_comm" --verbose --jobs 1 --filter 'comm/nccl*'

# ---- 4. several ranks on one GPU? ----
cat > "$OUT/fake_host.sh" <<'WRAPPER'
#!/bin/sh
# one fake host per MPI rank: NCCL then lets ranks share a GPU (over sockets)
NCCL_HOSTID="memplan-fake-host-${OMPI_COMM_WORLD_RANK:-0}"
export NCCL_HOSTID
exec "$@"
WRAPPER
chmod +x "$OUT/fake_host.sh"
FAKE=(mpirun -np 2 --oversubscribe -x NCCL_SOCKET_IFNAME=lo -x NCCL_IB_DISABLE=1 "$OUT/fake_host.sh")
RANKS=1
MPIR=(mpirun -np 1)
if gpu_step fake_hosts_probe 90 env NCCL_DEBUG=INFO "${FAKE[@]}" "$BUILD/tests/mpi/comm_check" collectives --nccl; then
  FAKE_OK=1
  note_last "2 ranks on one GPU with NCCL_HOSTID per rank: works"
else
  FAKE_OK=0
fi
{
  echo "# can two MPI ranks share one GPU in one NCCL communicator with a distinct NCCL_HOSTID each?"
  echo "# (comm_check collectives --nccl: every collective, exact inputs; NCCL_SOCKET_IFNAME=lo, NCCL_IB_DISABLE=1)"
  if [ -n "$NO_GPU" ] || [ "$BUILD_OK" != 1 ]; then echo "outcome: not tried (${NO_GPU:-the build failed})"
  elif [ "$FAKE_OK" = 1 ]; then echo "outcome: works"
  else echo "outcome: refused or failed (exit $LAST_RC)"; fi
  [ -f "${LAST_LOG:-/nonexistent}" ] && grep -hE 'NCCL (WARN|INFO) (Using network|Channel 00|Connected|NET/Socket)|Duplicate GPU|comm_check: rank|FAIL' "$LAST_LOG" | head -n 20
} > "$OUT/fake_hosts.txt"
if [ -z "$NO_GPU" ] && [ "$BUILD_OK" = 1 ]; then
  if [ "$NGPU" -ge 2 ]; then RANKS=2; MPIR=(mpirun -np 2 --oversubscribe); MODE="one rank per GPU"
  elif [ "$FAKE_OK" = 1 ]; then RANKS=2; MPIR=("${FAKE[@]}"); MODE="2 fake hosts on one GPU"
  else MODE="one rank: fake hosts did not work"
  fi
  echo "# ranks for the runs: $RANKS ($MODE)"
fi

# ---- 5. the GPU engine against the CPU (1 and 2 ranks), validate and CUPTI on gpt2-tiny ----
gpu_step test_exec_gpu 240 env MEMPLAN_FAKE_HOSTS="$FAKE_OK" "$BUILD/tests/test_exec_gpu" --verbose --jobs 2

# ---- 6. validate on gpt2 and gpt2-medium shapes (short: B 1, T 256, 2 steps) ----
validate() {  # validate MODEL TIMEOUT [EXTRA FLAGS...]
  local model=$1 limit=$2
  shift 2
  local common=(--model "$model" --batch 1 --seq 256 --steps 2 --device cuda --cupti --gpu h200 --timeout 120 "$@")
  if [ "$RANKS" = 2 ] || [ -n "$NO_GPU" ] || [ "$BUILD_OK" != 1 ]; then
    if gpu_step "validate_$model" "$limit" "${MPIR[@]}" "$M" validate "${common[@]}" --strategy all \
         --json="$OUT/validate_$model.json"; then
      note_last "$(grep -m1 '^# validate:' "$LAST_LOG")"
    fi
  else   # validate compares strategies on >= 2 ranks; one rank trains the plain replica
    if gpu_step "run_$model" "$limit" "${MPIR[@]}" "$M" run "${common[@]}" --strategy ddp --json="$OUT/run_$model.json"; then
      note_last "1 rank (no validate): $(grep -m1 '^# CUPTI memory' "$LAST_LOG" | cut -c1-80)"
    fi
  fi
}
validate gpt2 150 --trace "$OUT/trace_gpt2.json"   # the trace holds the last strategy run (zero3)

# ---- 7. fixed overheads ----
if gpu_step overheads_1rank 60 "$BUILD/bench/gpu_overheads" --json "$OUT/overheads_1rank.json"; then
  note_last "$(awk '/^-/{h=1;next} h&&NF{print "MiB: context " $3 ", cublas " $4 ", nccl(1 rank) " $7; exit}' "$LAST_LOG")"
fi
if [ "$RANKS" = 2 ]; then
  if gpu_step overheads_2ranks 90 "${MPIR[@]}" "$BUILD/bench/gpu_overheads" --json "$OUT/overheads_2ranks.json"; then
    note_last "$(awk '/^-/{h=1;next} h&&NF{print "MiB: context " $3 ", cublas " $4 ", nccl " $7 " (sharing " $11 ")"; exit}' "$LAST_LOG")"
  fi
elif [ -z "$NO_GPU" ] && [ "$BUILD_OK" = 1 ]; then
  skip overheads_2ranks "one rank only (fake hosts did not work)"
else
  skip overheads_2ranks "${NO_GPU:-the build failed}"
fi

# ---- 8. NCCL bus bandwidth, 8 B .. 1 GiB ----
if gpu_step nccl_sweep 120 "${MPIR[@]}" "$BUILD/bench/bench_nccl" --iters 10 --target 0.02 --max-bytes 1GiB \
     --json "$OUT/nccl.json"; then
  note_last "$(grep -m1 '^# peak busbw' "$LAST_LOG" | cut -c3-100)"
fi

# ---- 9. the bigger model last: it is the first to go if time runs short ----
validate gpt2-medium 150

# ---- summary (last) ----
FAILED=0
GPU_NAME=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
{
  echo "# gpu_check summary: $(date -u '+%Y-%m-%dT%H:%M:%SZ'), $(elapsed) s of ${BUDGET} s; GPU: ${GPU_NAME:-${NO_GPU:-unknown}}"
  echo "# ranks for the runs: $RANKS; fake hosts: $(grep -m1 '^outcome' "$OUT/fake_hosts.txt" | cut -c10-)"
  printf '%-22s %-8s %7s  %s\n' step status time note
  printf '%-22s %-8s %7s  %s\n' - - s -
  for i in "${!S_NAME[@]}"; do
    printf '%-22s %-8s %7s  %s\n' "${S_NAME[$i]}" "${S_STATUS[$i]}" "${S_SECS[$i]}" "${S_NOTE[$i]}"
    case ${S_STATUS[$i]} in FAIL|timeout) FAILED=1 ;; esac
  done
} > "$OUT/summary.txt"
echo
cat "$OUT/summary.txt"
exit "$FAILED"
