# frozen_string_literal: true

require "test_helper"

# A stop that a trap handler makes while Server#start runs, before the
# engine exists (a cluster worker TERMed by the master as it boots: a stop
# during a refork batch), is carried out once the engine does: the server
# drains at once and #wait returns, instead of serving on with nothing
# left to stop it (the master then never finished stopping).
class StopBeforeStartTest < Minitest::Test
  include Tsubame::TestHelpers

  # Server#stop before #start leaves the state such a trap leaves: stop
  # requested, no engine yet. Run in a child process, as the hang it
  # guards against would hang this one.
  SCRIPT = <<~'RUBY'
    require "tsubame"
    options = Tsubame::Options.new
    options[:binds] = ["tcp://127.0.0.1:0"]
    server = Tsubame::Server.new(->(_env) { [200, {}, ["served"]] }, options)
    server.stop
    server.start
    $stdout.puts "started"
    $stdout.flush
    $stdout.puts "wait returned: #{server.wait}"
  RUBY

  def test_a_stop_before_the_engine_exists_stops_it_once_started
    out_r, out_w = IO.pipe
    pid = Process.spawn(RbConfig.ruby, "-w", "-I#{File.join(ROOT, "lib")}", "-e", SCRIPT,
                        out: out_w, err: out_w, in: File::NULL)
    out_w.close
    output = +""
    # Generous for a loaded machine: the stop itself takes milliseconds.
    status = wait_until(timeout: 20) do
      ready = out_r.wait_readable(0.05) && out_r.read_nonblock(65_536, exception: false)
      output << ready if ready.is_a?(String)
      Process.wait2(pid, Process::WNOHANG)&.last
    end
    flunk "the server was still running 20 s after starting with a stop requested:\n#{output}" unless status
    output << out_r.read
    assert_equal "started\nwait returned: drained\n", output
    assert_equal 0, status.exitstatus
  ensure
    if pid && !status
      Process.kill("KILL", pid)
      Process.wait(pid)
    end
    out_r&.close
  end
end
