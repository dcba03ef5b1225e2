#!/usr/bin/env bash
# bench/gpu_check.sh OUTDIR — the prepared GPU check: one call of at most 8 minutes on one GPU
# machine (an H200 with 16 cores). The most valuable measurements run first and every result is
# written the moment it exists; OUTDIR/summary.txt is rewritten after every step and its first
# line says what ran, what failed and why, and what was skipped.
#
# Order (docs/gpu.md, "bench/gpu_check.sh"):
#   build (make all bench: the gate; the tests are built apart with -k, so one broken test
#   binary skips only itself) -> smoke (gpt2-tiny on the GPU; it also decides whether CUDA sees
#   the GPU that nvidia-smi lists) -> one rank: fixed overheads, `run --cupti` on gpt2,
#   the one-rank torch row (skipped with its reason: no PyTorch venv there), the ResNet-50 step on the GPU and its check against the
#   CPU -> the GPU kernel tests -> several ranks: the fake-host probe, validate --cupti on gpt2,
#   ResNet-50 with SyncBatchNorm, overheads, the GPU engine against the CPU, the NCCL sweep,
#   validate on gpt2-medium (first to go when time runs short).
#
# Failure rules: a GPU that nvidia-smi lists but CUDA cannot use (a driver too old for the CUDA
# runtime, a GPU in a bad state) fails the check loudly, with both facts, the driver's CUDA
# version and the compute mode in the summary; no nvidia-smi and no CUDA device is "no GPU" (exit
# 0 with every GPU step skipped). Every step has its own timeout, cut to what is left of
# GPU_CHECK_BUDGET; it runs in its own session (setsid), and after it ends every process left in
# that session, and every GPU process that appeared during it (nvidia-smi's compute apps), is
# ended by PID, so an orphaned rank cannot hold the GPU or skew the next step's baseline.
# A failed or timed-out step is recorded and the script goes on. NCCL communicators are created
# non-blocking and polled against the ranks' --timeout (exec_comm.c), so one hang costs one step.
#
# Several ranks on one GPU (fake hosts): NCCL tells hosts apart by NCCL_HOSTID, so each rank gets
# its own (OUTDIR/fake_host.sh); they talk over loopback sockets and time-slice the GPU. Every
# time, bandwidth and NCCL-memory figure from that mode is NOT a real measurement: such steps
# say so in their note, and NVLS/MNNVL are off, the sweep stops at 64 MiB.
#
# Environment: BUILD (default build), GPU_CHECK_BUDGET (seconds, default 450), JOBS (make -j,
# default nproc), MAKE (default make), GPU_CHECK_MAX_STEP (caps every step's timeout: dry runs
# and the tests of this script), GPU_CHECK_DEV_GLOB (the GPU device nodes, default
# /dev/nvidia[0-9]*: a node without a usable CUDA device also fails the check), CUDA_HOME.
# Exit status: 0 when no step failed or timed out and the GPU (if any) was usable; 1 otherwise;
# 2 on usage errors.
set -u

OUT=${1:-}
if [ -z "$OUT" ] || [ $# -ne 1 ]; then
  echo "usage: bench/gpu_check.sh OUTDIR" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
mkdir -p "$OUT/logs" || exit 2
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build}
BUDGET=${GPU_CHECK_BUDGET:-450}
MAX_STEP=${GPU_CHECK_MAX_STEP:-0}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
MAKE=${MAKE:-make}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
START=$(date +%s)
M="$BUILD/memplan"
mkdir -p "$BUILD" && ABS_BUILD=$(cd "$BUILD" && pwd)

S_NAME=() S_STATUS=() S_SECS=() S_NOTE=()
NO_GPU=""        # the reason when there is no GPU at all (nvidia-smi lists none, CUDA sees none)
UNUSABLE=""      # the reason when nvidia-smi lists a GPU that CUDA cannot use: fails the check
BUILD_OK=1
TESTS_OK=1
RANKS=1
FAKE_OK=0
MODE="one rank"
REAL=""          # note prefix for figures that are not real measurements

elapsed() { echo $(( $(date +%s) - START )); }

# ---- the machine (first, before anything can hang) ----
have_smi=0
command -v nvidia-smi >/dev/null 2>&1 && have_smi=1
smi() { [ "$have_smi" = 1 ] && timeout 20 nvidia-smi "$@" 2>/dev/null; }
NGPU_SMI=$(smi -L | grep -c '^GPU' || true)
[ -n "$NGPU_SMI" ] || NGPU_SMI=0
# device nodes say a GPU is there even when nvidia-smi is missing (GPU_CHECK_DEV_GLOB: tests)
NGPU_DEV=$(ls -d ${GPU_CHECK_DEV_GLOB:-/dev/nvidia[0-9]*} 2>/dev/null | wc -l)
DRIVER=$(smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
DRIVER_CUDA=$(smi | grep -o 'CUDA Version: *[0-9.]*' | head -n 1 | sed 's/CUDA Version: *//')
COMPUTE_MODE=$(smi --query-gpu=compute_mode --format=csv,noheader | head -n 1)
GPU_NAME=$(smi --query-gpu=name,memory.total --format=csv,noheader | head -n 1)
GPU_FACTS="nvidia-smi lists $NGPU_SMI GPU(s)${GPU_NAME:+ ($GPU_NAME)}, driver ${DRIVER:-unknown} (CUDA ${DRIVER_CUDA:-unknown}), compute mode ${COMPUTE_MODE:-unknown}"
[ "$have_smi" = 1 ] || GPU_FACTS="nvidia-smi: not found"
[ "$NGPU_SMI" -gt 0 ] || [ "$NGPU_DEV" -eq 0 ] || GPU_FACTS="$GPU_FACTS; but $NGPU_DEV GPU device node(s) /dev/nvidiaN exist"
{
  echo "date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
  echo "host: $(hostname)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "kernel: $(uname -sr)"
  echo "gpu: $GPU_FACTS"
  echo "CUDA_MODULE_LOADING: ${CUDA_MODULE_LOADING:-unset}"
  smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id,compute_mode --format=csv
  smi -L
  cuda=${CUDA_HOME:-/usr/local/cuda}
  "$cuda/bin/nvcc" --version 2>&1 | tail -n 2
  grep -hE '^#define NCCL_(MAJOR|MINOR|PATCH)' "$cuda/include/nccl.h" 2>/dev/null
  mpirun --version 2>&1 | head -n 1
} > "$OUT/env.txt" 2>&1
# GPU processes already there (not ours): never ended
BASE_PIDS=" $(smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ') "

# ---- the summary: rewritten after every step, headline first ----
headline() {
  local ran=0 ok=0 failed="" skipped=0 why_skip="" i
  for i in "${!S_NAME[@]}"; do
    case ${S_STATUS[$i]} in
      ok) ran=$((ran + 1)); ok=$((ok + 1)) ;;
      FAIL|timeout) ran=$((ran + 1)); failed+="${failed:+; }${S_NAME[$i]} ${S_STATUS[$i]}: ${S_NOTE[$i]}" ;;
      skipped) skipped=$((skipped + 1))
               case "|$why_skip|" in *"|${S_NOTE[$i]}|"*) ;; *) why_skip+="${why_skip:+|}${S_NOTE[$i]}" ;; esac ;;
    esac
  done
  local verdict=PASS
  { [ -n "$failed" ] || [ -n "$UNUSABLE" ] || [ "$BUILD_OK" != 1 ]; } && verdict=FAIL
  local gpu
  if [ -n "$UNUSABLE" ]; then gpu="GPU PRESENT BUT UNUSABLE: $UNUSABLE"
  elif [ -n "$NO_GPU" ]; then gpu="no GPU: $NO_GPU"
  else gpu="$GPU_FACTS; ranks $RANKS ($MODE)"; fi
  printf '# gpu_check %s: ran %d step(s), %d ok; failed: %s; skipped %d%s; %s; %s s of %s\n' \
    "$verdict" "$ran" "$ok" "${failed:-none}" "$skipped" "${why_skip:+ (${why_skip//|/; })}" "$gpu" "$(elapsed)" "$BUDGET"
}

write_summary() {
  local final=${1:-0} i
  {
    headline
    [ "$final" = 1 ] || echo "# (in progress: rewritten after every step)"
    printf '%-22s %-8s %5s  %s\n' step status s note
    for i in "${!S_NAME[@]}"; do
      printf '%-22s %-8s %5s  %s\n' "${S_NAME[$i]}" "${S_STATUS[$i]}" "${S_SECS[$i]}" "${S_NOTE[$i]}"
    done
  } > "$OUT/summary.txt.tmp" && mv "$OUT/summary.txt.tmp" "$OUT/summary.txt"
}

record() {  # record NAME STATUS SECONDS NOTE
  S_NAME+=("$1"); S_STATUS+=("$2"); S_SECS+=("$3"); S_NOTE+=("$4")
  printf '#   %-22s %-8s %4ss  %s\n' "$1" "$2" "$3" "$4"
  write_summary
}

skip() {  # skip NAME REASON
  echo "# [${#S_NAME[@]}] $1: skipped: $2"
  record "$1" skipped 0 "$2"
}

note_last() { S_NOTE[${#S_NOTE[@]}-1]=$1; write_summary; }

# Ends, by PID, what a step left behind: the processes of its session, and GPU processes that
# appeared while it ran. Prints how many.
reap() {  # reap SESSION_ID
  local sid=$1 n=0 pid
  for pid in $(ps -eo pid=,sid= 2>/dev/null | awk -v s="$sid" '$2 == s { print $1 }'); do
    kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
  done
  # nvidia-smi's PIDs may be another PID namespace's: only a process of this checkout qualifies
  for pid in $(smi --query-compute-apps=pid --format=csv,noheader | grep -E '^[0-9]+$'); do
    case "$BASE_PIDS" in *" $pid "*) continue ;; esac
    [ "$pid" = "$$" ] && continue
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -e "$ABS_BUILD" -e "$OUT" || continue
    kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
  done
  echo "$n"
}

# step NAME TIMEOUT CMD... — CMD in its own session with its own timeout (cut to the budget
# left, and to GPU_CHECK_MAX_STEP), output to OUT/logs/NN_NAME.log; sets LAST_LOG, LAST_RC.
step() {
  local name=$1 limit=$2
  shift 2
  local n=${#S_NAME[@]}
  LAST_LOG=$(printf '%s/logs/%02d_%s.log' "$OUT" "$n" "$name")
  LAST_RC=1
  local left=$(( BUDGET - $(elapsed) - 10 ))
  if [ "$left" -lt 15 ]; then
    skip "$name" "out of time (budget ${BUDGET} s)"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  [ "$MAX_STEP" -gt 0 ] && [ "$limit" -gt "$MAX_STEP" ] && limit=$MAX_STEP
  echo "# [$n] $name (timeout ${limit} s): $*" | cut -c1-220
  local t0 rc status note left_over
  t0=$(date +%s)
  { echo "# $*"; echo "# started $(date -u '+%Y-%m-%dT%H:%M:%SZ'), timeout ${limit} s"; } > "$LAST_LOG"
  # the session leader writes its pid (= the session id) before it becomes the command
  local sidfile="$OUT/logs/.sid" sid
  rm -f "$sidfile"
  setsid -w sh -c 'echo $$ > "$0"; exec "$@"' "$sidfile" timeout --kill-after=5 "$limit" "$@" >> "$LAST_LOG" 2>&1 < /dev/null
  rc=$?
  sid=$(cat "$sidfile" 2>/dev/null)
  left_over=0
  [ -n "$sid" ] && left_over=$(reap "$sid")
  LAST_RC=$rc
  case $rc in
    0) status=ok; note="" ;;
    124|137) status=timeout; note="killed after ${limit} s" ;;
    *) status=FAIL
       note="exit $rc: $(grep -m1 -E 'FAIL|rror|memplan:|cnn_device:|bench_nccl:|timed out|did not complete' "$LAST_LOG" | cut -c1-110)" ;;
  esac
  [ "$left_over" -gt 0 ] && note="$note${note:+; }ended $left_over leftover process(es) by PID"
  local skips
  skips=$(grep '^\[SKIP\]' "$LAST_LOG" 2>/dev/null | grep -vc 'Test is disabled' || true)   # --filter's are no skips
  [ "${skips:-0}" -gt 0 ] && note="$note${note:+; }$skips test(s) skipped: $(grep '^\[SKIP\]' "$LAST_LOG" | grep -v 'Test is disabled' | head -n 1 | sed 's/^[^:]*::[^:]*: *//' | cut -c1-60)"
  record "$name" "$status" $(( $(date +%s) - t0 )) "$note"
  [ "$rc" = 0 ]
}

gpu_ready() {  # the reason a GPU step cannot run, or nothing
  if [ "$BUILD_OK" != 1 ]; then echo "the build failed"
  elif [ -n "$UNUSABLE" ]; then echo "the GPU is unusable (see the first line)"
  elif [ -n "$NO_GPU" ]; then echo "$NO_GPU"; fi
}

gpu_step() {  # gpu_step NAME TIMEOUT CMD...
  local why
  why=$(gpu_ready)
  if [ -n "$why" ]; then skip "$1" "$why"; return 1; fi
  step "$@"
}

test_step() {  # test_step NAME TIMEOUT BINARY ARGS... — a Criterion test binary, verbose
  local name=$1 limit=$2 bin=$3
  shift 3
  if [ -z "$(gpu_ready)" ] && [ ! -x "$bin" ]; then
    skip "$name" "not built (build_tests failed: see its log)"
    return 1
  fi
  gpu_step "$name" "$limit" "$bin" --verbose "$@"
}

echo "# gpu_check: output in $OUT; budget ${BUDGET} s; $GPU_FACTS"
write_summary

# ---- 1. build: the programs gate everything; the tests are built apart (-k) ----
if ! step build 120 "$MAKE" -j"$JOBS" NO_DEPS=1 REQUIRE_CUDA=1 REQUIRE_NCCL=1 REQUIRE_CUPTI=1 BUILD="$BUILD" all bench; then
  BUILD_OK=0
  note_last "${S_NOTE[${#S_NOTE[@]}-1]}; every GPU step is skipped"
fi
if [ "$BUILD_OK" = 1 ]; then
  if ! step build_tests 90 "$MAKE" -k -j"$JOBS" NO_DEPS=1 REQUIRE_CUDA=1 REQUIRE_NCCL=1 REQUIRE_CUPTI=1 BUILD="$BUILD" test-bin; then
    TESTS_OK=0
    note_last "${S_NOTE[${#S_NOTE[@]}-1]}; the tests that built still run"
  fi
fi

# ---- 2. smoke: does CUDA see the GPU nvidia-smi lists? ----
if [ "$BUILD_OK" = 1 ]; then
  if step smoke 60 "$M" run --model gpt2-tiny --device cuda --steps 2 --batch 1 --seq 16; then
    note_last "gpt2-tiny, 2 steps on the GPU"
  else
    cuda_says=$(grep -o -m1 'no CUDA device[^:]*' "$LAST_LOG")
    if [ -n "$cuda_says" ] && { [ "$NGPU_SMI" -gt 0 ] || [ "$NGPU_DEV" -gt 0 ]; }; then
      UNUSABLE="$GPU_FACTS, but CUDA reports: $cuda_says"
      note_last "$UNUSABLE"
    elif [ -n "$cuda_says" ]; then
      NO_GPU="$cuda_says; $GPU_FACTS"
      S_STATUS[${#S_STATUS[@]}-1]=skipped
      note_last "$NO_GPU"
    fi
  fi
fi
NGPU=$NGPU_SMI
[ "$NGPU" -ge 1 ] || [ -n "$(gpu_ready)" ] || NGPU=1   # CUDA works without nvidia-smi: count one
MPI1=(mpirun -np 1)

# ---- 3. one rank: what the planner still takes from public estimates, first ----
if gpu_step overheads_1rank 45 "$BUILD/bench/gpu_overheads" --json "$OUT/overheads_1rank.json"; then
  note_last "$(awk '/^-/{h=1;next} h&&NF{print "MiB: context " $3 ", cublas " $4 ", nccl(1 rank) " $7; exit}' "$LAST_LOG")"
fi
if gpu_step run_gpt2_cupti 90 "$M" run --model gpt2 --batch 1 --seq 256 --steps 2 --device cuda --cupti --gpu h200 \
     --timeout 60 --strategy ddp --json="$OUT/run_gpt2_1rank.json"; then
  note_last "1 rank (validate needs 2): $(grep -m1 '^# CUPTI memory' "$LAST_LOG" | cut -c1-90)"
fi
# ---- the one-rank torch row (CUDA context, cuBLAS workspace and caching-allocator figures as
# PyTorch sees them). It needs the PyTorch venv of bench/torch (make torch-env: 5.5 GB from PyPI),
# which a device machine that reaches no package registry and receives at most 64 MiB cannot
# have, and the harness measures CPU ranks only (docs/gpu.md "The torch row"). Said, not hidden. ----
TORCH_PY=${MEMPLAN_TORCH_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memplan/torch-venv}/bin/python
if [ -x "$TORCH_PY" ] && "$TORCH_PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  skip torch_1rank "PyTorch with CUDA is here, but the harness measures CPU ranks only (docs/gpu.md)"
else
  skip torch_1rank "no PyTorch venv on this machine (make torch-env needs PyPI; docs/gpu.md)"
fi
if gpu_step cnn_1rank 100 "$BUILD/bench/cnn_device" --device cuda --model resnet50 --batches 8,32 --steps 3 \
     --timeout 60 --json "$OUT/cnn_1rank.json"; then
  note_last "ResNet-50 224x224: $(awk '$1 ~ /^[0-9]+$/ {printf "%sB %s ms ", $1, $2}' "$LAST_LOG")"
fi
if gpu_step cnn_check_1rank 60 "$BUILD/bench/cnn_device" --device cuda --model resnet-mini --image 64 --batches 4 \
     --steps 2 --check --timeout 60; then
  note_last "$(grep -m1 -o 'ok: worst unit.*' "$LAST_LOG" | cut -c1-90)"
fi

# ---- 4. the GPU kernel tests (verbose: skips are visible and counted) ----
T="$BUILD/tests"
test_step test_kern_cuda 60 "$T/test_kern_cuda" --jobs 4
test_step test_kern_cnn_cuda 60 "$T/test_kern_cnn_cuda" --jobs 4
test_step test_prof_cupti 45 "$T/test_prof_cupti" --jobs 1
test_step test_prof_overhead 45 "$T/test_prof_overhead" --jobs 1
test_step test_exec_device 30 "$T/test_exec_device" --jobs 1
test_step test_exec_comm_nccl 60 "$T/test_exec_comm" --jobs 1 --filter 'comm/nccl*'

# ---- 5. several ranks ----
cat > "$OUT/fake_host.sh" <<'WRAPPER'
#!/bin/sh
# one fake host per MPI rank: NCCL then lets ranks share a GPU (over sockets)
NCCL_HOSTID="memplan-fake-host-${OMPI_COMM_WORLD_RANK:-0}"
export NCCL_HOSTID
exec "$@"
WRAPPER
chmod +x "$OUT/fake_host.sh"
FAKE=(mpirun -np 2 --oversubscribe -x NCCL_SOCKET_IFNAME=lo -x NCCL_IB_DISABLE=1 -x NCCL_NVLS_ENABLE=0
      -x NCCL_MNNVL_ENABLE=0 "$OUT/fake_host.sh")
MPIR=("${MPI1[@]}")
if [ -z "$(gpu_ready)" ] && [ "$NGPU" -ge 2 ]; then
  RANKS=2; MPIR=(mpirun -np 2 --oversubscribe); MODE="one rank per GPU"
  skip fake_hosts_probe "not needed: $NGPU GPUs"
elif [ ! -x "$T/mpi/comm_check" ] && [ -z "$(gpu_ready)" ]; then
  skip fake_hosts_probe "not built (build_tests failed: see its log)"
elif gpu_step fake_hosts_probe 60 env NCCL_DEBUG=INFO "${FAKE[@]}" "$T/mpi/comm_check" collectives --nccl; then
  FAKE_OK=1; RANKS=2; MPIR=("${FAKE[@]}"); MODE="2 fake hosts on one GPU: not a real measurement"
  REAL="NOT REAL (fake hosts): "
  note_last "2 ranks on one GPU with NCCL_HOSTID per rank: works (sockets over loopback)"
elif [ -z "$(gpu_ready)" ]; then
  MODE="one rank: fake hosts did not work"
  if [ "${COMPUTE_MODE:-}" = "Exclusive_Process" ]; then
    note_last "${S_NOTE[${#S_NOTE[@]}-1]}; the GPU's compute mode is Exclusive_Process: one process per GPU, so ranks cannot share it"
  fi
fi
{
  echo "# can two MPI ranks share one GPU in one NCCL communicator with a distinct NCCL_HOSTID each?"
  echo "# (comm_check collectives --nccl; NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_MNNVL_ENABLE=0)"
  echo "compute mode: ${COMPUTE_MODE:-unknown}"
  echo "outcome: ${S_NOTE[${#S_NOTE[@]}-1]}"
  [ -f "${LAST_LOG:-/nonexistent}" ] && grep -hE 'NCCL (WARN|INFO) (Using network|Channel 00|Connected|NET/Socket)|Duplicate GPU|comm_check: rank|FAIL|exclusive' "$LAST_LOG" | head -n 20
} > "$OUT/fake_hosts.txt"
echo "# ranks for the multi-rank steps: $RANKS ($MODE)"
multi() {  # multi NAME TIMEOUT CMD... — a step on the ranks of the run, or a skip
  local why
  why=$(gpu_ready)
  if [ -z "$why" ] && [ "$RANKS" -lt 2 ]; then skip "$1" "one rank only ($MODE)"; return 1; fi
  gpu_step "$@"
}
validate() {  # validate MODEL TIMEOUT [EXTRA FLAGS...]
  local model=$1 limit=$2
  shift 2
  if multi "validate_$model" "$limit" "${MPIR[@]}" "$M" validate --model "$model" --batch 1 --seq 256 --steps 2 \
       --device cuda --cupti --gpu h200 --timeout 60 --strategy all --json="$OUT/validate_$model.json" "$@"; then
    note_last "$REAL$(grep -m1 '^# validate:' "$LAST_LOG")"
  elif [ -f "$OUT/validate_$model.json" ]; then
    note_last "${S_NOTE[${#S_NOTE[@]}-1]}; the strategies that finished are in validate_$model.json"
  fi
}
validate gpt2 120 --trace "$OUT/trace_gpt2.json"   # the trace holds the last strategy run (zero3)
if multi cnn_2ranks 120 "${MPIR[@]}" "$BUILD/bench/cnn_device" --device cuda --model resnet50 --batches 8,32 --steps 3 \
     --timeout 60 --json "$OUT/cnn_2ranks.json"; then
  note_last "${REAL}ResNet-50 + SyncBN, 2 ranks: $(awk '$1 ~ /^[0-9]+$/ {printf "%sB %s ms (syncbn %s) ", $1, $2, $5}' "$LAST_LOG")"
fi
if multi cnn_check_2ranks 60 "${MPIR[@]}" "$BUILD/bench/cnn_device" --device cuda --model resnet-mini --image 64 \
     --batches 4 --steps 2 --check --timeout 60; then
  note_last "$(grep -m1 -o 'ok: worst unit.*' "$LAST_LOG" | cut -c1-90)"
fi
if multi overheads_2ranks 60 "${MPIR[@]}" "$BUILD/bench/gpu_overheads" --json "$OUT/overheads_2ranks.json"; then
  note_last "$REAL$(awk '/^-/{h=1;next} h&&NF{print "MiB: context " $3 ", cublas " $4 ", nccl " $7 " (sharing " $11 ")"; exit}' "$LAST_LOG")"
fi
if [ -z "$(gpu_ready)" ] && [ ! -x "$T/test_exec_gpu" ]; then
  skip test_exec_gpu "not built (build_tests failed: see its log)"
else
  gpu_step test_exec_gpu 180 env MEMPLAN_FAKE_HOSTS="$FAKE_OK" "$T/test_exec_gpu" --verbose --jobs 2
fi
MAXB=1GiB
[ "$FAKE_OK" = 1 ] && MAXB=64MiB   # sockets on loopback: larger sizes only cost time
if gpu_step nccl_sweep 90 "${MPIR[@]}" "$BUILD/bench/bench_nccl" --iters 10 --target 0.02 --max-bytes "$MAXB" \
     --json "$OUT/nccl.json"; then
  note_last "$REAL$(grep -m1 '^# peak busbw' "$LAST_LOG" | cut -c3-100)"
fi
validate gpt2-medium 120   # the bigger model last: the first to go when time runs short

# ---- the summary ----
write_summary 1
echo
cat "$OUT/summary.txt"
case "$(head -n 1 "$OUT/summary.txt")" in "# gpu_check PASS"*) exit 0 ;; *) exit 1 ;; esac
