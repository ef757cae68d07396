# The blas driver (OpenBLAS, host memory): built when cblas.h and libopenblas are found, through
# pkg-config or the usual paths (override with BLAS_CFLAGS / BLAS_LIBS). It links libopenblas
# dynamically: where the library is missing at run time, dlopen fails and the driver is listed as
# unavailable with the reason.
BLAS_CFLAGS ?= $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS ?= $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
BLAS_FOUND := $(shell printf '\043include <cblas.h>\nint main(void) { return openblas_get_num_threads(); }\n' | \
  $(CC) $(BLAS_CFLAGS) -x c - -o /dev/null $(BLAS_LIBS) 2>/dev/null && echo yes)

# Its vector kernels (c_src/drivers/blas/simd) need SLEEF (Debian libsleef-dev) and an x86-64
# compiler: simd_kernels.c is built once with AVX2 + FMA and once with AVX-512, and the driver
# picks one at run time from cpuid. Without SLEEF the driver is built without them and runs the
# cpu kernels for everything but GEMM.
SLEEF_CFLAGS ?= $(shell pkg-config --cflags sleef 2>/dev/null)
SLEEF_LIBS ?= $(or $(shell pkg-config --libs sleef 2>/dev/null),-lsleef)
SLEEF_FOUND := $(shell printf '\043include <sleef.h>\nint main(void) { return (int)Sleef_expf_u10(0.0f); }\n' | \
  $(CC) $(SLEEF_CFLAGS) -x c - -o /dev/null $(SLEEF_LIBS) -lm 2>/dev/null && echo yes)
SIMD_X86 := $(findstring x86_64,$(shell $(CC) -dumpmachine))
# oneDNN (Debian libdnnl-dev) for conv2d: only its headers at build time; the driver loads
# libdnnl.so.2 with dlopen at the first convolution (blas_dnnl.c).
DNNL_FOUND := $(shell printf '\043include <dnnl.h>\nint main(void) { return (int)dnnl_success; }\n' | \
  $(CC) -x c - -o /dev/null 2>/dev/null && echo yes)

ifeq ($(BLAS_FOUND),yes)
BLAS_SRC := $(wildcard c_src/drivers/blas/*.c)
BLAS_OBJ :=
BLAS_SIMD_LIBS :=
BLAS_SIMD_FLAGS :=
ifeq ($(SLEEF_FOUND)$(SIMD_X86),yesx86_64)
BLAS_OBJ := $(BUILD)/blas/simd_avx2.o $(BUILD)/blas/simd_avx512.o
BLAS_SIMD_LIBS := $(SLEEF_LIBS)
BLAS_SIMD_FLAGS := -DCX_HAVE_SIMD $(SLEEF_CFLAGS)
endif
# Not in the sanitised build: LeakSanitizer cannot stop libgomp's threads at exit ("Tracer
# caught signal 11"), and oneDNN's JIT code is not instrumented anyway. The oneDNN path runs in
# the plain suites and under valgrind.
ifeq ($(DNNL_FOUND)$(SAN),yes)
BLAS_SIMD_FLAGS += -DCX_HAVE_DNNL
endif
DRIVER_SO += $(BUILD)/cascade_driver_blas.so

$(BUILD)/blas/simd_avx2.o: c_src/drivers/blas/simd/simd_kernels.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(SLEEF_CFLAGS) -mavx2 -mfma -mf16c -DSIMD_TABLE=simd_avx2 -c $< -o $@

$(BUILD)/blas/simd_avx512.o: c_src/drivers/blas/simd/simd_kernels.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(SLEEF_CFLAGS) -mavx2 -mfma -mf16c -mavx512f -mavx512dq -mavx512bw \
	  -mavx512vl -DSIMD_TABLE=simd_avx512 -c $< -o $@

# The vector kernels' tables called directly (c_src/drivers/blas/simd/test_simd_kernels.c).
ifeq ($(SLEEF_FOUND)$(SIMD_X86),yesx86_64)
DRIVER_TESTS += $(BUILD)/tests/test_simd_kernels
$(BUILD)/tests/test_simd_kernels: c_src/drivers/blas/simd/test_simd_kernels.c $(BLAS_OBJ) $(BUILD)/libcascade_core.a $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(SLEEF_CFLAGS) -o $@ $< $(BLAS_OBJ) $(BUILD)/libcascade_core.a \
	  $(LDFLAGS) -lcmocka $(SLEEF_LIBS) $(LDLIBS) -lm
endif

# The differential suite and test_blas run the vector kernels, oneDNN's and OpenBLAS's kernels
# that this processor gets; CI meets other processors, whose kernels round otherwise and split
# otherwise. So they run again as each class of processor would run them, with Cascade's table
# (CASCADE_SIMD), oneDNN's (DNNL_MAX_CPU_ISA) and OpenBLAS's (OPENBLAS_CORETYPE) held to that
# class's instruction set, where this processor has it (a class whose flags it lacks is skipped,
# and says so). $(call blas_class,name,cpuinfo flags it needs,environment)
#
# These runs, the coretype, reproducible and Winograd ones below, are about which library kernels
# run and how they round: the plain build only. The sanitised build has no oneDNN and OpenBLAS is
# not instrumented; the vector kernels of both tables run under ASan in test_simd_kernels, and
# the driver's own routes without them in test-blas-san-portable (the differential suite with
# CASCADE_SIMD=none), the one such run it keeps. Run there, the rest took 122 s of one core.
BLAS_CLASS_TARGETS :=
define blas_class
.PHONY: test-blas-$(1)
BLAS_CLASS_TARGETS += test-blas-$(1)
test-blas-$(1): $$(BUILD)/cascade_driver_blas.so $$(BUILD)/tests/test_differential $$(BUILD)/tests/test_blas
	@if $(foreach f,$(2),grep -qw $(f) /proc/cpuinfo &&) true; then \
	  echo "== test_differential and test_blas as on $(1): $(3)"; \
	  env $(3) CX_DIFF_DRIVERS=blas CX_DIFF_REQUIRE=blas $$(BUILD)/tests/test_differential && \
	  env $(3) $$(BUILD)/tests/test_blas; \
	else \
	  echo "== test_blas as on $(1): skipped, this processor lacks one of: $(2)"; \
	fi
endef

ifeq ($(SLEEF_FOUND)$(SIMD_X86),yesx86_64)
# test_blas with every f32 3x3 stride-1 convolution on oneDNN's Winograd algorithm wherever
# oneDNN builds it, instead of where it measures faster, and every product oneDNN takes on its
# matmul strips (CASCADE_BLAS_DOT=onednn: built on the calling thread, no OpenBLAS calls while a
# shape builds), so that the tests check both against the cpu on each such shape
.PHONY: test-blas-winograd
BLAS_CLASS_TARGETS += test-blas-winograd
test-blas-winograd: $(BUILD)/cascade_driver_blas.so $(BUILD)/tests/test_blas
	@echo "== test_blas, f32 3x3 convolutions on Winograd's algorithm and products on oneDNN wherever it has them"
	@CASCADE_BLAS_WINOGRAD=1 CASCADE_BLAS_DOT=onednn $(BUILD)/tests/test_blas

# The convolution tests (their epilogues in programs too) with every conv2d on im2col + GEMM
# (the 1 x 1 windows without their im2col copy), where a measured choice may keep oneDNN and
# leave that path unchecked
.PHONY: test-blas-im2col
BLAS_CLASS_TARGETS += test-blas-im2col
test-blas-im2col: $(BUILD)/cascade_driver_blas.so $(BUILD)/tests/test_blas
	@echo "== test_blas's convolutions, every one on im2col + GEMM"
	@CASCADE_BLAS_CONV=im2col CX_TEST_FILTER='test_conv2d*' $(BUILD)/tests/test_blas

# AVX2 and FMA without AVX-512 (AMD Zen 3): OpenBLAS's Zen kernels are its Haswell ones
$(eval $(call blas_class,avx2,avx2 fma f16c,CASCADE_SIMD=avx2 DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Zen))
# AVX-512 without AVX512-BF16 (Intel Cascade Lake)
$(eval $(call blas_class,avx512,avx512f avx512dq avx512bw avx512vl,CASCADE_SIMD=avx512 \
  DNNL_MAX_CPU_ISA=AVX512_CORE_VNNI OPENBLAS_CORETYPE=SkylakeX))
# no AVX2 (CASCADE_SIMD=none: the portable loops, where what the vector kernels fuse is
# decomposed instead; oneDNN and OpenBLAS on AVX)
$(eval $(call blas_class,portable,avx,CASCADE_SIMD=none DNNL_MAX_CPU_ISA=AVX OPENBLAS_CORETYPE=Sandybridge))
endif
# The processor as it is, with OPENBLAS_CORETYPE the other way from the environment's: unset
# where the environment sets it (CI's AMD machines set Haswell), Haswell where it does not.
# test_blas only: the differential suite runs OpenBLAS's kernels of each class above already.
.PHONY: test-blas-coretype
BLAS_CLASS_TARGETS += test-blas-coretype
ifneq ($(OPENBLAS_CORETYPE),)
BLAS_OTHER_CORETYPE := -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE
else
BLAS_OTHER_CORETYPE := OPENBLAS_CORETYPE=Haswell
endif
test-blas-coretype: $(BUILD)/cascade_driver_blas.so $(BUILD)/tests/test_blas
	@echo "== test_blas with $(BLAS_OTHER_CORETYPE)"
	@env $(BLAS_OTHER_CORETYPE) $(BUILD)/tests/test_blas

# Cascade.put_reproducible's checks (the same bits every call) at every other thread count of
# the pool than test_blas's 4, three times each.
.PHONY: test-blas-reproducible
BLAS_CLASS_TARGETS += test-blas-reproducible
test-blas-reproducible: $(BUILD)/cascade_driver_blas.so $(BUILD)/tests/test_blas
	@echo "== test_blas's reproducibility tests on 1, 2 and 3 threads, three times each"
	@for t in 1 2 3 1 2 3 1 2 3; do \
	  CASCADE_BLAS_THREADS=$$t CX_TEST_FILTER='test_reproducible*' $(BUILD)/tests/test_blas \
	    >$(BUILD)/tests/test_blas.reproducible.log 2>&1 || \
	    { cat $(BUILD)/tests/test_blas.reproducible.log; echo "(on $$t threads)"; exit 1; }; \
	done

ifeq ($(SAN),)
DRIVER_TEST_TARGETS += $(BLAS_CLASS_TARGETS)
else
.PHONY: test-blas-san-portable
DRIVER_TEST_TARGETS += test-blas-san-portable
test-blas-san-portable: $(BUILD)/cascade_driver_blas.so $(BUILD)/tests/test_differential
	@echo "== test_differential's blas driver without its vector kernels (CASCADE_SIMD=none)"
	@CASCADE_SIMD=none CX_DIFF_DRIVERS=blas CX_DIFF_REQUIRE=blas $(BUILD)/tests/test_differential
endif

# The driver's thread pool on its own (c_src/tests/blas/test_blas_pool.c): a split's parts do not
# depend on which workers are free.
DRIVER_TESTS += $(BUILD)/tests/test_blas_pool
$(BUILD)/tests/test_blas_pool: c_src/tests/blas/test_blas_pool.c c_src/drivers/blas/blas_pool.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(BLAS_CFLAGS) -o $@ $< c_src/drivers/blas/blas_pool.c $(LDFLAGS) \
	  -lcmocka $(LDLIBS)

# Like the test driver, it carries its own copy of the core and cpu kernels (hidden symbols) and
# exports only cx_driver_entry.
$(BUILD)/cascade_driver_blas.so: $(BLAS_SRC) $(BLAS_OBJ) $(BUILD)/libcascade_core.a $(HEADERS)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(BLAS_CFLAGS) $(BLAS_SIMD_FLAGS) -shared -o $@ $(BLAS_SRC) \
	  $(BLAS_OBJ) $(BUILD)/libcascade_core.a $(LDFLAGS) $(BLAS_LIBS) $(BLAS_SIMD_LIBS) $(LDLIBS) -ldl
endif
