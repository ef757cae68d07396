# Cascade's C build. `make` builds the NIF library; `make test` runs the cmocka tests without a
# BEAM; `make test-asan` runs them under AddressSanitizer and UBSan; `make test-valgrind` under
# valgrind. mix compile calls `make` through the :cascade compiler in mix.exs.

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
HEADERS := $(wildcard c_src/core/*.h c_src/core/*.def c_src/drivers/*/*.h c_src/tests/*.h)

.PHONY: all lib drivers test-driver test test-asan test-valgrind format format-check clean

# Optional drivers. Each c_src/drivers/<name>/driver.mk appends its shared object
# ($(BUILD)/cascade_driver_<name>.so) to DRIVER_SO when its toolkit is found, and gives the rule
# that builds it; a driver whose toolkit is missing is simply not built (the NIF then lists it as
# unavailable: "not built"). DRIVER_TESTS may name extra test programs a driver needs, and
# DRIVER_TEST_TARGETS make targets that `make test` (and so test-asan) runs after them.
DRIVER_SO :=
DRIVER_TESTS :=
DRIVER_TEST_TARGETS :=
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

test: $(TEST_BIN) $(DRIVER_TESTS)
	@set -e; for t in $(TEST_BIN) $(DRIVER_TESTS); do echo "== $$t"; $$t; done
	@set -e; for t in $(DRIVER_TEST_TARGETS); do echo "== make $$t"; $(MAKE) --no-print-directory $$t; done

test-asan:
	$(MAKE) test BUILD=build/asan OPT=-O1 CC=clang CXX=clang++ \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"

# The differential suite skips the opencl driver under valgrind: nearly all it would run there is
# PoCL's LLVM compiler (test_opencl skips itself for the same reason).
test-valgrind: $(TEST_BIN) $(DRIVER_TESTS)
	@set -e; for t in $(TEST_BIN) $(DRIVER_TESTS); do echo "== valgrind $$t"; \
	  CX_DIFF_SKIP=$${CX_DIFF_SKIP-opencl} valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite $$t; done

format:
	clang-format -i c_src/*/*.[ch] c_src/drivers/*/*.[ch] c_src/drivers/*/*.cu c_src/drivers/cuda/emu/*

format-check:
	clang-format --dry-run --Werror c_src/*/*.[ch] c_src/drivers/*/*.[ch] c_src/drivers/*/*.cu c_src/drivers/cuda/emu/*

clean:
	rm -rf $(BUILD)
