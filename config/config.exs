import Config

# Cascade's own development and test settings. An application that depends on Cascade
# configures it in its own config (see the README); this file is not read then.
if config_env() == :test do
  # the test driver (c_src/drivers/test), built only in the test environment, gives the tests
  # a device without host memory that claims a fixed subset of the ops
  config :cascade, drivers: [:cuda, :opencl, :blas, :test, :cpu], fallback: :warn
end
