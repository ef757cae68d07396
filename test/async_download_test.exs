defmodule CascadeAsyncDownloadTest do
  # Downloads from a device whose driver has download_async (cuda; here the test driver, whose
  # completion thread copies and calls back): the NIF returns :cascade_async at once and the
  # bytes come as a message, so no scheduler waits for the device. Two 16-byte prefixes make
  # the test driver slow (300 ms) or fail a download, one makes it refuse (synchronous then).
  # Not async: the download counters are node-wide.
  use ExUnit.Case, async: false

  @slow "cx-test:slow-dl!"
  @fail "cx-test:fail-dl!"
  @sync "cx-test:sync-dl!"

  defp counts do
    {started, completed, undelivered} = Cascade.Native.async_downloads()
    %{started: started, completed: completed, undelivered: undelivered}
  end

  defp wait_until(fun, ms \\ 10_000, what \\ fn -> "" end) do
    cond do
      fun.() ->
        :ok

      ms <= 0 ->
        flunk("timed out waiting" <> what.())

      true ->
        Process.sleep(5)
        wait_until(fun, ms - 5, what)
    end
  end

  # The test device's bytes back to at most what was live before the scenario: at most, since
  # the count is node-wide and a tensor another process held may go meanwhile (a full run once
  # timed out waiting for equality beside a busy loop on each core).
  defp wait_for_bytes(live) do
    wait_until(fn -> test_bytes() <= live end, 10_000, fn ->
      ": the test device holds #{test_bytes()} bytes, #{live} before the scenario"
    end)
  end

  # every download started has completed
  defp settle do
    wait_until(fn ->
      %{started: s, completed: c} = counts()
      s == c
    end)
  end

  # A scenario that must act while a slow (300 ms) download is pending returns :missed when the
  # download had completed by the time it acted (read after the act: a busy host can deschedule
  # this process past the window); it is run again then, up to five times.
  defp while_pending(scenario, tries \\ 5) do
    case scenario.() do
      :ok ->
        :ok

      :missed when tries > 1 ->
        settle()
        while_pending(scenario, tries - 1)

      :missed ->
        flunk("the slow download completed before the test could act on it, five times")
    end
  end

  # The counters are node-wide: a download another module started (a process that exited with
  # its download still pending, say) may complete during a test and count in its difference.
  # Each test starts once every download started before it has completed.
  setup do
    settle()
    :ok
  end

  defp pending?(before), do: counts().completed == before.completed

  defp test_bytes, do: Cascade.memory()[:test][:bytes]

  defp on_test(bin), do: Cascade.from_binary(bin, :u8, {byte_size(bin)}, device: :test)

  test "to_binary on the test device returns from the NIF at once and the bytes come as a message" do
    t = Cascade.tensor([1.0, 2.0, 3.0], device: :test)
    expected = <<1.0::float-32-native, 2.0::float-32-native, 3.0::float-32-native>>
    before = counts()

    tag = make_ref()
    assert Cascade.Native.to_binary(t.ref, nil, tag) == :cascade_async
    assert_receive {:cascade_download, ^tag, ^expected}, 5_000

    assert Cascade.to_binary(t) == expected
    assert Cascade.to_binary(t, limit: 2) == binary_part(expected, 0, 8)
    assert Cascade.to_list(t) == [1.0, 2.0, 3.0]
    assert Cascade.dump(t) == {:f32, {3}, expected}
    assert inspect(t) =~ "[1.0, 2.0, 3.0]"
    assert inspect(t, limit: 2) =~ "[1.0, 2.0, ...]"

    settle()
    later = counts()
    # the direct call, to_binary twice, to_list, dump, the two inspects
    assert later.started - before.started == 7
    assert later.completed - before.completed == 7
    assert later.undelivered == before.undelivered
  end

  test "above 1 MiB too: the NIF answers :cascade_async instead of moving to a dirty scheduler" do
    # the synchronous path reschedules a download this size onto a dirty CPU scheduler, whose
    # answer would be the binary itself
    data = :crypto.strong_rand_bytes(3 * 1024 * 1024)
    t = on_test(data)
    tag = make_ref()
    assert Cascade.Native.to_binary(t.ref, nil, tag) == :cascade_async
    assert_receive {:cascade_download, ^tag, ^data}, 5_000
    assert Cascade.to_binary(t) == data
    settle()
  end

  test "the cpu device, an empty tensor and a driver's refusal take the synchronous path" do
    before = counts()

    assert Cascade.Native.to_binary(Cascade.tensor([1, 2], type: :u8).ref, nil, make_ref()) ==
             <<1, 2>>

    assert Cascade.to_binary(Cascade.tensor([], type: :u8, device: :test)) == <<>>
    assert Cascade.to_binary(Cascade.tensor([1, 2], type: :u8, device: :test), limit: 0) == <<>>

    bin = @sync <> :binary.copy(<<7>>, 2 * 1024 * 1024)
    assert Cascade.to_binary(on_test(bin)) == bin
    assert counts().started == before.started
  end

  test "a failure in the driver raises Cascade.Error naming the driver" do
    t = on_test(@fail <> "and the rest")
    error = assert_raise Cascade.Error, fn -> Cascade.to_binary(t) end
    assert error.driver == :test
    assert error.code == :device_error
    assert error.message =~ "injected"
    assert_raise Cascade.Error, ~r/injected/, fn -> Cascade.to_list(t) end
    settle()
  end

  test "a download that outlasts the timeout raises Cascade.Error instead of waiting forever" do
    bin = @slow <> "0123456789"
    t = on_test(bin)

    error = assert_raise Cascade.Error, fn -> Cascade.to_binary(t, timeout: 20) end
    assert error.driver == :test
    assert error.code == :timeout
    assert error.message =~ "did not complete within 20 ms"

    # the late reply arrives as a stray message (documented)
    assert_receive {:cascade_download, _tag, ^bin}, 5_000
    assert Cascade.to_binary(t, timeout: :infinity) == bin

    assert_raise ArgumentError, ~r/expected timeout/, fn -> Cascade.to_binary(t, timeout: -1) end
    settle()
  end

  test "many processes read many tensors at once" do
    datas = for k <- 1..16, do: :crypto.strong_rand_bytes(1_000 * k + 3)
    tensors = Enum.map(datas, &on_test/1)
    pairs = Enum.zip(tensors, datas)
    before = counts()

    results =
      1..64
      |> Task.async_stream(
        fn i ->
          {t, data} = Enum.at(pairs, rem(i, length(pairs)))
          for _ <- 1..10, do: Cascade.to_binary(t) == data
        end,
        max_concurrency: 64,
        timeout: 60_000
      )
      |> Enum.flat_map(fn {:ok, oks} -> oks end)

    assert length(results) == 640
    assert Enum.all?(results)
    settle()
    assert counts().started - before.started == 640
  end

  test "a process killed while its download is pending takes nothing down" do
    data = @slow <> :crypto.strong_rand_bytes(100_000)
    t = on_test(data)

    while_pending(fn ->
      before = counts()
      {pid, mref} = spawn_monitor(fn -> Cascade.to_binary(t) end)
      wait_until(fn -> counts().started == before.started + 1 end)
      Process.exit(pid, :kill)
      assert_receive {:DOWN, ^mref, :process, ^pid, reason}
      # still pending once the process is gone (killed, not done): its reply cannot be delivered
      pending = reason == :killed and pending?(before)
      settle()

      if pending do
        assert counts().undelivered == before.undelivered + 1
        :ok
      else
        :missed
      end
    end)

    assert Cascade.to_binary(t) == data
  end

  test "a killed process that held the only reference: the tensor goes after the download" do
    while_pending(fn ->
      :erlang.garbage_collect()
      settle()
      live = test_bytes()
      before = counts()

      {pid, mref} =
        spawn_monitor(fn ->
          Cascade.to_binary(on_test(@slow <> :binary.copy(<<1>>, 4 * 1024 * 1024)))
        end)

      wait_until(fn -> counts().started == before.started + 1 end)
      Process.exit(pid, :kill)
      assert_receive {:DOWN, ^mref, :process, ^pid, reason}
      # the process and its heap are gone, the download still holds the tensor
      held = test_bytes()
      pending = reason == :killed and pending?(before)
      settle()
      wait_for_bytes(live)

      if pending do
        # held, less what is live now: at least the tensor (bytes node-wide only go down here)
        assert held - test_bytes() >= 4 * 1024 * 1024
        assert counts().undelivered == before.undelivered + 1
        :ok
      else
        :missed
      end
    end)
  end

  test "free/1 while a download is pending: the download completes, the memory goes after it" do
    while_pending(fn ->
      :erlang.garbage_collect()
      settle()
      live = test_bytes()
      data = @slow <> :crypto.strong_rand_bytes(2 * 1024 * 1024)
      t = on_test(data)
      before = counts()

      task = Task.async(fn -> Cascade.to_binary(t) end)
      wait_until(fn -> counts().started == before.started + 1 end)
      assert Cascade.free(t) == :ok
      assert Cascade.Native.freed?(t.ref)
      held = test_bytes()
      pending = pending?(before)

      assert Task.await(task, 10_000) == data
      settle()
      wait_for_bytes(live)
      assert_raise ArgumentError, ~r/freed/, fn -> Cascade.to_binary(t) end

      if pending do
        # pinned by the pending download until it completed (held, less what is live now: a
        # tensor another process dropped may go meanwhile, as CI saw once with 12 bytes)
        assert held - test_bytes() >= byte_size(data)
        :ok
      else
        :missed
      end
    end)
  end

  describe "transfer to the cpu" do
    test "is a download: the new tensor comes as a message" do
      data = :crypto.strong_rand_bytes(100_003)
      t = on_test(data)
      before = counts()

      tag = make_ref()
      assert Cascade.Native.transfer(t.ref, 0, tag) == :cascade_async
      assert_receive {:cascade_download, ^tag, {ref, {100_003}, {:u, 8}, :cpu}}, 5_000
      assert Cascade.Native.to_binary(ref, nil, make_ref()) == data

      c = Cascade.transfer(t, :cpu)
      assert %{device: :cpu, shape: {100_003}, type: {:u, 8}} = c
      assert Cascade.to_binary(c) == data
      settle()
      assert counts().started - before.started == 2

      # an empty tensor, and the other way, stay synchronous
      assert Cascade.to_list(Cascade.transfer(on_test(<<>>), :cpu)) == []
      assert Cascade.to_binary(Cascade.transfer(c, :test)) == data
      assert counts().started - before.started == 3
    end

    test "a failure raises Cascade.Error naming the driver; a freed tensor raises ArgumentError" do
      error = assert_raise Cascade.Error, fn -> Cascade.transfer(on_test(@fail <> "x"), :cpu) end
      assert error.driver == :test
      assert error.code == :device_error

      t = on_test("abc")
      Cascade.free(t)
      assert_raise ArgumentError, ~r/freed/, fn -> Cascade.transfer(t, :cpu) end
      settle()
    end

    test "a caller killed while the copy is pending: the new tensor is dropped with the reply" do
      t = on_test(@slow <> :binary.copy(<<3>>, 3 * 1024 * 1024))

      while_pending(fn ->
        :erlang.garbage_collect()
        settle()
        cpu_live = Cascade.memory()[:cpu][:bytes]
        before = counts()

        {pid, mref} = spawn_monitor(fn -> Cascade.transfer(t, :cpu) end)
        wait_until(fn -> counts().started == before.started + 1 end)
        held = Cascade.memory()[:cpu][:bytes]
        Process.exit(pid, :kill)
        assert_receive {:DOWN, ^mref, :process, ^pid, reason}
        pending = reason == :killed and pending?(before)
        settle()
        wait_until(fn -> Cascade.memory()[:cpu][:bytes] <= cpu_live end)

        if pending do
          # the new tensor exists from the start of the copy, and goes with the reply (held, less
          # what is live now: the count is node-wide and only goes down meanwhile)
          assert held - Cascade.memory()[:cpu][:bytes] >= 3 * 1024 * 1024
          assert counts().undelivered == before.undelivered + 1
          :ok
        else
          :missed
        end
      end)

      assert Cascade.to_binary(Cascade.transfer(t, :cpu), limit: 16) == @slow
    end
  end

  test "downloads, kills and frees mixed at random" do
    :erlang.garbage_collect()
    settle()
    live = test_bytes()

    for round <- 1..30 do
      data = :crypto.strong_rand_bytes(10_000 + round)
      t = on_test(data)
      parent = self()

      readers =
        for _ <- 1..4 do
          spawn(fn ->
            result =
              try do
                Cascade.to_binary(t)
              rescue
                e in ArgumentError -> e
              end

            send(parent, {:read, self(), result})
          end)
        end

      killed =
        case rem(round, 3) do
          0 ->
            Cascade.free(t)
            nil

          1 ->
            victim = Enum.random(readers)
            Process.exit(victim, :kill)
            victim

          2 ->
            nil
        end

      # every reader but the killed one answers (it may have answered before it was killed)
      for pid <- readers, pid != killed do
        assert_receive {:read, ^pid, result}, 30_000
        assert result == data or match?(%ArgumentError{}, result)
      end

      Cascade.free(t)
    end

    settle()
    wait_for_bytes(live)
  end
end
