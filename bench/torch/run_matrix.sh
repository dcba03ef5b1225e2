#!/usr/bin/env bash
# Run the harness over a matrix of setups and save one JSON per setup under bench/torch/results/
# (existing files are kept; delete one to rerun it).  Usage:
#   bench/torch/run_matrix.sh [-r RANKS] [-m "MODELS"] [-s "STRATEGIES"] [-p PRECISION]
#                             [-c none|full] [-a eager|sdpa] [-b BATCH] [-q SEQ] [-f]
# -f reruns setups whose JSON exists (the old file stays until the new one is written).
# Model names with a slash are config.json paths (the file name without .json names the row).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ranks=2 models="gpt2-mini gpt2-tiny" prec=fp32 ckpt=none attn=eager batch=1 seq="" force=0
strategies="ddp torch-zero1 fsdp-full fsdp-grad-op fsdp-hybrid zero1 zero2 zero3"
while getopts "r:m:s:p:c:a:b:q:f" o; do
    case $o in
    r) ranks=$OPTARG ;; m) models=$OPTARG ;; s) strategies=$OPTARG ;; p) prec=$OPTARG ;;
    c) ckpt=$OPTARG ;; a) attn=$OPTARG ;; b) batch=$OPTARG ;; q) seq=$OPTARG ;; f) force=1 ;;
    *) echo "run_matrix.sh: bad option (see the header of $0)" >&2; exit 2 ;;
    esac
done
py=$("$root/scripts/torch_env.sh" --print) || exit 1
torchrun="$(dirname "$py")/torchrun"
out="$here/results"
mkdir -p "$out"
fails=0
for m in $models; do
    name=$(basename "$m" .json)
    for s in $strategies; do
        if [ "$prec" = mixed-bf16 ] && { [ "$s" = ddp ] || [ "$s" = torch-zero1 ]; }; then
            continue
        fi
        sq=$seq
        if [ -z "$sq" ]; then
            ctx=$(mktemp)
            "$py" "$here/harness.py" --model "$m" --params-only --json "$ctx" >/dev/null 2>&1 ||
                { echo "FAIL $m: cannot build it" >&2; fails=$((fails + 1)); rm -f "$ctx"; continue; }
            sq=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"]["context"])' \
                 "$ctx")
            rm -f "$ctx"
        fi
        f="$out/${name}_${s}_${prec}_${ckpt}_${attn}_r${ranks}_b${batch}_s${sq}.json"
        [ $force = 0 ] && [ -s "$f" ] && continue
        t0=$(date +%s)
        if nice -n 5 "$torchrun" --standalone --nproc-per-node "$ranks" "$here/harness.py" \
            --model "$m" --strategy "$s" --precision "$prec" --act-ckpt "$ckpt" --attn "$attn" \
            --batch "$batch" --seq "$sq" --json "$f.part" >"$f.log" 2>&1; then
            mv "$f.part" "$f"
            rm -f "$f.log"
            echo "ok   $(basename "$f") ($(( $(date +%s) - t0 )) s)"
        else
            echo "FAIL $(basename "$f") ($(( $(date +%s) - t0 )) s): $(grep -m1 'harness:' "$f.log")"
            rm -f "$f.part"
            fails=$((fails + 1))
        fi
    done
done
exit $((fails > 0))
