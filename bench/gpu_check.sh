#!/usr/bin/env bash
# bench/gpu_check.sh OUTDIR — the prepared GPU check: one call of at most 8 minutes on one GPU
# machine (an H200 with 16 cores, its own CUDA image: docs/gpu.md "One device call"). The most
# valuable measurements run first and every result is written the moment it exists.
#
# OUTDIR gets three files, rewritten after every step (so a call cut short still brings them back):
#   summary.txt      line 1 the verdict (what ran, failed and why, was skipped); then the image's
#                    facts ("# image: ..."); then one row per step with its status, time and note
#   image.txt        what the machine has: OS, glibc, GPU, driver, nvcc, python3 and its torch,
#                    transformers, peft, accelerate, deepspeed; MPI, BLAS; where CUDA's libraries are
#   results.tar.gz   every step's log and every JSON result (the engine's, PyTorch's GPU rows)
# The loose files live in GPU_CHECK_WORK (default OUTDIR/work).
#
# Order (docs/gpu.md, "bench/gpu_check.sh"): image (the probe above) -> bundle (the carried
# build/gpu-bundle.tar.xz of scripts/gpu_bundle.sh, unpacked and verified: libraries, every
# program starts, 2 MPI ranks) -> PyTorch's GPU rows (bench/torch/harness.py --device cuda under
# the image's python3: one rank, then two ranks sharing the GPU) -> build, build_tests (only when
# no bundle travelled or it failed its probe: make on the device) -> smoke (gpt2-tiny on the GPU;
# it also decides whether CUDA sees the GPU that nvidia-smi lists) -> one rank: fixed overheads,
# `run --cupti` on gpt2 -> several ranks: the fake-host probe, validate --cupti on gpt2 over NCCL
# -> the GPU kernel tests -> ResNet-50 on one rank and its check against the CPU, then with
# SyncBatchNorm on the ranks -> the two-rank overheads, the GPU engine against the CPU, the NCCL
# sweep (not real on fake hosts), validate on gpt2-medium (the first to go).
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
# its own (WORK/fake_host.sh); they talk over loopback sockets and time-slice the GPU. Every
# time, bandwidth and NCCL-memory figure from that mode is NOT a real measurement: such steps
# say so in their note, and NVLS/MNNVL are off, the sweep stops at 64 MiB.
#
# Environment: BUILD (default build; the bundle's bin/ when it passes its probe), GPU_CHECK_BUDGET
# (seconds, default 420), GPU_CHECK_BUNDLE (default build/gpu-bundle: the folder, and BUNDLE.tar.xz
# unpacked into it), GPU_CHECK_PYTHON (the python3 with the image's torch, default python3),
# GPU_CHECK_WORK, JOBS (make -j, default nproc), MAKE (default make), GPU_CHECK_MAX_STEP (caps
# every step's timeout: the tests of this script), GPU_CHECK_DEV_GLOB (the GPU device nodes,
# default /dev/nvidia[0-9]*: a node without a usable CUDA device also fails the check), CUDA_HOME,
# GPU_CHECK_DRY=1 (a dry walk on a machine without a GPU: nvidia-smi and the GPU python are stubs,
# every step but the image probe is printed with its timeout instead of run; the summary gives
# the order, the timeouts and each step's worst-case start against the budget).
# Exit status: 0 when no step failed or timed out and the GPU (if any) was usable (a dry walk: 0);
# 1 otherwise; 2 on usage errors.
set -u

# ---- the image probe (also `bench/gpu_check.sh --image FILE PYTHON NEEDED`): facts first, as
# "key: value" lines that the summary repeats, then "## details" ----

# The python3 facts: versions of what the harness needs, whether torch sees CUDA, its site dirs.
PY_PROBE='
import importlib, platform, site, sys
print("python3:", sys.executable, platform.python_version())
for m in ("torch", "transformers", "peft", "accelerate", "deepspeed", "triton", "numpy"):
    try:
        print(m + ":", getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as e:
        print(m + ": absent (" + type(e).__name__ + ")")
try:
    import torch
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:
            nccl = "none"
        print("torch_cuda: yes (%d GPU(s): %s; CUDA %s, NCCL %s, cuDNN %s)" % (
            torch.cuda.device_count(), torch.cuda.get_device_name(0), torch.version.cuda, nccl,
            torch.backends.cudnn.version()))
    else:
        print("torch_cuda: no (torch %s: torch.cuda.is_available() is False; built for CUDA %s)"
              % (torch.__version__, torch.version.cuda))
except Exception as e:
    print("torch_cuda: no (" + type(e).__name__ + ": " + str(e)[:120] + ")")
print("python_site:", " ".join(site.getsitepackages()))
'

# Where the machine's CUDA libraries are, one line per soname: "soname<TAB>path<TAB>where"; the
# toolkit first, then the python3 wheels (nvidia/*/lib, nvidia/cu13/lib: NCCL lives only there
# on an image without the NCCL package), the driver's folder, then the loader's cache.
cuda_search() {  # cuda_search "SONAMES" "PYTHON SITE DIRS"
  local dirs=() where=() d so found w s
  for d in ${CUDA_HOME:-} /usr/local/cuda /usr/local/cuda-[0-9]*; do
    [ -d "$d" ] || continue
    for s in lib64 targets/x86_64-linux/lib extras/CUPTI/lib64; do dirs+=("$d/$s"); where+=("toolkit $d"); done
  done
  for s in $2; do
    for d in "$s"/nvidia/*/lib; do [ -d "$d" ] && { dirs+=("$d"); where+=("python3 wheel"); }; done
  done
  dirs+=(/usr/local/nvidia/lib64 /usr/local/nvidia/lib); where+=(driver driver)
  for so in $1; do
    found="" w=""
    for d in "${!dirs[@]}"; do
      if [ -e "${dirs[$d]}/$so" ]; then found=${dirs[$d]}/$so; w=${where[$d]}; break; fi
    done
    if [ -z "$found" ]; then
      found=$(ldconfig -p 2>/dev/null | awk -v s="$so" '$1 == s { print $NF; exit }')
      w="loader cache"
    fi
    printf '%s\t%s\t%s\n' "$so" "${found:-not found}" "${found:+$w}"
  done
}

image_probe() {  # image_probe PYTHON "CUDA SONAMES"
  local py=$1 needed=$2 smi_ok=0 nvcc pyout site search
  command -v nvidia-smi >/dev/null 2>&1 && smi_ok=1
  t() { timeout 20 "$@" 2>/dev/null; }
  echo "date: $(date -u '+%Y-%m-%dT%H:%M:%SZ'); host $(cat /proc/sys/kernel/hostname 2>/dev/null); commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "os: $(sed -n 's/^PRETTY_NAME="*\([^"]*\)"*/\1/p' /etc/os-release 2>/dev/null); kernel $(uname -sr); $(nproc) CPUs; $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>&1 | head -n 1)"
  if [ "$smi_ok" = 1 ]; then
    echo "gpu: $(t nvidia-smi -L | head -n 1)"
    echo "driver: $(t nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1) (CUDA $(t nvidia-smi | grep -o 'CUDA Version: *[0-9.]*' | head -n 1 | sed 's/CUDA Version: *//')); $(t nvidia-smi --query-gpu=name,memory.total,memory.used,compute_mode --format=csv,noheader | head -n 1)"
  else
    echo "gpu: nvidia-smi not found"
  fi
  nvcc=$(command -v nvcc || ls "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" 2>/dev/null)
  echo "nvcc: ${nvcc:-not found}${nvcc:+ $(t "$nvcc" --version | tail -n 1)}; CUDA_MODULE_LOADING ${CUDA_MODULE_LOADING:-unset}"
  pyout=$(timeout 40 "$py" -c "$PY_PROBE" 2>&1) || pyout="${pyout}
torch_cuda: no ($py failed: exit $?)"
  grep -E '^(python3|torch|transformers|peft|accelerate|deepspeed|torch_cuda):' <<<"$pyout"
  grep -q '^python3:' <<<"$pyout" || echo "python3: $py: $(head -n 1 <<<"$pyout")"
  echo "mpi: $(command -v mpirun >/dev/null && echo "$(command -v mpirun) ($(t mpirun --version | head -n 1))" || echo "no mpirun on PATH"); libmpi in the loader cache: $(ldconfig -p 2>/dev/null | grep -c 'libmpi\.so')"
  echo "blas: $(ldconfig -p 2>/dev/null | grep -oE 'lib(openblas|blas|mkl_rt|blis|flexiblas)[a-z0-9_]*\.so\.[0-9]+' | sort -u | tr '\n' ' ' | sed 's/ $//;s/^$/none in the loader cache/')"
  echo "device build: make $(command -v make >/dev/null && echo yes || echo no), mpicc $(command -v mpicc >/dev/null && echo yes || echo no), cjson.h $([ -f /usr/include/cjson/cJSON.h ] && echo yes || echo no), criterion $([ -d /usr/include/criterion ] && echo yes || echo no)"
  site=$(sed -n 's/^python_site: //p' <<<"$pyout")
  search=$(cuda_search "$needed libcuda.so.1" "$site")
  echo "cuda libs: $(awk -F'\t' '{ printf "%s%s => %s%s", (NR > 1 ? "; " : ""), $1, $2, ($3 != "" ? " (" $3 ")" : "") }' <<<"$search")"
  echo "cuda_lib_path: $(awk -F'\t' '$2 ~ /^\// { n = split($2, p, "/"); d = substr($2, 1, length($2) - length(p[n]) - 1); if (!(d in seen)) { seen[d]; printf "%s%s", (k++ ? ":" : ""), d } }' <<<"$search")"
  echo "## details"
  echo "$pyout"
  [ "$smi_ok" = 1 ] && t nvidia-smi
  [ -n "$nvcc" ] && t "$nvcc" --version
  echo "# loader cache, CUDA/NCCL/MPI/BLAS:"
  ldconfig -p 2>/dev/null | grep -E 'libcuda\.|libcudart|libcublas|libnccl|libcupti|libmpi\.|openblas|libblas' | head -n 40
}

if [ "${1:-}" = --image ]; then
  [ $# -eq 4 ] || { echo "usage: bench/gpu_check.sh --image FILE PYTHON \"CUDA SONAMES\"" >&2; exit 2; }
  image_probe "$3" "$4" > "$2.tmp" && mv "$2.tmp" "$2" && cat "$2"
  exit
fi

OUT=${1:-}
if [ -z "$OUT" ] || [ $# -ne 1 ]; then
  echo "usage: bench/gpu_check.sh OUTDIR" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
WORK=${GPU_CHECK_WORK:-$OUT/work}
mkdir -p "$WORK/logs" "$WORK/torch" || exit 2
WORK=$(cd "$WORK" && pwd)
BUILD=${BUILD:-build}
BUNDLE=${GPU_CHECK_BUNDLE:-build/gpu-bundle}
PY=${GPU_CHECK_PYTHON:-python3}
DRY=${GPU_CHECK_DRY:-0}
BUDGET=${GPU_CHECK_BUDGET:-420}
MAX_STEP=${GPU_CHECK_MAX_STEP:-0}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
MAKE=${MAKE:-make}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
START=$(date +%s)
DRY_CLOCK=0      # a dry walk's worst case: every step before used its whole timeout

# A dry walk: the device's nvidia-smi and python3 are stubs (one H200; a torch that sees it)
if [ "$DRY" = 1 ]; then
  mkdir -p "$WORK/dry-stubs"
  cat > "$WORK/dry-stubs/nvidia-smi" <<'SMI'
#!/bin/sh
# gpu_check.sh's dry stub: one H200 whose driver speaks CUDA 13.0
case "$*" in
  -L) echo 'GPU 0: NVIDIA H200 (UUID: GPU-dry-stub)' ;;
  *compute-apps*) ;;
  *driver_version*) echo '580.159.04 (dry stub)' ;;
  *compute_mode*) echo 'Default' ;;
  *name,memory*) echo 'NVIDIA H200, 143771 MiB (dry stub)' ;;
  *) echo '| NVIDIA-SMI (dry stub)   Driver Version: 580.159.04   CUDA Version: 13.0 |' ;;
esac
SMI
  cat > "$WORK/dry-stubs/python3" <<'PYSTUB'
#!/bin/sh
# gpu_check.sh's dry stub for the image's python3
echo "python3: dry stub (the device image's python3 would answer here)"
echo "torch: 2.11.0+cu130 (dry stub)"
echo "torch_cuda: yes (1 GPU(s): NVIDIA H200 (dry stub))"
echo "python_site: "
PYSTUB
  chmod +x "$WORK/dry-stubs/nvidia-smi" "$WORK/dry-stubs/python3"
  PATH="$WORK/dry-stubs:$PATH"
  PY="$WORK/dry-stubs/python3"
fi

S_NAME=() S_STATUS=() S_SECS=() S_NOTE=()
NO_GPU=""        # the reason when there is no GPU at all (nvidia-smi lists none, CUDA sees none)
UNUSABLE=""      # the reason when nvidia-smi lists a GPU that CUDA cannot use: fails the check
BUILD_OK=1
RANKS=1
FAKE_OK=0
MODE="one rank"
REAL=""          # note prefix for figures that are not real measurements
X=()             # the prefix of every engine command: the bundle's environment, or the CUDA path
ABS_BUILD=$WORK  # the programs' folder, once known: reap() ends GPU processes whose command names it

elapsed() { echo $(( $(date +%s) - START )); }

# ---- the machine (first, before anything can hang) ----
have_smi=0
command -v nvidia-smi >/dev/null 2>&1 && have_smi=1
smi() { [ "$have_smi" = 1 ] && timeout 20 nvidia-smi "$@" 2>/dev/null; }
NGPU_SMI=$(smi -L | grep -c '^GPU' || true)
[ -n "$NGPU_SMI" ] || NGPU_SMI=0
# device nodes say a GPU is there even when nvidia-smi is missing (GPU_CHECK_DEV_GLOB: tests)
# shellcheck disable=SC2086 # the glob is meant to expand
NGPU_DEV=$(find ${GPU_CHECK_DEV_GLOB:-/dev/nvidia[0-9]*} -maxdepth 0 2>/dev/null | wc -l)
DRIVER=$(smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
DRIVER_CUDA=$(smi | grep -o 'CUDA Version: *[0-9.]*' | head -n 1 | sed 's/CUDA Version: *//')
COMPUTE_MODE=$(smi --query-gpu=compute_mode --format=csv,noheader | head -n 1)
GPU_NAME=$(smi --query-gpu=name,memory.total --format=csv,noheader | head -n 1)
GPU_FACTS="nvidia-smi lists $NGPU_SMI GPU(s)${GPU_NAME:+ ($GPU_NAME)}, driver ${DRIVER:-unknown} (CUDA ${DRIVER_CUDA:-unknown}), compute mode ${COMPUTE_MODE:-unknown}"
[ "$have_smi" = 1 ] || GPU_FACTS="nvidia-smi: not found"
[ "$NGPU_SMI" -gt 0 ] || [ "$NGPU_DEV" -eq 0 ] || GPU_FACTS="$GPU_FACTS; but $NGPU_DEV GPU device node(s) /dev/nvidiaN exist"
# GPU processes already there (not ours): never ended
BASE_PIDS=" $(smi --query-compute-apps=pid --format=csv,noheader | tr '\n' ' ') "

# ---- the summary: rewritten after every step, headline first ----
headline() {
  local ran=0 ok=0 failed="" skipped=0 why_skip="" walked=0 i
  for i in "${!S_NAME[@]}"; do
    case ${S_STATUS[$i]} in
      ok) ran=$((ran + 1)); ok=$((ok + 1)) ;;
      dry) walked=$((walked + 1)) ;;
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
  if [ "$DRY" = 1 ]; then
    printf '# gpu_check DRY: walked %d step(s) in order, no device program ran (ran %d, %d ok); failed: %s; skipped %d%s; worst case %s s of %s (every step using its whole timeout); %s\n' \
      "$walked" "$ran" "$ok" "${failed:-none}" "$skipped" "${why_skip:+ (${why_skip//|/; })}" "$DRY_CLOCK" "$BUDGET" "$gpu"
    return
  fi
  printf '# gpu_check %s: ran %d step(s), %d ok; failed: %s; skipped %d%s; %s; %s s of %s\n' \
    "$verdict" "$ran" "$ok" "${failed:-none}" "$skipped" "${why_skip:+ (${why_skip//|/; })}" "$gpu" "$(elapsed)" "$BUDGET"
}

# Everything loose goes into OUTDIR/results.tar.gz; a file over 15 MiB would not come back from the
# device tool (16 MiB each), so the Chrome trace is left out first if it makes it so.
pack_results() {
  local tgz="$OUT/results.tar.gz"
  tar -C "$WORK" --exclude=./dry-stubs --exclude=./logs/.sid -czf "$tgz.tmp" . 2>/dev/null || return
  if [ "$(stat -c %s "$tgz.tmp")" -gt $((15 * 1048576)) ]; then
    tar -C "$WORK" --exclude=./dry-stubs --exclude=./logs/.sid --exclude='./trace_*' -czf "$tgz.tmp" . 2>/dev/null
    PACK_NOTE="# results.tar.gz: the Chrome trace left out (over 15 MiB with it); it is in $WORK"
  fi
  mv "$tgz.tmp" "$tgz"
}
PACK_NOTE=""

write_summary() {
  local final=${1:-0} i
  {
    headline
    [ "$final" = 1 ] || echo "# (in progress: rewritten after every step)"
    [ -f "$OUT/image.txt" ] && sed -n '/^## details/q;s/^/# image: /p' "$OUT/image.txt"
    [ -n "$PACK_NOTE" ] && echo "$PACK_NOTE"
    printf '%-22s %-8s %5s  %s\n' step status s note
    for i in "${!S_NAME[@]}"; do
      printf '%-22s %-8s %5s  %s\n' "${S_NAME[$i]}" "${S_STATUS[$i]}" "${S_SECS[$i]}" "${S_NOTE[$i]}"
    done
  } > "$OUT/summary.txt.tmp" && mv "$OUT/summary.txt.tmp" "$OUT/summary.txt"
  pack_results
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

note_last() {  # a step walked dry keeps its planning note: there is no result to describe
  [ "${S_STATUS[${#S_STATUS[@]}-1]}" = dry ] && return
  S_NOTE[${#S_NOTE[@]}-1]=$1
  write_summary
}

# Ends, by PID, what a step left behind: the processes of its session, and GPU processes that
# appeared while it ran. Prints how many.
reap() {  # reap SESSION_ID
  local sid=$1 n=0 pid f line
  # the session's processes from /proc (a minimal image may have no ps): the fields after the
  # command's ")" are state, ppid, pgrp, session
  for f in /proc/[0-9]*/stat; do
    read -r line 2>/dev/null < "$f" || continue
    read -r _ _ _ pid _ <<<"${line##*) }"
    [ "$pid" = "$sid" ] || continue
    pid=${f#/proc/}
    kill -KILL "${pid%/stat}" 2>/dev/null && n=$((n + 1))
  done
  # nvidia-smi's PIDs may be another PID namespace's: only a process of this checkout qualifies
  for pid in $(smi --query-compute-apps=pid --format=csv,noheader | grep -E '^[0-9]+$'); do
    case "$BASE_PIDS" in *" $pid "*) continue ;; esac
    [ "$pid" = "$$" ] && continue
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -e "$ABS_BUILD" -e "$WORK" -e "$OUT" -e "$ROOT/bench/torch" || continue
    kill -KILL "$pid" 2>/dev/null && n=$((n + 1))
  done
  echo "$n"
}

# step NAME TIMEOUT CMD... — CMD in its own session with its own timeout (cut to the budget
# left, and to GPU_CHECK_MAX_STEP), output to WORK/logs/NN_NAME.log; sets LAST_LOG.
# A dry walk prints the step instead of running it (the image probe still runs, on the stubs).
step() {
  local name=$1 limit=$2
  shift 2
  local n=${#S_NAME[@]}
  LAST_LOG=$(printf '%s/logs/%02d_%s.log' "$WORK" "$n" "$name")
  if [ "$DRY" = 1 ] && [ "$name" != image ]; then
    local start=$DRY_CLOCK late=""
    DRY_CLOCK=$((DRY_CLOCK + limit))
    [ $((start + 15)) -gt "$BUDGET" ] && late="; past the budget in the worst case: cut unless the steps before end early"
    echo "# [$n] $name (dry; timeout ${limit} s, worst-case start ${start} s): $*" | cut -c1-240
    { echo "# dry: $*"; echo "# timeout ${limit} s, worst-case start ${start} s of ${BUDGET}"; } > "$LAST_LOG"
    record "$name" dry "$limit" "worst-case start ${start} s$late"
    return 0
  fi
  [ "$DRY" = 1 ] && DRY_CLOCK=$((DRY_CLOCK + limit))   # the probe, run for real in a dry walk
  local left=$(( BUDGET - $(elapsed) - 10 ))
  if [ "$left" -lt 15 ]; then
    skip "$name" "out of time (budget ${BUDGET} s)"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  # (the image probe bounds each of its own commands, and everything after it reads its facts)
  [ "$MAX_STEP" -gt 0 ] && [ "$limit" -gt "$MAX_STEP" ] && [ "$name" != image ] && limit=$MAX_STEP
  echo "# [$n] $name (timeout ${limit} s): $*" | cut -c1-220
  local t0 rc status note left_over
  t0=$(date +%s)
  { echo "# $*"; echo "# started $(date -u '+%Y-%m-%dT%H:%M:%SZ'), timeout ${limit} s"; } > "$LAST_LOG"
  # the session leader writes its pid (= the session id) before it becomes the command
  local sidfile="$WORK/logs/.sid" sid
  rm -f "$sidfile"
  # shellcheck disable=SC2016 # $$ and $0 are the inner shell's
  setsid -w sh -c 'echo $$ > "$0"; exec "$@"' "$sidfile" timeout --kill-after=5 "$limit" "$@" >> "$LAST_LOG" 2>&1 < /dev/null
  rc=$?
  sid=$(cat "$sidfile" 2>/dev/null)
  left_over=0
  [ -n "$sid" ] && left_over=$(reap "$sid")
  case $rc in
    0) status=ok; note="" ;;
    124|137) status=timeout; note="killed after ${limit} s" ;;
    *) status=FAIL
       note="exit $rc: $(grep -m1 -E 'FAIL|rror|memplan:|cnn_device:|bench_nccl:|harness:|timed out|did not complete' "$LAST_LOG" | cut -c1-110)" ;;
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

gpu_step() {  # gpu_step NAME TIMEOUT CMD... — an engine command (through X: the bundle or the CUDA path)
  local why name=$1 limit=$2
  shift 2
  why=$(gpu_ready)
  if [ -n "$why" ]; then skip "$name" "$why"; return 1; fi
  step "$name" "$limit" "${X[@]}" "$@"
}

test_step() {  # test_step NAME TIMEOUT BINARY ARGS... — a Criterion test binary, verbose
  local name=$1 limit=$2 bin=$3
  shift 3
  if [ -z "$(gpu_ready)" ] && [ ! -x "$bin" ] && [ "$DRY" != 1 ]; then
    skip "$name" "not built (build_tests failed: see its log)"
    return 1
  fi
  gpu_step "$name" "$limit" "$bin" --verbose "$@"
}

echo "# gpu_check: output in $OUT (loose files in $WORK); budget ${BUDGET} s; $GPU_FACTS"
write_summary

# ---- 1. the image: what this machine has, before anything is planned on it ----
NEEDED="libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcupti.so.13"
if [ -f "$BUNDLE/MANIFEST" ] || [ -f "$BUNDLE.tar.xz" ]; then
  # the bundle names what it needs (read from the archive when not unpacked yet)
  n=$( { cat "$BUNDLE/MANIFEST" 2>/dev/null || tar -xJOf "$BUNDLE.tar.xz" "$(basename "$BUNDLE")/MANIFEST" 2>/dev/null; } \
       | sed -n 's/^cuda_needed: //p')
  [ -n "$n" ] && NEEDED=$n
fi
step image 45 bash "$ROOT/bench/gpu_check.sh" --image "$OUT/image.txt" "$PY" "$NEEDED"
fact() { sed -n "/^## details/q;s/^$1: //p" "$OUT/image.txt" 2>/dev/null | head -n 1; }
CUDA_LIB_PATH=$(fact cuda_lib_path)
export MEMPLAN_CUDA_LIB_PATH=$CUDA_LIB_PATH   # bundle-env puts these after the bundle's libraries
TORCH_V=$(fact torch)
note_last "$(fact os | cut -d';' -f1); $(fact glibc); python3's torch ${TORCH_V:-unknown}; CUDA libraries from ${CUDA_LIB_PATH:-nowhere}"

# ---- 2. the bundle: the programs built on the development machine, with their libraries ----
BUNDLE_WHY=""
if [ -f "$BUNDLE.tar.xz" ] && { [ ! -f "$BUNDLE/MANIFEST" ] || [ "$BUNDLE.tar.xz" -nt "$BUNDLE/MANIFEST" ]; } && [ "$DRY" != 1 ]; then
  # unpacked here (xz, or python3's lzma where the image has no xz), replacing an older copy
  rm -rf "$BUNDLE"
  if ! { command -v xz >/dev/null && timeout 60 tar -C "$(dirname "$BUNDLE")" -xJf "$BUNDLE.tar.xz"; } &&
     ! timeout 60 "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
         "$BUNDLE.tar.xz" "$(dirname "$BUNDLE")" 2>/dev/null; then
    BUNDLE_WHY="cannot unpack $BUNDLE.tar.xz"
  fi
fi
if [ -n "$BUNDLE_WHY" ]; then
  record bundle FAIL 0 "$BUNDLE_WHY; building here instead"
elif [ ! -f "$BUNDLE/MANIFEST" ] && { [ "$DRY" != 1 ] || [ ! -f "$BUNDLE.tar.xz" ]; }; then
  BUNDLE_WHY="no bundle travelled ($BUNDLE.tar.xz: make gpu-bundle, and carry it)"
  skip bundle "$BUNDLE_WHY; building here instead"
elif step bundle 45 "$ROOT/scripts/gpu_bundle.sh" verify "$BUNDLE" --mpi; then
  BUILD=$BUNDLE/bin
  X=("$ROOT/$BUNDLE/bundle-env")
  [[ $BUNDLE == /* ]] && X=("$BUNDLE/bundle-env")
  note_last "built at $(sed -n 's/^commit: //p' "$BUNDLE/MANIFEST" 2>/dev/null | cut -c1-12) (tree at $(git rev-parse --short=12 HEAD 2>/dev/null)); every library resolves, every program starts, 2 MPI ranks ran"
else
  BUNDLE_WHY="the bundle failed its probe: $(grep -m1 -E 'FAIL' "$LAST_LOG" | cut -c1-100)"
  note_last "$BUNDLE_WHY; building here instead"
fi
M="$BUILD/memplan"
T="$BUILD/tests"
mkdir -p "$BUILD" && ABS_BUILD=$(cd "$BUILD" && pwd)

# ---- 3. PyTorch's GPU rows: what PyTorch itself allocates and reserves on this GPU, under the
# image's own python3 (docs/gpu.md "PyTorch's GPU rows"). Two ranks share the one GPU: ddp over
# gloo on CUDA tensors (NCCL refuses a shared GPU), fsdp-full over NCCL as fake hosts (FSDP2's
# all-gather and reduce-scatter on CUDA tensors need NCCL). The rows mirror saved CPU rows
# (bench/torch/results/<name>.json) and add gpt2 at batch 8 x 1024, where the allocator matters.
# Each also records the caching allocator's own history (--alloc-trace: every allocation, free
# and stream) and its segments at the end, which torch_reserved (after the build) compares with
# memplan's allocator model and plan.
# Together they get at most GPU_CHECK_TORCH_SHARE seconds (200), so that hangs here cannot starve
# the engine's one-rank steps after them.
#   step | result name (the CPU rows' naming, + _cuda) | ranks | backend | timeout s | setup
TORCH_ROWS=(
  "torch_mini_ddp_1r|gpt2-mini_ddp_fp32_none_eager_r1_b1_s128|1|auto|40|--model gpt2-mini --strategy ddp --batch 1 --seq 128"
  "torch_gpt2_b8_1r|gpt2_ddp_fp32_none_eager_r1_b8_s1024|1|auto|60|--model gpt2 --strategy ddp --batch 8 --seq 1024"
  "torch_mini_ddp_2r|gpt2-mini_ddp_fp32_none_eager_r2_b1_s128|2|gloo|50|--model gpt2-mini --strategy ddp --batch 1 --seq 128"
  "torch_mini_fsdp_2r|gpt2-mini_fsdp-full_fp32_none_eager_r2_b1_s128|2|nccl|50|--model gpt2-mini --strategy fsdp-full --batch 1 --seq 128"
  "torch_gpt2_fsdp_2r|gpt2_fsdp-full_fp32_none_eager_r2_b1_s1024|2|nccl|60|--model gpt2 --strategy fsdp-full --batch 1 --seq 1024"
)
TORCH_SHARE=${GPU_CHECK_TORCH_SHARE:-200}
TORCH_WHY=""
case "$(fact torch_cuda)" in
  yes*) ;;
  "") TORCH_WHY="the image probe says nothing of python3's torch (see image.txt)" ;;
  *) TORCH_WHY="python3's torch cannot use a GPU: $(fact torch_cuda | sed 's/^no (//;s/)$//' | cut -c1-100)" ;;
esac
HARNESS="$ROOT/bench/torch/harness.py"
torch_t0=$(elapsed) torch_dry0=$DRY_CLOCK
for row in "${TORCH_ROWS[@]}"; do
  IFS='|' read -r tname result ranks backend limit setup <<<"$row"
  if [ -n "$TORCH_WHY" ]; then skip "$tname" "$TORCH_WHY"; continue; fi
  if [ "$DRY" = 1 ]; then share=$((TORCH_SHARE - (DRY_CLOCK - torch_dry0))); else share=$((TORCH_SHARE - ($(elapsed) - torch_t0))); fi
  if [ "$share" -lt 15 ] && [ "$DRY" = 1 ]; then
    record "$tname" dry 0 "worst-case start $DRY_CLOCK s; cut in the worst case: the PyTorch rows' share (${TORCH_SHARE} s) is spent"
    continue
  elif [ "$share" -lt 15 ]; then
    skip "$tname" "out of the PyTorch rows' share (${TORCH_SHARE} s)"
    continue
  fi
  [ "$limit" -gt "$share" ] && limit=$share
  launch=("$PY" "$HARNESS")
  [ "$ranks" -gt 1 ] && launch=("$PY" -m torch.distributed.run --standalone --nproc-per-node "$ranks" "$HARNESS")
  # shellcheck disable=SC2086 # the setup is one flag per word
  if step "$tname" "$limit" env PYTHONUNBUFFERED=1 "${launch[@]}" --device cuda --backend "$backend" $setup \
       --json "$WORK/torch/${result}_cuda.json" --alloc-trace "$WORK/torch/${result}_cuda.trace.txt"; then
    note_last "$(grep -m1 '^# cuda' "$LAST_LOG" | cut -c3-200)"
  fi
done

# ---- 4. the build, only without a bundle that passed its probe: the programs gate everything;
# the tests are built apart (-k) ----
if [ -z "$BUNDLE_WHY" ]; then
  skip build "the bundle travelled and passed its probe"
  skip build_tests "the bundle travelled and passed its probe"
else
  [ -n "$CUDA_LIB_PATH" ] && X=(env "LD_LIBRARY_PATH=$CUDA_LIB_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  if ! step build 120 "$MAKE" -j"$JOBS" NO_DEPS=1 REQUIRE_CUDA=1 REQUIRE_NCCL=1 REQUIRE_CUPTI=1 BUILD="$BUILD" all bench; then
    BUILD_OK=0
    note_last "${S_NOTE[${#S_NOTE[@]}-1]}; every GPU step is skipped"
  fi
  if [ "$BUILD_OK" = 1 ]; then
    if ! step build_tests 90 "$MAKE" -k -j"$JOBS" NO_DEPS=1 REQUIRE_CUDA=1 REQUIRE_NCCL=1 REQUIRE_CUPTI=1 BUILD="$BUILD" test-bin; then
      note_last "${S_NOTE[${#S_NOTE[@]}-1]}; the tests that built still run"
    fi
  fi
fi

# ---- 4b. PyTorch's GPU rows against the allocator model: each row's max_memory_reserved, the
# replay of its own recorded allocations and memplan's plan of the setup (CPU work, one call;
# bench/torch/gpu_alloc_check.py) ----
set -- "$WORK"/torch/*_cuda.json
if [ "$DRY" != 1 ] && [ ! -e "$1" ]; then
  skip torch_reserved "no GPU row finished (see the torch_* steps)"
elif [ "$DRY" != 1 ] && [ ! -x "$M" ]; then
  skip torch_reserved "no memplan to plan with (see build)"
elif step torch_reserved 30 "$PY" "$ROOT/bench/torch/gpu_alloc_check.py" --memplan "$M" "$@"; then
  note_last "$(grep -c '^| [a-z]' "$LAST_LOG") rows: $(awk -F'|' '/^\| [a-z]/{printf "%s %s/%s%%; ", $2, $5, $7}' "$LAST_LOG" | cut -c1-150)"
fi

# ---- 5. smoke: does CUDA see the GPU nvidia-smi lists? ----
if [ "$BUILD_OK" = 1 ]; then
  if step smoke 45 "${X[@]}" "$M" run --model gpt2-tiny --device cuda --steps 2 --batch 1 --seq 16; then
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

# ---- 6. one rank: what the planner still takes from public estimates, first ----
if gpu_step overheads_1rank 45 "$BUILD/bench/gpu_overheads" --json "$WORK/overheads_1rank.json"; then
  note_last "$(awk '/^-/{h=1;next} h&&NF{print "MiB: context " $3 ", cublas " $4 ", nccl(1 rank) " $7; exit}' "$LAST_LOG")"
fi
if gpu_step run_gpt2_cupti 90 "$M" run --model gpt2 --batch 1 --seq 256 --steps 2 --device cuda --cupti --gpu h200 \
     --timeout 60 --strategy ddp --json="$WORK/run_gpt2_1rank.json"; then
  note_last "1 rank (validate needs 2): $(grep -m1 '^# CUPTI memory' "$LAST_LOG" | cut -c1-90)"
fi

# ---- 7. several ranks: the fake-host probe, then validate over NCCL ----
cat > "$WORK/fake_host.sh" <<'WRAPPER'
#!/bin/sh
# one fake host per MPI rank: NCCL then lets ranks share a GPU (over sockets)
NCCL_HOSTID="memplan-fake-host-${OMPI_COMM_WORLD_RANK:-0}"
export NCCL_HOSTID
exec "$@"
WRAPPER
chmod +x "$WORK/fake_host.sh"
FAKE=(mpirun -np 2 --oversubscribe -x NCCL_SOCKET_IFNAME=lo -x NCCL_IB_DISABLE=1 -x NCCL_NVLS_ENABLE=0
      -x NCCL_MNNVL_ENABLE=0 "$WORK/fake_host.sh")
MPIR=("${MPI1[@]}")
if [ -z "$(gpu_ready)" ] && [ "$NGPU" -ge 2 ]; then
  RANKS=2; MPIR=(mpirun -np 2 --oversubscribe); MODE="one rank per GPU"
  skip fake_hosts_probe "not needed: $NGPU GPUs"
elif [ ! -x "$T/mpi/comm_check" ] && [ -z "$(gpu_ready)" ] && [ "$DRY" != 1 ]; then
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
} > "$WORK/fake_hosts.txt"
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
       --device cuda --cupti --gpu h200 --timeout 60 --strategy all --json="$WORK/validate_$model.json" "$@"; then
    note_last "$REAL$(grep -m1 '^# validate:' "$LAST_LOG")"
  elif [ -f "$WORK/validate_$model.json" ]; then
    note_last "${S_NOTE[${#S_NOTE[@]}-1]}; the strategies that finished are in validate_$model.json"
  fi
}
validate gpt2 120 --trace "$WORK/trace_gpt2.json"   # the trace holds the last strategy run (zero3)

# ---- 8. the GPU kernel tests (verbose: skips are visible and counted) ----
test_step test_kern_cuda 60 "$T/test_kern_cuda" --jobs 4
test_step test_kern_cnn_cuda 60 "$T/test_kern_cnn_cuda" --jobs 4
test_step test_prof_cupti 45 "$T/test_prof_cupti" --jobs 1
test_step test_prof_overhead 45 "$T/test_prof_overhead" --jobs 1
test_step test_exec_device 30 "$T/test_exec_device" --jobs 1
test_step test_exec_comm_nccl 60 "$T/test_exec_comm" --jobs 1 --filter 'comm/nccl*'

# ---- 9. ResNet-50 on the GPU, then with SyncBatchNorm on the ranks ----
if gpu_step cnn_1rank 100 "$BUILD/bench/cnn_device" --device cuda --model resnet50 --batches 8,32 --steps 3 \
     --timeout 60 --json "$WORK/cnn_1rank.json"; then
  note_last "ResNet-50 224x224: $(awk '$1 ~ /^[0-9]+$/ {printf "%sB %s ms ", $1, $2}' "$LAST_LOG")"
fi
if gpu_step cnn_check_1rank 60 "$BUILD/bench/cnn_device" --device cuda --model resnet-mini --image 64 --batches 4 \
     --steps 2 --check --timeout 60; then
  note_last "$(grep -m1 -o 'ok: worst unit.*' "$LAST_LOG" | cut -c1-90)"
fi
if multi cnn_2ranks 120 "${MPIR[@]}" "$BUILD/bench/cnn_device" --device cuda --model resnet50 --batches 8,32 --steps 3 \
     --timeout 60 --json "$WORK/cnn_2ranks.json"; then
  note_last "${REAL}ResNet-50 + SyncBN, 2 ranks: $(awk '$1 ~ /^[0-9]+$/ {printf "%sB %s ms (syncbn %s) ", $1, $2, $5}' "$LAST_LOG")"
fi
if multi cnn_check_2ranks 60 "${MPIR[@]}" "$BUILD/bench/cnn_device" --device cuda --model resnet-mini --image 64 \
     --batches 4 --steps 2 --check --timeout 60; then
  note_last "$(grep -m1 -o 'ok: worst unit.*' "$LAST_LOG" | cut -c1-90)"
fi

# ---- 10. what is left: figures fake hosts cannot make real, the engine against the CPU, the
# bigger model ----
if multi overheads_2ranks 60 "${MPIR[@]}" "$BUILD/bench/gpu_overheads" --json "$WORK/overheads_2ranks.json"; then
  note_last "$REAL$(awk '/^-/{h=1;next} h&&NF{print "MiB: context " $3 ", cublas " $4 ", nccl " $7 " (sharing " $11 ")"; exit}' "$LAST_LOG")"
fi
if [ -z "$(gpu_ready)" ] && [ ! -x "$T/test_exec_gpu" ] && [ "$DRY" != 1 ]; then
  skip test_exec_gpu "not built (build_tests failed: see its log)"
else
  gpu_step test_exec_gpu 180 env MEMPLAN_FAKE_HOSTS="$FAKE_OK" "$T/test_exec_gpu" --verbose --jobs 2
fi
MAXB=1GiB
[ "$FAKE_OK" = 1 ] && MAXB=64MiB   # sockets on loopback: larger sizes only cost time
if gpu_step nccl_sweep 90 "${MPIR[@]}" "$BUILD/bench/bench_nccl" --iters 10 --target 0.02 --max-bytes "$MAXB" \
     --json "$WORK/nccl.json"; then
  note_last "$REAL$(grep -m1 '^# peak busbw' "$LAST_LOG" | cut -c3-100)"
fi
validate gpt2-medium 120   # the bigger model last: the first to go when time runs short

# ---- the summary ----
write_summary 1
echo
cat "$OUT/summary.txt"
[ "$DRY" = 1 ] && exit 0
case "$(head -n 1 "$OUT/summary.txt")" in "# gpu_check PASS"*) exit 0 ;; *) exit 1 ;; esac
