# memplan build. `make` builds build/memplan; `make test` builds and runs every test;
# `make run` plans gpt2-xl on 8 GPUs; `make gpu-bundle` packs what bench/gpu_check.sh runs on a
# lent GPU machine (docs/gpu.md). Everything builds on a CPU-only machine.
#
# Three programs: build/memplan, the planning front end (plan, auto, models, gpus), linked with
# the planner, cJSON, libyaml and libm only so that it starts in a millisecond or two;
# build/memplan-exec (run, validate, bench: MPI, BLAS, CUDA), which memplan execv()s; and
# build/memplan-fetch (libcurl), which memplan runs only to fetch a hub model's config.json.
#
# Folders build into one static library each, so a test links only what it needs:
#   tests/test_plan_*.c -> planner      tests/test_kern_*.c -> kernels (+ BLAS)
#   tests/test_prof_*.c -> profiler     tests/test_*.c (others) -> everything
#   tests/mpi/*.c       -> multi-rank programs that Criterion tests launch with mpirun
# Switches: SAN=1 (ASan+UBSan, builds into build-san/), NO_CUDA=1, NO_NCCL=1, NO_CUPTI=1,
# NO_DEPS=1 (skip the Debian package check); REQUIRE_CUDA=1, REQUIRE_NCCL=1, REQUIRE_CUPTI=1 stop
# the build when that part would be off.

SAN      ?= 0
NO_CUDA  ?= 0
NO_NCCL  ?= 0
NO_CUPTI ?= 0
NO_DEPS  ?= 0
CUDA_HOME ?= /usr/local/cuda

ifeq ($(SAN),1)
BUILD    := build-san
OPTFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
else
BUILD    := build
OPTFLAGS := -O2 -g
endif

CC       := gcc
MPICC    := mpicc
NVCC     := $(CUDA_HOME)/bin/nvcc
WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
BLAS_INC := -I/usr/include/x86_64-linux-gnu/openblas-pthread
CFLAGS   := -std=c11 -D_GNU_SOURCE $(OPTFLAGS) $(WARN) -MMD -MP -Iplanner -Ikernels -Iprofiler -Iexec $(BLAS_INC)
LDFLAGS  := $(filter -fsanitize%,$(OPTFLAGS))

# ---- optional GPU parts: detected, reported, switchable; a requested but missing part fails ----
HAVE_NVCC  := $(shell test -x $(NVCC) && echo 1 || echo 0)
HAVE_NCCL  := $(shell test -f $(CUDA_HOME)/include/nccl.h -o -f /usr/include/nccl.h && echo 1 || echo 0)
HAVE_CUPTI := $(shell test -f $(CUDA_HOME)/include/cupti.h -o -f $(CUDA_HOME)/extras/CUPTI/include/cupti.h && echo 1 || echo 0)
USE_CUDA  := $(if $(filter 1,$(NO_CUDA)),0,$(HAVE_NVCC))
USE_NCCL  := $(if $(filter 1,$(NO_NCCL) $(NO_CUDA)),0,$(HAVE_NCCL))
USE_CUPTI := $(if $(filter 1,$(NO_CUPTI) $(NO_CUDA)),0,$(HAVE_CUPTI))
ifeq ($(REQUIRE_CUDA),1)
ifneq ($(USE_CUDA),1)
$(error REQUIRE_CUDA=1 but nvcc was not found at $(NVCC); set CUDA_HOME)
endif
endif
ifeq ($(REQUIRE_NCCL),1)
ifneq ($(USE_NCCL),1)
$(error REQUIRE_NCCL=1 but NCCL is off (nccl.h not found under $(CUDA_HOME)/include or /usr/include, or NO_NCCL/NO_CUDA set))
endif
endif
ifeq ($(REQUIRE_CUPTI),1)
ifneq ($(USE_CUPTI),1)
$(error REQUIRE_CUPTI=1 but CUPTI is off (cupti.h not found under $(CUDA_HOME)/include or $(CUDA_HOME)/extras/CUPTI/include, or NO_CUPTI/NO_CUDA set))
endif
endif
GPU_DEFS := -DMEMPLAN_CUDA=$(USE_CUDA) -DMEMPLAN_NCCL=$(USE_NCCL) -DMEMPLAN_CUPTI=$(USE_CUPTI)
CUDA_INC := $(if $(filter 1,$(USE_CUDA)),-I$(CUDA_HOME)/include -I$(CUDA_HOME)/extras/CUPTI/include)
comma := ,
CUDA_LIBS := $(if $(filter 1,$(USE_CUDA)),-L$(CUDA_HOME)/lib64 -Wl$(comma)-rpath$(comma)$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt \
             $(if $(filter 1,$(USE_NCCL)),-lnccl) $(if $(filter 1,$(USE_CUPTI)),-L$(CUDA_HOME)/extras/CUPTI/lib64 -lcupti) -lstdc++)
NVCCFLAGS := -O2 -std=c++17 -MMD -MP -arch=sm_90 -Xcompiler -Wall,-Werror -Ikernels $(GPU_DEFS)

LIBS_PLAN := -lcjson -lm
LIBS_FRONT := $(LIBS_PLAN) -lyaml -lz   # --config reads accelerate's YAML (libyaml) besides JSON and TOML;
                                       # recorded allocation traces are gzip (zlib)
LIBS_FETCH := -lcurl   # memplan-fetch only: the hub's config.json over HTTPS (Debian's libcurl4-openssl-dev)
LIBS_KERN := -lopenblas -lm
LIBS_ALL  := -lcjson -lyaml -lz -lopenblas -lm $(CUDA_LIBS) -lpthread

# ---- sources ----
PLANNER_SRC  := $(sort $(wildcard planner/*.c))
KERNELS_SRC  := $(sort $(wildcard kernels/*.c))
KERNELS_CU   := $(if $(filter 1,$(USE_CUDA)),$(sort $(wildcard kernels/*.cu)))
PROFILER_SRC := $(sort $(wildcard profiler/*.c))
EXEC_SRC     := $(sort $(wildcard exec/*.c))
EXEC_CU      := $(if $(filter 1,$(USE_CUDA)),$(sort $(wildcard exec/*.cu)))
CONFIG_SRC   := cli/cli_config.c cli/cli_config_doc.c cli/cli_config_kinds.c cli/cli_config_recipes.c third_party/tomlc17/tomlc17.c
FRONT_SRC    := cli/memplan_main.c cli/memplan.c cli/cli_alloc.c cli/cli_model.c cli/cli_setup.c cli/cli_output.c cli/cli_plot.c cli/cli_io.c cli/cli_auto.c cli/cli_torch.c cli/cli_harness.c profiler/prof_trace.c $(CONFIG_SRC)
EXEC_CLI_SRC := $(filter-out cli/memplan.c cli/memplan_main.c cli/memplan_api.c cli/memplan_fetch.c cli/cli_alloc.c cli/cli_output.c cli/cli_auto.c cli/cli_torch.c cli/cli_harness.c,$(sort $(wildcard cli/*.c))) third_party/tomlc17/tomlc17.c
FETCH_SRC    := cli/memplan_fetch.c
# the front end as a library (cli/memplan_api.h: no main) with the vendored cJSON and libyaml, so
# that it links no system library: the Python package (setup.py) and the WebAssembly module (make web)
API_SRC      := $(filter-out cli/memplan_main.c,$(FRONT_SRC)) cli/memplan_api.c
VENDOR_SRC   := third_party/cjson/cJSON.c $(sort $(wildcard third_party/libyaml/src/*.c))
VENDOR_FLAGS := -Ithird_party -Ithird_party/libyaml/include -Ithird_party/libyaml -DHAVE_CONFIG_H -DYAML_DECLARE_STATIC \
                -DMEMPLAN_ZLIB=0   # no zlib either: gzip-compressed allocation traces are the native build's
TEST_SRC     := $(sort $(wildcard tests/test_*.c))
MPI_SRC      := $(sort $(wildcard tests/mpi/*.c))
BENCH_SRC    := $(sort $(wildcard bench/*.c))

# kernels/kern_fast.c's vector loops call sqrtf (AdamW); GCC 12 keeps such a loop scalar unless
# errno is off for the whole file: its `#pragma GCC optimize("no-math-errno")` and the optimize
# attribute do not reach the vectorizer (measured: AdamW stayed vdivss/vsqrtss, 3x slower).
FAST_CFLAGS := -fno-math-errno

# Rebuild everything when the flags change: the stamp is rewritten only when its content differs.
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW := $(CC) $(MPICC) $(CFLAGS) $(FAST_CFLAGS) $(GPU_DEFS) $(CUDA_INC) $(NVCCFLAGS) $(LDFLAGS) $(CUDA_LIBS)
$(shell mkdir -p $(BUILD); [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = '$(FLAGS_NOW)' ] || echo '$(FLAGS_NOW)' > $(FLAGS_STAMP))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
cuobj = $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(1))

LIB_PLAN := $(BUILD)/libplanner.a
LIB_KERN := $(BUILD)/libkernels.a
LIB_PROF := $(BUILD)/libprofiler.a
LIB_EXEC := $(BUILD)/libexec.a
ALL_LIBS := $(LIB_EXEC) $(LIB_PROF) $(LIB_KERN) $(LIB_PLAN)

MEMPLAN := $(BUILD)/memplan
MEMPLAN_EXEC := $(BUILD)/memplan-exec
MEMPLAN_FETCH := $(BUILD)/memplan-fetch
TESTS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
MPIBINS := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(MPI_SRC))
BENCHES := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

# The package check runs before anything compiles (order-only: `make -j2` on a fresh machine
# must not compile while apt-get is still installing the headers), without forcing rebuilds.
DEPS := $(if $(filter 1,$(NO_DEPS)),,deps)

.PHONY: all deps run test test-bin bench clean config torch-env gpu-bundle published-check published-memory-check fit-time embed-sources web web-serve py-test-prep
all: $(DEPS) $(MEMPLAN) $(MEMPLAN_EXEC) $(MEMPLAN_FETCH)

config:
	@echo "# memplan build: cuda $(if $(filter 1,$(USE_CUDA)),on,off) (nvcc $(if $(filter 1,$(HAVE_NVCC)),found,not found)$(if $(filter 1,$(NO_CUDA)), - disabled by NO_CUDA=1)), nccl $(if $(filter 1,$(USE_NCCL)),on,off), cupti $(if $(filter 1,$(USE_CUPTI)),on,off), sanitizers $(if $(filter 1,$(SAN)),on,off)"

deps:
	@scripts/deps.sh

# the cached PyTorch/DeepSpeed venv of the ground-truth harness (bench/torch/, docs/validation-torch.md)
torch-env:
	@scripts/torch_env.sh

# planner/ must stay free of CUDA, NCCL, MPI and CUPTI: plain gcc, no vendor include paths.
$(BUILD)/obj/planner/%.o: planner/%.c $(FLAGS_STAMP) | $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/obj/kernels/%.o: kernels/%.c $(FLAGS_STAMP) | $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(if $(filter kernels/kern_fast.c,$<),$(FAST_CFLAGS)) $(GPU_DEFS) $(CUDA_INC) -c $< -o $@
# vendored code (third_party/*/README.md): its own warnings are not held to the project's -Werror set
$(BUILD)/obj/third_party/%.o: third_party/%.c $(FLAGS_STAMP) | $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(OPTFLAGS) -w -MMD -MP -c $< -o $@
$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP) | $(DEPS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(GPU_DEFS) $(CUDA_INC) -c $< -o $@
$(BUILD)/obj/%.cu.o: %.cu $(FLAGS_STAMP) | $(DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iplanner -Iprofiler -Iexec -c $< -o $@

# The zoo's published configs, compiled in (planner/plan_zoo.c; scripts/zoo_embed.sh): every
# tests/data/hf/*.json but transformers' counts, which the tests hold them to.
# A stamp holds the list, so that a file removed (or added with an old date) rewrites it too.
ZOO_CONFIGS := $(filter-out tests/data/hf/counts.json,$(sort $(wildcard tests/data/hf/*.json)))
ZOO_GEN := $(BUILD)/gen/plan_zoo_configs.c
ZOO_STAMP := $(BUILD)/.zoo-configs
$(shell [ "$$(cat $(ZOO_STAMP) 2>/dev/null)" = '$(ZOO_CONFIGS)' ] || echo '$(ZOO_CONFIGS)' > $(ZOO_STAMP))
$(ZOO_GEN): $(ZOO_CONFIGS) $(ZOO_STAMP) scripts/zoo_embed.sh
	@mkdir -p $(dir $@)
	scripts/zoo_embed.sh $(ZOO_CONFIGS) > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/gen/plan_zoo_configs.o: $(ZOO_GEN) $(FLAGS_STAMP) | $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# What setup.py compiles into the Python extension (after writing the zoo's C file): the sources
# on one line, the flags on the next (python/README.md)
embed-sources: $(ZOO_GEN)
	@echo $(API_SRC) $(PLANNER_SRC) $(VENDOR_SRC) $(ZOO_GEN)
	@echo -std=c11 -D_GNU_SOURCE -Iplanner -Icli -Iprofiler -Iexec $(VENDOR_FLAGS)

# ---- the web page (web/README.md): the front end compiled to WebAssembly by Debian's emscripten ----
# build/web/ is the whole site: index.html, its CSS and JavaScript, and memplan.js, the module with
# the WebAssembly inlined (-sSINGLE_FILE), so that the page works from file:// as from any server.
# NODE_PATH: emcc's JavaScript optimizer needs Debian's node-acorn, which a nodejs from elsewhere
# does not look for.
WEB_DIR   := $(BUILD)/web
WEB_JS    := $(WEB_DIR)/memplan.js
WEB_PAGE  := $(patsubst web/%,$(WEB_DIR)/%,$(filter-out web/tests/%,$(wildcard web/*.html web/*.css web/*.js)))
WEB_FLAGS := -std=c11 -D_GNU_SOURCE -Os -w -Iplanner -Icli -Iprofiler -Iexec $(VENDOR_FLAGS) \
             -sMODULARIZE=1 -sEXPORT_NAME=MemplanModule -sALLOW_MEMORY_GROWTH=1 -sSINGLE_FILE=1 -sENVIRONMENT=web,node \
             -sEXPORTED_FUNCTIONS=_memplan_api_run,_memplan_api_version,_malloc,_free -sEXPORTED_RUNTIME_METHODS=ccall,FS,UTF8ToString
$(WEB_JS): $(API_SRC) $(PLANNER_SRC) $(VENDOR_SRC) $(ZOO_GEN) $(wildcard planner/*.h cli/*.h) | $(DEPS)
	@command -v emcc >/dev/null || { echo "make web: emcc not found (as root: scripts/deps.sh installs emscripten)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	NODE_PATH=/usr/share/nodejs emcc $(WEB_FLAGS) $(API_SRC) $(PLANNER_SRC) $(VENDOR_SRC) $(ZOO_GEN) -o $@
$(WEB_DIR)/%: web/%
	@mkdir -p $(dir $@)
	cp $< $@
web: $(WEB_JS) $(WEB_PAGE)
	@echo "# the page: $(WEB_DIR)/index.html ($$(cat $(WEB_JS) $(WEB_PAGE) | gzip -9 | wc -c) bytes gzip-compressed); make web-serve serves it"
web-serve: web
	@echo "# serving $(WEB_DIR) on http://localhost:$(or $(PORT),8000)/ (PORT=N for another port; Ctrl-C stops)"
	python3 -m http.server --directory $(WEB_DIR) $(or $(PORT),8000)

$(LIB_PLAN): $(call obj,$(PLANNER_SRC)) $(BUILD)/obj/gen/plan_zoo_configs.o
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(LIB_KERN): $(call obj,$(KERNELS_SRC)) $(call cuobj,$(KERNELS_CU))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(LIB_PROF): $(call obj,$(PROFILER_SRC))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(LIB_EXEC): $(call obj,$(EXEC_SRC)) $(call cuobj,$(EXEC_CU))
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^

$(MEMPLAN): $(call obj,$(FRONT_SRC)) $(LIB_PLAN)
	$(CC) $(LDFLAGS) $(call obj,$(FRONT_SRC)) -o $@ $(LIB_PLAN) $(LIBS_FRONT)
$(MEMPLAN_EXEC): $(call obj,$(EXEC_CLI_SRC)) $(ALL_LIBS)
	$(MPICC) $(LDFLAGS) $(call obj,$(EXEC_CLI_SRC)) -o $@ $(ALL_LIBS) $(LIBS_ALL)
# the hub fetch (cli/memplan_fetch.c): plain gcc, the planner's cache paths and libcurl, nothing else
$(BUILD)/obj/cli/memplan_fetch.o: cli/memplan_fetch.c $(FLAGS_STAMP) | $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(MEMPLAN_FETCH): $(call obj,$(FETCH_SRC)) $(LIB_PLAN)
	$(CC) $(LDFLAGS) $(call obj,$(FETCH_SRC)) -o $@ $(LIB_PLAN) $(LIBS_FETCH)

$(BUILD)/tests/test_plan_%: tests/test_plan_%.c $(LIB_PLAN) | $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(LIB_PLAN) $(LIBS_PLAN) -lcriterion
$(BUILD)/tests/test_kern_%: tests/test_kern_%.c $(LIB_KERN) | $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(GPU_DEFS) $(CUDA_INC) $< -o $@ $(LDFLAGS) $(LIB_KERN) $(LIBS_KERN) $(CUDA_LIBS) -lcriterion
$(BUILD)/tests/test_prof_%: tests/test_prof_%.c $(LIB_PROF) | $(DEPS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(GPU_DEFS) $(CUDA_INC) $< -o $@ $(LDFLAGS) $(LIB_PROF) $(LIBS_ALL) -lcriterion
$(BUILD)/tests/%: tests/%.c $(ALL_LIBS) $(MEMPLAN) $(MEMPLAN_EXEC) $(MEMPLAN_FETCH) $(MPIBINS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(GPU_DEFS) $(CUDA_INC) $< -o $@ $(LDFLAGS) $(ALL_LIBS) $(LIBS_ALL) -lcriterion
$(BUILD)/tests/mpi/%: tests/mpi/%.c $(ALL_LIBS) | $(DEPS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(GPU_DEFS) $(CUDA_INC) $< -o $@ $(LDFLAGS) $(ALL_LIBS) $(LIBS_ALL)
$(BUILD)/bench/%: bench/%.c $(ALL_LIBS) | $(DEPS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) $(GPU_DEFS) $(CUDA_INC) $< -o $@ $(LDFLAGS) $(ALL_LIBS) $(LIBS_ALL)
# the start-up benchmark and its empty reference program link libc only
$(BUILD)/bench/bench_startup $(BUILD)/bench/bench_empty: $(BUILD)/bench/%: bench/%.c | $(DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS)

# test_exec_cnn runs cnn_device on the CPU; test_gpu_bundle packs the benches bench/gpu_check.sh runs
test-bin: $(MEMPLAN) $(MEMPLAN_EXEC) $(MEMPLAN_FETCH) $(TESTS) $(MPIBINS) $(BUILD)/bench/cnn_device $(BUILD)/bench/gpu_overheads \
          $(BUILD)/bench/bench_nccl

# The Python package and the page in a real browser (python/README.md, web/README.md): pytest in
# the venv of scripts/py_env.sh, on the extension built in place and on the page (make web, where
# emcc is installed: the browser test skips, visibly, without it or without chromium). Not under
# SAN=1: the extension is not a sanitizer build, and the plain run covers it.
PYTEST_DIRS := python/tests web/tests
py-test-prep: $(MEMPLAN) torch-env | $(DEPS)
	@py=$$(scripts/py_env.sh --print) && $$py setup.py -q build_ext --inplace -j2
	@if command -v emcc >/dev/null; then $(MAKE) --no-print-directory web; else echo "# make web: emcc not found, the browser test will skip"; fi

# the tests include a few rows against real PyTorch (tests/test_torch.c): the venv first
test: $(DEPS) config test-bin torch-env $(if $(filter 1,$(SAN)),,py-test-prep)
	@BUILD=$(BUILD) $(if $(filter 1,$(SAN)),,PYTEST="$$(scripts/py_env.sh --print) -m pytest -p no:cacheprovider -q -rs $(PYTEST_DIRS)") \
	  scripts/run_tests.sh $(TESTS)

run: all
	$(MEMPLAN) --model gpt2-xl --gpus 8

# the time model against every published GPU run in bench/published, each source held out of the
# fit that predicts it (not part of `make test`; docs/validation-time.md)
published-check: $(MEMPLAN)
	python3 bench/published_check.py --memplan $(MEMPLAN)

# reserved memory against published GPU runs' max_memory_reserved or nvidia-smi figures (bench/published_memory;
# docs/validation-torch.md "Against published GPU runs")
published-memory-check: $(MEMPLAN)
	python3 bench/published_memory_check.py --memplan $(MEMPLAN)

# fits the time model's shares on every published source (and on all but each one) and checks
# that they reproduce the shipped planner/plan_shares.h and plan_time_sources.h (exit 1 if not;
# `python3 bench/fit_time.py --write` rewrites them, then rebuild)
fit-time: $(MEMPLAN)
	python3 bench/fit_time.py --memplan $(MEMPLAN)

bench: $(MEMPLAN) $(MEMPLAN_EXEC) $(BENCHES)

# The GPU bundle (scripts/gpu_bundle.sh; docs/gpu.md "The bundle"): the programs bench/gpu_check.sh
# runs, stripped, with every library but glibc and CUDA and a relocatable Open MPI, for a GPU
# machine that has none of our Debian packages; $(BUILD)/gpu-bundle.tar.xz is what the device tool
# carries. It needs the plain build with CUDA, NCCL and CUPTI on (a sanitizer build would carry
# libasan, and a bundle without them has nothing to run there).
GPU_BUNDLE := $(BUILD)/gpu-bundle.tar.xz
ifeq ($(SAN)$(USE_CUDA)$(USE_NCCL)$(USE_CUPTI),0111)
gpu-bundle: $(GPU_BUNDLE)
$(GPU_BUNDLE): $(MEMPLAN) $(MEMPLAN_EXEC) $(BENCHES) $(TESTS) $(MPIBINS) scripts/gpu_bundle.sh
	scripts/gpu_bundle.sh pack $(BUILD) $(BUILD)/gpu-bundle
else
gpu-bundle:
	@echo "make gpu-bundle: needs the plain build (not SAN=1) with CUDA, NCCL and CUPTI on; now: sanitizers $(if $(filter 1,$(SAN)),on,off), cuda $(USE_CUDA), nccl $(USE_NCCL), cupti $(USE_CUPTI) (make config)" >&2; exit 1
endif

clean:
	rm -rf build build-san

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
