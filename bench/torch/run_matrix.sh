#!/usr/bin/env bash
# Run the harness over a matrix of setups and save one JSON per setup under bench/torch/results/
# (existing files are kept; delete one to rerun it).  Usage:
#   bench/torch/run_matrix.sh [-r RANKS] [-m "MODELS"] [-s "STRATEGIES"] [-p PRECISION]
#                             [-c none|full|every:N|op|selective] [-a eager|sdpa] [-b BATCH] [-q SEQ]
#                             [-e "EXTRA HARNESS FLAGS"] [-n NAME_SUFFIX] [-l LOCKFILE] [-f]
#                             [-t DIR]
# -f reruns setups whose JSON exists (the old file stays until the new one is written).
# -e passes more flags to every harness run and -n names those rows: e.g.
#   -e "--grad-accum 2 --fsdp-grad-sync last" -n _accum2_last
#   writes gpt2-tiny_fsdp-full_fp32_none_eager_r2_b1_s64_accum2_last.json (the suffix goes after
#   the setup; a row with extra flags and no -n would overwrite the plain row, so -e needs -n).
# -l runs each row under `flock LOCKFILE` (one row per lock hold), for machines whose CPUs are
#   shared (e.g. -l /tmp/memplan-cpu.lock).
# -t DIR also writes each row's allocation sequence (harness --alloc-trace) as DIR/<row>.txt, for
#   `memplan alloc DIR/*.txt`; the rows' JSON then go to DIR too, leaving results/ as it is.
# Model names with a slash are config.json paths (the file name without .json names the row).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ranks=2 models="gpt2-mini gpt2-tiny" prec=fp32 ckpt=none attn=eager batch=1 seq="" force=0
extra="" suffix="" lock="" tdir=""
strategies="ddp torch-zero1 fsdp-full fsdp-grad-op fsdp-hybrid zero1 zero2 zero3"
while getopts "r:m:s:p:c:a:b:q:e:n:l:t:f" o; do
    case $o in
    r) ranks=$OPTARG ;; m) models=$OPTARG ;; s) strategies=$OPTARG ;; p) prec=$OPTARG ;;
    c) ckpt=$OPTARG ;; a) attn=$OPTARG ;; b) batch=$OPTARG ;; q) seq=$OPTARG ;; f) force=1 ;;
    e) extra=$OPTARG ;; n) suffix=$OPTARG ;; l) lock=$OPTARG ;; t) tdir=$OPTARG ;;
    *) echo "run_matrix.sh: bad option (see the header of $0)" >&2; exit 2 ;;
    esac
done
if [ -n "$extra" ] && [ -z "$suffix" ]; then
    echo "run_matrix.sh: -e '$extra' needs -n NAME_SUFFIX (e.g. -n _accum2): the rows would overwrite the plain ones" >&2
    exit 2
fi
case $suffix in
    ""|_[A-Za-z0-9._-]*) ;;
    *) echo "run_matrix.sh: -n '$suffix': a suffix starts with '_' and holds letters, digits, '.', '_', '-'" >&2; exit 2 ;;
esac
locked=()
[ -n "$lock" ] && locked=(flock "$lock")
py=$("$root/scripts/torch_env.sh" --print) || exit 1
torchrun="$(dirname "$py")/torchrun"
out=${tdir:-$here/results}
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
        f="$out/${name}_${s}_${prec}_${ckpt}_${attn}_r${ranks}_b${batch}_s${sq}${suffix}.json"
        [ $force = 0 ] && [ -s "$f" ] && continue
        t0=$(date +%s)
        trace=()
        [ -n "$tdir" ] && trace=(--alloc-trace "${f%.json}.txt")
        # shellcheck disable=SC2086  # $extra is a list of flags
        if "${locked[@]}" nice -n 5 "$torchrun" --standalone --nproc-per-node "$ranks" \
            "$here/harness.py" --model "$m" --strategy "$s" --precision "$prec" \
            --act-ckpt "$ckpt" --attn "$attn" --batch "$batch" --seq "$sq" $extra "${trace[@]}" \
            --json "$f.part" >"$f.log" 2>&1; then
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
