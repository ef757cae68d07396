# The cuda driver (c_src/drivers/cuda), built only where nvcc is found: in PATH, or the
# toolkit's usual /usr/local/cuda. The CUDA runtime is linked statically; cuBLAS and cuDNN are
# loaded with dlopen at a device's first product or convolution (cuda_cublas.c, cuda_cudnn.c),
# found through the rpath to the toolkit, so a machine without a GPU never maps them (cuBLAS
# alone is ~150 MB of resident memory). The NVIDIA driver (libcuda.so.1) and a GPU are looked for
# only when it starts (cuda_probe): without them cuda is listed as unavailable with the reason.
#
# Device code: sm_90 machine code (H100/H200, the GPUs the project benchmarks on) plus compute_80
# PTX, which the driver compiles at load time for any other GPU from Ampere on (bf16 needs 8.0).
# Two targets instead of every architecture keep nvcc's time reasonable on small build
# machines; set CUDA_ARCH to change them.
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))

ifneq ($(strip $(NVCC)),)
CUDA_HOME ?= $(abspath $(dir $(NVCC))..)
CUDA_LIB ?= $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib))
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=compute_80
CUDA_SRC := $(wildcard c_src/drivers/cuda/*.c)
CUDA_CU := $(wildcard c_src/drivers/cuda/*.cu)
CUDA_OBJ := $(patsubst c_src/%.c,$(BUILD)/%.o,$(CUDA_SRC)) \
  $(patsubst c_src/%.cu,$(BUILD)/%.o,$(CUDA_CU))
CUDA_SO := $(BUILD)/cascade_driver_cuda.so
# CUDA_DEVICE_CODE=no leaves the GPU build out (nvcc takes ~20 s) and keeps the emulator: make
# check's sanitised builds, where the GPU build could only be loaded and found without a GPU,
# while its C code runs, sanitised, in the emulator build
CUDA_DEVICE_CODE ?= yes
ifeq ($(CUDA_DEVICE_CODE),yes)
DRIVER_SO += $(CUDA_SO)
endif

$(BUILD)/drivers/cuda/%.o: c_src/drivers/cuda/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -isystem $(CUDA_HOME)/include -c $< -o $@

# every nvcc warning is an error, and the host compiler's too
$(BUILD)/drivers/cuda/%.o: c_src/drivers/cuda/%.cu $(HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 $(OPT) $(CUDA_ARCH) -Werror all-warnings \
	  -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror -c $< -o $@

# Carries its own copy of the core (hidden symbols), as the test driver does; exports only
# cx_driver_entry and cx_cuda_transfer_counts.
$(CUDA_SO): $(CUDA_OBJ) $(BUILD)/libcascade_core.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -shared -o $@ $(CUDA_OBJ) $(BUILD)/libcascade_core.a \
	  -L$(CUDA_LIB) -Wl,-rpath,$(CUDA_LIB) -lcudart_static -lstdc++ $(LDFLAGS) \
	  $(LDLIBS) -ldl -lrt
endif

# The cpu emulator build of the same driver (c_src/drivers/cuda/emu): the driver's C files and
# its .cu files, compiled with CK_EMULATE by the host compilers, linked with emu_runtime.cc in
# place of the CUDA runtime and cuBLAS. It needs the toolkit's headers only, and runs the
# driver's code -- owner thread, streams, kernels, cuBLAS calls, out-of-memory and device-lost
# paths -- on a machine without a GPU. `make test-cuda-emu` runs the differential suite,
# test_cuda_load's GPU checks and test_cuda_emu against it.
ifneq ($(strip $(NVCC)),)
CXX ?= g++
CUDA_EMU := $(BUILD)/cudaemu
comma := ,
CUDA_EMU_SO := $(CUDA_EMU)/cascade_driver_cuda.so
CUDA_EMU_HEADERS := $(wildcard c_src/drivers/cuda/emu/*.h)
CUDA_EMU_OBJ := $(patsubst c_src/drivers/cuda/%.c,$(CUDA_EMU)/%.o,$(CUDA_SRC)) \
  $(patsubst c_src/drivers/cuda/%.cu,$(CUDA_EMU)/%.o,$(CUDA_CU)) $(CUDA_EMU)/emu_runtime.o
CUDA_EMU_CXXFLAGS := -std=c++17 $(OPT) -g -fPIC -fvisibility=hidden -pthread $(WARN) \
  -Wno-unknown-pragmas $(SAN) $(if $(SAN),-fno-sanitize=vptr$(comma)function) \
  -DCK_EMULATE -isystem $(CUDA_HOME)/include -Ic_src/drivers/cuda

$(CUDA_EMU)/%.o: c_src/drivers/cuda/%.c $(HEADERS) $(CUDA_EMU_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -DCK_EMULATE -isystem $(CUDA_HOME)/include -c $< -o $@

$(CUDA_EMU)/%.o: c_src/drivers/cuda/%.cu $(HEADERS) $(CUDA_EMU_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CUDA_EMU_CXXFLAGS) -x c++ -c $< -o $@

$(CUDA_EMU)/emu_runtime.o: c_src/drivers/cuda/emu/emu_runtime.cc $(HEADERS) $(CUDA_EMU_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(CUDA_EMU_CXXFLAGS) -c $< -o $@

$(CUDA_EMU_SO): $(CUDA_EMU_OBJ) $(BUILD)/libcascade_core.a
	$(CXX) $(CUDA_EMU_CXXFLAGS) -shared $(if $(SAN),,-Wl,--no-undefined) -o $@ $(CUDA_EMU_OBJ) \
	  $(BUILD)/libcascade_core.a $(LDFLAGS) $(LDLIBS) -ldl

$(CUDA_EMU)/test_cuda_emu: c_src/drivers/cuda/emu/test_cuda_emu.c $(BUILD)/libcascade_core.a \
  $(CUDA_EMU_SO) $(HEADERS)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -DCX_EMU_DRIVER='"$(abspath $(CUDA_EMU_SO))"' -o $@ $< \
	  $(BUILD)/libcascade_core.a $(LDFLAGS) -lcmocka $(LDLIBS) -ldl

.PHONY: test-cuda-emu
DRIVER_TEST_TARGETS += test-cuda-emu
DRIVER_TEST_PROGRAMS += $(CUDA_EMU_SO) $(CUDA_EMU)/test_cuda_emu
DRIVER_TEST_SO += $(CUDA_EMU_SO)
test-cuda-emu: $(CUDA_EMU_SO) $(BUILD)/tests/test_differential $(CUDA_EMU)/test_cuda_emu \
  $(BUILD)/tests/test_cuda_load
	CX_DIFF_DIR=$(CUDA_EMU) CX_DIFF_DRIVERS=cuda CX_DIFF_REQUIRE=cuda $(BUILD)/tests/test_differential
	CX_CUDA_SO=$(CUDA_EMU_SO) $(BUILD)/tests/test_cuda_load
	$(CUDA_EMU)/test_cuda_emu
	CKE_FAIL_LAUNCH=3 $(CUDA_EMU)/test_cuda_emu lost
endif

# The benchmark beside PyTorch (bench/cuda); not part of `all`: make bench-cuda
ifneq ($(strip $(NVCC)),)
.PHONY: bench-cuda
bench-cuda: $(BUILD)/bench_cuda $(CUDA_SO)

$(BUILD)/bench_cuda: bench/cuda/bench_cuda.c $(BUILD)/libcascade_core.a $(HEADERS)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -DCX_BUILD_DIR='"$(abspath $(BUILD))"' -o $@ $< \
	  $(BUILD)/libcascade_core.a $(LDFLAGS) $(LDLIBS) -ldl
endif
