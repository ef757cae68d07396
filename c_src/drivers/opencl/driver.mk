# The opencl driver: built when the OpenCL headers and the ICD loader are found; GEMM goes through
# CLBlast when its C header and library are there too (without them dot is not claimed).
OPENCL_FOUND := $(shell test -f /usr/include/CL/cl.h && { test -e /usr/lib/x86_64-linux-gnu/libOpenCL.so || ldconfig -p 2>/dev/null | grep -q 'libOpenCL\.so '; } && echo yes)
CLBLAST_FOUND := $(shell test -f /usr/include/clblast_c.h && { test -e /usr/lib/x86_64-linux-gnu/libclblast.so || ldconfig -p 2>/dev/null | grep -q 'libclblast\.so '; } && echo yes)

ifeq ($(OPENCL_FOUND),yes)
OPENCL_SRC := $(filter-out %/opencl_probe_main.c,$(wildcard c_src/drivers/opencl/*.c))
OPENCL_FLAGS := -DCL_TARGET_OPENCL_VERSION=120
OPENCL_LIBS := -lOpenCL
ifeq ($(CLBLAST_FOUND),yes)
OPENCL_FLAGS += -DCX_HAVE_CLBLAST
OPENCL_LIBS += -lclblast
endif
DRIVER_SO += $(BUILD)/cascade_driver_opencl.so $(BUILD)/cascade_opencl_probe

# Like the test driver, it carries its own copy of the core (hidden symbols) and exports only
# cx_driver_entry.
$(BUILD)/cascade_driver_opencl.so: $(OPENCL_SRC) $(BUILD)/libcascade_core.a $(HEADERS)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(OPENCL_FLAGS) -shared -o $@ $(OPENCL_SRC) \
	  $(BUILD)/libcascade_core.a $(LDFLAGS) $(OPENCL_LIBS) $(LDLIBS)
endif

# The program the driver's probe runs to describe the devices without loading their platform
# into the VM (opencl_describe.h); installed beside the driver.
ifeq ($(OPENCL_FOUND),yes)
$(BUILD)/cascade_opencl_probe: c_src/drivers/opencl/opencl_probe_main.c \
  c_src/drivers/opencl/opencl_describe.c $(BUILD)/libcascade_core.a $(HEADERS)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(OPENCL_FLAGS) -fPIE -o $@ $(filter %.c,$^) \
	  $(BUILD)/libcascade_core.a $(LDFLAGS) -lOpenCL $(LDLIBS)
endif
