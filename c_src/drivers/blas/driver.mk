# The blas driver (OpenBLAS, host memory): built when cblas.h and libopenblas are found, through
# pkg-config or the usual paths (override with BLAS_CFLAGS / BLAS_LIBS). It links libopenblas
# dynamically: where the library is missing at run time, dlopen fails and the driver is listed as
# unavailable with the reason.
BLAS_CFLAGS ?= $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS ?= $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
BLAS_FOUND := $(shell printf '\043include <cblas.h>\nint main(void) { return openblas_get_num_threads(); }\n' | \
  $(CC) $(BLAS_CFLAGS) -x c - -o /dev/null $(BLAS_LIBS) 2>/dev/null && echo yes)

ifeq ($(BLAS_FOUND),yes)
BLAS_SRC := $(wildcard c_src/drivers/blas/*.c)
DRIVER_SO += $(BUILD)/cascade_driver_blas.so

# Like the test driver, it carries its own copy of the core and cpu kernels (hidden symbols) and
# exports only cx_driver_entry.
$(BUILD)/cascade_driver_blas.so: $(BLAS_SRC) $(BUILD)/libcascade_core.a $(HEADERS)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(BLAS_CFLAGS) -shared -o $@ $(BLAS_SRC) \
	  $(BUILD)/libcascade_core.a $(LDFLAGS) $(BLAS_LIBS) $(LDLIBS)
endif
