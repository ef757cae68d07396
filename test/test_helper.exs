# Tests that call into the NIF can take the whole VM down if the C side has a bug; run with
# `mix test --trace` to see which test was running when that happens.
ExUnit.start()
