#!/usr/bin/env bash
# bench_peer.sh — memplan's CPU engine against its peer, in one run:
#   1. step time of `memplan run --strategy ddp` vs PyTorch DDP (Debian's python3-torch, gloo
#      backend, bench/peer_ddp.py) on the same GPT-2 shape, micro-batch, sequence and ranks,
#      both one thread per rank, mean step time over steps 2..K; the ratio is printed;
#   2. the engine's all-reduce bus bandwidth against memcpy bandwidth (build/bench/bench_allreduce).
# A benchmark, not a test: it installs python3-torch (about 1 GB) with apt-get when missing.
# Usage: bench/bench_peer.sh [MODEL] [RANKS] [BATCH] [SEQ] [STEPS]
#        (defaults: gpt2-mini 2 4 128 6); BUILD=folder (default build), OUT=folder for the JSON,
#        PY=interpreter (default /usr/bin/python3: Debian's python3-torch lives there, not in a
#        pyenv/venv python3 that may come first on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-gpt2-mini}; RANKS=${2:-2}; BATCH=${3:-4}; SEQ=${4:-128}; STEPS=${5:-6}
BUILD=${BUILD:-build}
PY=${PY:-/usr/bin/python3}
CORES=$(nproc --all)
OUT=${OUT:-$(mktemp -d /tmp/memplan-bench-peer-XXXXXX)}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1   # one thread per rank on both sides

if ! "$PY" -c 'import torch' 2>/dev/null; then
    echo "# python3-torch not found: installing it with apt-get (about 1 GB)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch >/dev/null
fi
make -s NO_DEPS=1 BUILD="$BUILD" "$BUILD/memplan" "$BUILD/memplan-exec" "$BUILD/bench/bench_allreduce" >/dev/null

echo "# $MODEL, $RANKS ranks, micro-batch $BATCH x seq $SEQ, $STEPS steps (mean of steps 2..$STEPS), fp32, 1 thread per rank, $CORES cores"
mpirun -np "$RANKS" --oversubscribe "$BUILD/memplan" run --model "$MODEL" --strategy ddp --batch "$BATCH" \
    --seq "$SEQ" --steps "$STEPS" --json="$OUT/engine.json" > "$OUT/engine.txt"
"$PY" bench/peer_ddp.py --model "$MODEL" --ranks "$RANKS" --batch "$BATCH" --seq "$SEQ" --steps "$STEPS" \
    --json "$OUT/torch.json" > /dev/null
"$PY" - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
e = json.load(open(out + "/engine.json"))
t = json.load(open(out + "/torch.json"))
print("%-22s %12s %14s %12s" % ("implementation", "step", "throughput", "params"))
print("%-22s %12s %14s %12s" % ("-", "ms", "tokens/s", "count"))
print("%-22s %12.2f %14.0f %12d" % ("memplan engine (MPI)", e["steady_ms_per_step"], e["tokens_per_s"], e["params"]))
print("%-22s %12.2f %14.0f %12d" % ("pytorch %s ddp gloo" % t["torch"].split("+")[0], t["steady_ms_per_step"], t["tokens_per_s"], t["params"]))
print("# ratio engine / pytorch step time: %.2f (below 1: the engine is faster)" % (e["steady_ms_per_step"] / t["steady_ms_per_step"]))
json.dump({"engine": e, "pytorch": t, "ratio_engine_over_pytorch": e["steady_ms_per_step"] / t["steady_ms_per_step"]},
          open(out + "/peer.json", "w"))
EOF
mpirun -np "$RANKS" --oversubscribe "$BUILD/bench/bench_allreduce" --json "$OUT/allreduce.json"
echo "# JSON: $OUT/peer.json, $OUT/allreduce.json"
