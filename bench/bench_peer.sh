#!/usr/bin/env bash
# bench_peer.sh — memplan's CPU engine against its peer, in one run:
#   1. step time of `memplan run --strategy ddp` vs PyTorch DDP (gloo backend, bench/peer_ddp.py,
#      transformers' GPT2LMHeadModel when transformers imports) on the same GPT-2 shape,
#      micro-batch, sequence and ranks, both one thread per rank; each side's step time is the
#      mean of steps 2..K of one run, and the two sides run interleaved, engine then PyTorch,
#      PAIRS times (A/B/A/B: a machine shared with other work slows both alike); the medians and
#      their ratio are printed, with every run's figure;
#   2. the engine's collectives against blocking MPI (build/bench/bench_allreduce).
# PyTorch: the venv of the PyTorch ground-truth work, ${MEMPLAN_TORCH_ENV:-$HOME/.cache/memplan/torch-venv}
# (its bin/python), else Debian's /usr/bin/python3 when it has torch (python3-torch 1.13); PY=
# overrides both. The output names the one used. Nothing is installed.
# Usage: bench/bench_peer.sh [MODEL] [RANKS] [BATCH] [SEQ] [STEPS] [PAIRS]
#        (defaults: gpt2-mini 2 4 128 6 3); BUILD=folder (default build), OUT=folder for the JSON,
#        NO_ALLREDUCE=1 skips part 2.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-gpt2-mini}; RANKS=${2:-2}; BATCH=${3:-4}; SEQ=${4:-128}; STEPS=${5:-6}; PAIRS=${6:-3}
BUILD=${BUILD:-build}
CORES=$(nproc --all)
OUT=${OUT:-$(mktemp -d /tmp/memplan-bench-peer-XXXXXX)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1   # one thread per rank on both sides

VENV=${MEMPLAN_TORCH_ENV:-$HOME/.cache/memplan/torch-venv}
if [ -z "${PY:-}" ]; then
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import torch' 2>/dev/null; then
        PY=$VENV/bin/python
    elif /usr/bin/python3 -c 'import torch' 2>/dev/null; then
        PY=/usr/bin/python3
    else
        echo "bench_peer.sh: no PyTorch found: neither $VENV/bin/python (MEMPLAN_TORCH_ENV) nor /usr/bin/python3 imports torch" >&2
        exit 2
    fi
fi
"$PY" -c 'import torch' 2>/dev/null || { echo "bench_peer.sh: PY=$PY does not import torch" >&2; exit 2; }
make -s NO_DEPS=1 BUILD="$BUILD" "$BUILD/memplan" "$BUILD/memplan-exec" "$BUILD/bench/bench_allreduce" >/dev/null

echo "# $MODEL, $RANKS ranks, micro-batch $BATCH x seq $SEQ, $STEPS steps (mean of steps 2..$STEPS), fp32, 1 thread per rank, $CORES cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "# peer: $PY (torch $("$PY" -c 'import torch; print(torch.__version__)'))"
for i in $(seq 1 "$PAIRS"); do
    mpirun -np "$RANKS" --oversubscribe "$BUILD/memplan" run --model "$MODEL" --strategy ddp --batch "$BATCH" \
        --seq "$SEQ" --steps "$STEPS" --json="$OUT/engine.$i.json" > "$OUT/engine.$i.txt"
    "$PY" bench/peer_ddp.py --model "$MODEL" --ranks "$RANKS" --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" \
        --json "$OUT/torch.$i.json" > /dev/null
done
python3 - "$OUT" "$PAIRS" <<'EOF'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
e = [json.load(open("%s/engine.%d.json" % (out, i))) for i in range(1, pairs + 1)]
t = [json.load(open("%s/torch.%d.json" % (out, i))) for i in range(1, pairs + 1)]
print("# pytorch model code: %s" % t[0].get("model_code", "handwritten GPT-2 (bench/peer_ddp.py)"))
print("%-28s %12s %14s %12s %12s   %s" % ("implementation", "step", "throughput", "cpu/step", "params", "runs (step ms, in order)"))
print("%-28s %12s %14s %12s %12s   %s" % ("-", "ms, median", "tokens/s", "ms, median", "count", "-"))
em = statistics.median(x["steady_ms_per_step"] for x in e)
tm = statistics.median(x["steady_ms_per_step"] for x in t)
ec = statistics.median(x.get("steady_cpu_ms_per_step", 0) for x in e)
tc = statistics.median(x.get("steady_cpu_ms_per_step", 0) for x in t)
tok = e[0]["micro_batch"] * e[0]["seq"] * e[0]["grad_accum"] * e[0]["ranks"]
print("%-28s %12.2f %14.0f %12.2f %12d   %s" % ("memplan engine (MPI)", em, tok / em * 1e3, ec, e[0]["params"],
                                              " ".join("%.1f" % x["steady_ms_per_step"] for x in e)))
print("%-28s %12.2f %14.0f %12.2f %12d   %s" % ("pytorch %s ddp gloo" % t[0]["torch"].split("+")[0], tm, tok / tm * 1e3, tc,
                                              t[0]["params"], " ".join("%.1f" % x["steady_ms_per_step"] for x in t)))
print("# ratio engine / pytorch, medians of %d interleaved runs each: step time %.2f, CPU time per step %.2f "
      "(below 1: the engine is faster; CPU time is rank 0's process, all threads, and does not depend on what "
      "else runs on the machine)" % (pairs, em / tm, ec / tc if tc > 0 else float("nan")))
json.dump({"engine": e, "pytorch": t, "engine_median_ms": em, "pytorch_median_ms": tm,
           "engine_median_cpu_ms": ec, "pytorch_median_cpu_ms": tc, "ratio_engine_over_pytorch": em / tm,
           "cpu_ratio_engine_over_pytorch": ec / tc if tc > 0 else None}, open(out + "/peer.json", "w"))
EOF
if [ "${NO_ALLREDUCE:-0}" != 1 ]; then
    mpirun -np "$RANKS" --oversubscribe "$BUILD/bench/bench_allreduce" --json "$OUT/allreduce.json"
fi
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg); JSON: $OUT/peer.json${NO_ALLREDUCE:+}, $OUT/allreduce.json"
