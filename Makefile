# Cascade's C build. `make` builds the NIF library; `make test` runs the cmocka tests without a
# BEAM; `make test-asan` runs them under AddressSanitizer and UBSan; `make test-valgrind` under
# valgrind; `make check` all three (with -j, side by side). mix compile calls `make` through the
# :cascade compiler in mix.exs.

BUILD ?= build
CC ?= cc
OPT ?= -O3
SAN ?=

ERTS_INCLUDE_DIR ?= $(shell erl -noshell -eval 'io:format("~ts/erts-~ts/include", [code:root_dir(), erlang:system_info(version)]), halt().' 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wno-unused-parameter
BASE_CFLAGS := -std=gnu11 $(OPT) -g -fPIC -fvisibility=hidden -pthread $(WARN) $(SAN)
LDLIBS := -lm -pthread

CORE_SRC := $(wildcard c_src/core/*.c)
CPU_SRC := $(wildcard c_src/drivers/cpu/*.c)
NIF_SRC := $(wildcard c_src/nif/*.c)
TEST_SRC := $(wildcard c_src/tests/test_*.c)

LIB_OBJ := $(patsubst c_src/%.c,$(BUILD)/%.o,$(CORE_SRC) $(CPU_SRC))
NIF_OBJ := $(patsubst c_src/%.c,$(BUILD)/%.o,$(NIF_SRC))
TEST_BIN := $(patsubst c_src/tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
# drivers loaded with dlopen; the test driver is built only for tests
TEST_DRIVER := $(BUILD)/cascade_driver_test.so
HEADERS := $(wildcard c_src/core/*.h c_src/core/*.def c_src/drivers/*/*.h c_src/drivers/*/*/*.h \
  c_src/nif/*.h c_src/tests/*.h)

.PHONY: all lib drivers test-driver test test-asan test-valgrind check format format-check clean

# Optional drivers. Each c_src/drivers/<name>/driver.mk appends its shared object
# ($(BUILD)/cascade_driver_<name>.so) to DRIVER_SO when its toolkit is found, and gives the rule
# that builds it; a driver whose toolkit is missing is simply not built (the NIF then lists it as
# unavailable: "not built"). DRIVER_TESTS may name extra test programs a driver needs, and
# DRIVER_TEST_TARGETS make targets that `make test` (and so test-asan) runs after them.
DRIVER_SO :=
DRIVER_TESTS :=
DRIVER_TEST_TARGETS :=
# and DRIVER_TEST_PROGRAMS what those targets run, so that `make test-programs` builds them
DRIVER_TEST_PROGRAMS :=
# and DRIVER_TEST_SO shared objects that only tests load (built with the test driver)
DRIVER_TEST_SO :=
include $(sort $(wildcard c_src/drivers/*/driver.mk))

all: $(BUILD)/cascade_nif.so $(DRIVER_SO)

drivers: $(DRIVER_SO)

lib: $(BUILD)/libcascade_core.a

$(BUILD)/%.o: c_src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/nif/%.o: c_src/nif/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	@test -f "$(ERTS_INCLUDE_DIR)/erl_nif.h" || { echo "erl_nif.h not found in '$(ERTS_INCLUDE_DIR)': install erlang-dev or set ERTS_INCLUDE_DIR" >&2; exit 1; }
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -I$(ERTS_INCLUDE_DIR) -c $< -o $@

$(BUILD)/libcascade_core.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/cascade_nif.so: $(NIF_OBJ) $(BUILD)/libcascade_core.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -shared -o $@ $(NIF_OBJ) $(BUILD)/libcascade_core.a $(LDFLAGS) $(LDLIBS) -ldl

test-driver: $(TEST_DRIVER) $(DRIVER_TEST_SO)

# The driver carries its own copy of the core and cpu kernels (hidden symbols), as an
# out-of-tree driver would; it exports only cx_driver_entry.
$(TEST_DRIVER): c_src/drivers/test/test_driver.c $(BUILD)/libcascade_core.a $(HEADERS)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -shared -o $@ $< $(BUILD)/libcascade_core.a $(LDFLAGS) $(LDLIBS)

# CX_BUILD_DIR lets a test find the optional drivers built beside it (cascade_driver_<name>.so).
$(BUILD)/tests/%: c_src/tests/%.c $(BUILD)/libcascade_core.a $(TEST_DRIVER) $(DRIVER_SO) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -DCX_TEST_DRIVER='"$(abspath $(TEST_DRIVER))"' \
	  -DCX_BUILD_DIR='"$(abspath $(BUILD))"' -o $@ $< $(BUILD)/libcascade_core.a $(LDFLAGS) \
	  -lcmocka $(LDLIBS) -ldl

# Each test program runs as a target of its own, so that `make -j` runs them side by side; with
# -O (--output-sync) each one's output comes out whole. The opencl suites' first PoCL kernel build
# (about 80 s of one core) then overlaps the rest.
TEST_RUNS := $(addsuffix .run,$(TEST_BIN) $(DRIVER_TESTS))
.PHONY: $(TEST_RUNS)

test: $(TEST_RUNS) $(DRIVER_TEST_TARGETS)

# Each prints the seconds it took: CI's budget is spent here.
$(TEST_RUNS): %.run: %
	@echo "== $<"; t0=$$(date +%s); $< && echo "-- $(notdir $<): $$(($$(date +%s) - t0)) s"

ASAN_BUILD ?= build/asan

# The programs every suite runs, built but not run (drivers add theirs to DRIVER_TEST_PROGRAMS)
test-programs: $(TEST_BIN) $(DRIVER_TESTS) $(DRIVER_TEST_PROGRAMS)

# ASAN_MAKE names $(MAKE) through a variable, which make does not take for a
# recursive call: the `+` before each use hands them the jobserver, so that they share -j with the
# rest (without it each ran with -j1, "jobserver unavailable").
# The sanitised build leaves out the cuda driver's GPU build (CUDA_DEVICE_CODE, cuda/driver.mk).
# CX_PARAMS_POISON fills parameter records with a pattern where the other builds leave them
# unset (core/params.h): a read of a parameter nobody gave then shows in the sanitised tests, as
# valgrind shows it in the plain build (uninitialised values).
ASAN_MAKE = $(MAKE) BUILD=$(ASAN_BUILD) OPT=-O1 CC=clang CXX=clang++ CUDA_DEVICE_CODE=no \
  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
  -DCX_PARAMS_POISON"

test-asan:
	+$(ASAN_MAKE) test

# Valgrind runs where it adds to ASan, which cannot see reads of uninitialised memory: Cascade's
# own code. Not test_blas (OpenBLAS's kernels, ~10 s there; the blas driver's code runs under
# valgrind in the differential suite too) nor test_opencl (PoCL's compiler, which it skips under
# valgrind); the differential suite skips the opencl driver for the same reason, and the test
# driver, whose code is the core and cpu kernels that the suite's reference runs already under
# valgrind (its decompositions run there in test_dispatch; ASan runs it whole).
# It runs the plain build's programs, as they are: valgrind needs no build of its own, and a
# second -O1 build of everything was a fifth of what `make check` cost (valgrind reports the same
# on both).
VALGRIND_SKIP := %/test_blas %/test_opencl
VALGRIND_RUNS := $(addsuffix .vg,$(filter-out $(VALGRIND_SKIP),$(TEST_BIN) $(DRIVER_TESTS)))
.PHONY: $(VALGRIND_RUNS) test-programs

test-valgrind: $(VALGRIND_RUNS)

$(VALGRIND_RUNS): %.vg: %
	@echo "== valgrind $<"; t0=$$(date +%s); CX_DIFF_SKIP=$${CX_DIFF_SKIP-opencl,test} valgrind -q \
	  --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite $< && \
	  echo "-- valgrind $(notdir $<): $$(($$(date +%s) - t0)) s"

# Every C suite: plain, under valgrind, and under ASan+UBSan in a build folder of its own. With
# -j, in two rounds: the plain suites and valgrind's run (the first PoCL kernel build among them,
# one core for ~80 s) while the ASan build builds, then the ASan suites run side by side, finding
# PoCL's kernels in its cache (script/test: make -j$(nproc) -O check).
check:
	$(MAKE) test test-valgrind asan-programs
	$(MAKE) test-asan

.PHONY: asan-programs
asan-programs:
	+$(ASAN_MAKE) test-programs

format:
	clang-format -i c_src/*/*.[ch] c_src/drivers/*/*.[ch] c_src/drivers/*/*.cu c_src/drivers/cuda/emu/* c_src/drivers/blas/simd/*.c bench/floor/floor.c

format-check:
	clang-format --dry-run --Werror c_src/*/*.[ch] c_src/drivers/*/*.[ch] c_src/drivers/*/*.cu c_src/drivers/cuda/emu/* c_src/drivers/blas/simd/*.c bench/floor/floor.c

clean:
	rm -rf $(BUILD)
