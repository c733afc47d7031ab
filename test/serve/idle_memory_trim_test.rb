# frozen_string_literal: true

require "test_helper"
require "json"

# After a burst, a quiet server gives the memory its app freed back to the
# OS (idle_memory_trim). The burst: waves of 40 requests at once, each
# building and dropping 16 MiB of 64 KiB strings, as an app reading
# uploads in chunks does; Ruby frees them at its GCs, glibc keeps the pages.
class IdleMemoryTrimTest < Minitest::Test
  include Tsubame::TestHelpers

  # Each request holds 16 MiB of 64 KiB strings for a moment and keeps a
  # small string between them for good: once the big ones are collected,
  # the heap is full of holes that glibc cannot hand back on its own.
  APP = <<~RUBY
    KEEP = []
    LOCK = Mutex.new
    run lambda { |env|
      if env["PATH_INFO"] == "/gc"
        GC.start
        return [200, {}, ["collected"]]
      end
      big = Array.new(256) do
        chunk = "x" * 65_536
        LOCK.synchronize { KEEP << ("k" * 100) }
        chunk
      end
      sleep 0.01
      [200, {}, ["built \#{big.size}"]]
    }
  RUBY

  # A server with the control app on, to read the engine's memory_trims.
  def with_trimming_server(trim)
    control = free_port
    args = ["-t", "4:4", "--idle-memory-trim", trim, "--control-url", "tcp://127.0.0.1:#{control}", "--control-token", "t"]
    with_server(APP, args: args) { |server| yield server, control }
  end

  def memory_trims(control)
    stats = JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{control}/stats?token=t")))
    stats.fetch("engine").fetch("memory_trims")
  end

  def rss_kib(pid)
    File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i
  end

  # Returns [RSS after the burst (and a GC if `collect`), RSS after
  # `quiet` more seconds, trims counted when the burst ended].
  def burst_then_wait(server, control, quiet, collect:)
    5.times do
      Array.new(40) { Thread.new { server.get("/").body } }.each { |t| assert_equal "built 256", t.value }
    end
    assert_equal "collected", server.get("/gc").body if collect
    trims = memory_trims(control)
    peak = rss_kib(server.pid)
    sleep quiet
    [peak, rss_kib(server.pid), trims]
  end

  # No GC after the burst: the quiet server runs it itself, then trims.
  # (On a loaded machine a pause between two waves can be a quiet spell
  # of its own, so the trims are counted from the burst's end.)
  def test_a_quiet_server_collects_and_gives_memory_back
    with_trimming_server("1") do |server, control|
      peak, quiet, trims = burst_then_wait(server, control, 3, collect: false)
      assert_operator peak, :>, 60_000, "the burst should leave the heap large (#{peak} KiB)"
      assert_operator quiet, :<, peak * 0.6, "RSS #{peak} KiB after the burst, #{quiet} KiB after 3 s quiet"
      assert_equal trims + 1, memory_trims(control), "one trim per quiet spell"
    end
  end

  # Even with the garbage collected, glibc keeps the pages.
  def test_off_keeps_the_memory
    with_trimming_server("off") do |server, control|
      peak, quiet, = burst_then_wait(server, control, 2.5, collect: true)
      assert_operator quiet, :>, peak * 0.8, "RSS #{peak} KiB after the burst, #{quiet} KiB after 2.5 s quiet"
      assert_equal 0, memory_trims(control)
    end
  end
end
