# The cost of the negotiation on the smallest call: a one-element add, tensor + tensor, through
# the public API (infer, route with the memoized capability, execute, build the result).
#
#     mix run bench/negotiation.exs [--calls N] [--rounds R]
#
# Prints the best and median ns per call over R rounds of N calls. To compare with a build
# from before the negotiation, run the same script in a checkout of that commit on the same
# machine, alternating, as bench/negotiation.sh does.
{opts, _} = OptionParser.parse!(System.argv(), strict: [calls: :integer, rounds: :integer])
calls = opts[:calls] || 200_000
rounds = opts[:rounds] || 15

a = Cascade.tensor([1.5])
b = Cascade.tensor([2.5])

round = fn ->
  :erlang.garbage_collect()
  t0 = System.monotonic_time(:nanosecond)
  Enum.each(1..calls, fn _ -> Cascade.add(a, b) end)
  (System.monotonic_time(:nanosecond) - t0) / calls
end

round.()
times = Enum.sort(for _ <- 1..rounds, do: round.())
best = hd(times)
median = Enum.at(times, div(rounds, 2))

:io.format("one-element add: best ~.1f ns/call, median ~.1f ns/call (~b rounds of ~b calls)~n", [
  best,
  median,
  rounds,
  calls
])
