#!/usr/bin/env bash
# Builds the model-loader fuzz target (tests/fuzz/fuzz_load.c) with clang's libFuzzer, ASan and
# UBSan, and runs it for SECONDS (default 60) on a corpus seeded from tests/data. The corpus it
# grows stays in build-fuzz/corpus (ignored by git); crashes land in build-fuzz/ as crash-*.
#   scripts/fuzz.sh [SECONDS] [extra libFuzzer flags...]
# Needs clang with its fuzzer runtime (Debian: apt-get install clang libclang-rt-14-dev if
# -fsanitize=fuzzer fails to link). Exit status: 0 when the run ended without a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
CC=${CLANG:-clang}
out=build-fuzz
mkdir -p "$out/corpus"
command -v "$CC" >/dev/null || { echo "fuzz.sh: $CC not found (set CLANG=...)" >&2; exit 2; }
# the zoo's compiled-in configs (as the Makefile writes build/gen/plan_zoo_configs.c)
scripts/zoo_embed.sh $(ls tests/data/hf/*.json | grep -v '/counts.json$') > "$out/plan_zoo_configs.c"
"$CC" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Iplanner tests/fuzz/fuzz_load.c planner/plan_load*.c planner/plan_model.c planner/plan_zoo.c \
    "$out/plan_zoo_configs.c" -o "$out/fuzz_load" -lcjson -lm
# seeds: every model file of the test data (good and bad)
find tests/data -name '*.json' -exec cp -n {} "$out/corpus/" \; 2>/dev/null || true
echo "# fuzz_load: ${secs}s on $(ls "$out/corpus" | wc -l) corpus files"
"$out/fuzz_load" "$out/corpus" -dict=tests/fuzz/json.dict -max_total_time="$secs" \
    -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/" "$@"
