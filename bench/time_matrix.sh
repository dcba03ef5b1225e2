#!/usr/bin/env bash
# time_matrix.sh — validate's step-time rows over the matrix of docs/validation.md ("Time rows"):
# every model x rank count, all four strategies, ROUNDS rounds interleaved (round 1 of every
# setup, then round 2, ...: a machine shared with other work slows a round, not a setup). Each
# setup trains a global batch of 8 sequences of SEQ tokens (micro-batch 8 / ranks); gpt2-mini
# for 6 steps, any other model for 4 (5 and 3 steady steps: validate's rows are their medians).
# Prints one line per setup and strategy: predicted and measured step of every round, the error
# (measured - predicted) / predicted of each, their median, and whether it is within 15 %; then
# how many medians are. Ranks beyond the cores are oversubscribed (memplan pins them two to a
# core, docs/validation.md item 10).
# Usage: bench/time_matrix.sh [ROUNDS]   (default 3; a round of the default matrix takes about
#        5 minutes on 2 cores); MODELS="gpt2-mini gpt2", RANKS="2 4", SEQ=128, BUILD=build (folder),
#        OUT=folder for every run's text and JSON (default: a new one under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
MODELS=${MODELS:-gpt2-mini gpt2}
RANKS=${RANKS:-2 4}
SEQ=${SEQ:-128}
BUILD=${BUILD:-build}
OUT=${OUT:-$(mktemp -d /tmp/memplan-time-matrix-XXXXXX)}
case "$ROUNDS" in '' | *[!0-9]* | 0) echo "time_matrix.sh: ROUNDS '$ROUNDS' is not a whole number from 1" >&2; exit 2 ;; esac
for n in $RANKS; do
    case "$n" in 2 | 4 | 8) ;; *) echo "time_matrix.sh: RANKS has '$n': each must be 2, 4 or 8 (global batch 8)" >&2; exit 2 ;; esac
done
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make -s NO_DEPS=1 BUILD="$BUILD" "$BUILD/memplan" "$BUILD/memplan-exec" >/dev/null

echo "# time matrix: validate's step rows; models $MODELS; ranks $RANKS; seq $SEQ; $ROUNDS round(s), interleaved; $(nproc --all) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; runs in $OUT"
for r in $(seq 1 "$ROUNDS"); do
    for m in $MODELS; do
        for n in $RANKS; do
            b=$((8 / n)); s=4
            [ "$m" = gpt2-mini ] && s=6
            f="$OUT/$m-r$n-round$r"
            echo "round $r/$ROUNDS: $m on $n ranks, micro-batch $b, $s steps ($(date +%T))" >&2
            # exit status 1 is a failed memory check: the time rows are still written
            mpirun -np "$n" --oversubscribe "$BUILD/memplan" validate --model "$m" --batch "$b" --seq "$SEQ" \
                --steps "$s" --json="$f.json" > "$f.txt" 2>&1 || [ $? -eq 1 ] || {
                echo "time_matrix.sh: the run failed; its output is in $f.txt" >&2
                exit 1
            }
        done
    done
done

python3 - "$OUT" "$ROUNDS" "$MODELS" "$RANKS" <<'EOF'
import json, statistics, sys
out, rounds, models, ranks = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
print("%-10s %5s %5s %-8s  %-44s %-26s %8s %s" % ("model", "ranks", "batch", "strategy",
      "step predicted / measured per round, ms", "error per round, %", "median", "within 15 %"))
within = total = 0
for m in models:
    for n in ranks:
        runs = []
        for r in range(1, rounds + 1):
            f = "%s/%s-r%s-round%d" % (out, m, n, r)
            try:
                run = json.load(open(f + ".json"))
            except (OSError, ValueError):
                run = {}
            if not run.get("complete"):
                sys.exit("time_matrix.sh: %s.json is missing or incomplete (the run stopped early: %s.txt)" % (f, f))
            runs.append(run)
        for k, st in enumerate(runs[0]["strategies"]):
            pm, errs = [], []
            for run in runs:
                row = next(q for q in run["strategies"][k]["time"] if q["quantity"] == "step")
                p, x = row["predicted_ms"], row["measured_ms"]
                pm.append("%.4g/%.4g" % (p, x))
                errs.append(100 * (x - p) / p)
            med = statistics.median(errs)
            ok = abs(med) <= 15
            within += ok
            total += 1
            print("%-10s %5s %5d %-8s  %-44s %-26s %+7.1f%% %s" % (m, n, runs[0]["micro_batch"], st["strategy"],
                  " ".join(pm), " ".join("%+.1f" % e for e in errs), med, "yes" if ok else "no"))
print("# %d of %d medians within 15 %%" % (within, total))
EOF
