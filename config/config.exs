import Config

# Cascade's own development and test settings. An application that depends on Cascade
# configures it in its own config (see the README); this file is not read then.
if config_env() == :test do
  # the test driver (c_src/drivers/test), built only in the test environment, gives the tests
  # a device without host memory that claims a fixed subset of the ops
  config :cascade, drivers: [:cuda, :opencl, :blas, :test, :cpu], fallback: :warn

  # The tests and doctests are written against the portable driver as the default device; the
  # application's own default, :host (:blas where it loaded), is tested by name
  # (test/cascade_test.exs, "the default device") and every property test runs on both.
  config :cascade, default_device: :cpu

  # CASCADE_CUDA_EMULATOR=1: load the cuda driver's cpu emulator build (c_src/drivers/cuda/emu,
  # built in the test environment where the CUDA toolkit is) as :cuda, so that the tests written
  # for a GPU -- the honesty test, asynchronous downloads, cuda_test's GPU half -- run its code
  if System.get_env("CASCADE_CUDA_EMULATOR") in ["1", "true"] do
    emu = Path.expand("../_build/test/cascade_c/cudaemu/cascade_driver_cuda.so", __DIR__)
    config :cascade, drivers: [{:cuda, emu}, :opencl, :blas, :test, :cpu]
  end

  # PoCL, the OpenCL device of machines without a GPU, caches the kernels it compiles; inside
  # the build tree only the first test run pays for building them (CLBlast's alone take ~10 s)
  if System.get_env("POCL_CACHE_DIR") in [nil, ""],
    do: System.put_env("POCL_CACHE_DIR", Path.expand("../_build/pocl-cache", __DIR__))
end
