import Config

# Cascade's own development and test settings. An application that depends on Cascade
# configures it in its own config (see the README); this file is not read then.
if config_env() == :test do
  # the test driver (c_src/drivers/test), built only in the test environment, gives the tests
  # a device without host memory that claims a fixed subset of the ops
  config :cascade, drivers: [:cuda, :opencl, :blas, :test, :cpu], fallback: :warn

  # PoCL, the OpenCL device of machines without a GPU, caches the kernels it compiles; inside
  # the build tree only the first test run pays for building them (CLBlast's alone take ~10 s)
  if System.get_env("POCL_CACHE_DIR") in [nil, ""],
    do: System.put_env("POCL_CACHE_DIR", Path.expand("../_build/pocl-cache", __DIR__))
end
