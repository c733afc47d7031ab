# frozen_string_literal: true

require "cluster/support"

# A hot restart (USR2, `ctl restart`) must never leave the listening
# sockets unattended: the new code boots and accepts before the old code
# stops accepting. The app sleeps BOOT_SECONDS while it loads, so a
# restart that let clients wait for a boot would show as a request taking
# about that long; every request must take less than MAX_SECONDS.
class HotRestartStallTest < Minitest::Test
  include Tsubame::ClusterHelpers

  BOOT_SECONDS = 1.5
  # Half a boot: a request that waited for one takes at least BOOT_SECONDS,
  # and a loaded machine adds a few hundred ms to a plain one.
  MAX_SECONDS = 0.75

  # Answers "<version> <pid>". The version is read from $VERSION_FILE as
  # the rackup file loads, so rewriting that file shows which processes
  # run new code; while $BROKEN_MARK exists the app fails to load, at the
  # end of its boot. /slow?S creates $SLOW_MARK, then sleeps S seconds.
  APP = <<~RUBY
    sleep #{BOOT_SECONDS}
    raise "broken deploy: \#{ENV["BROKEN_MARK"]} exists" if File.exist?(ENV["BROKEN_MARK"])
    VERSION_SEEN = File.read(ENV["VERSION_FILE"]).strip
    run lambda { |env|
      if env["PATH_INFO"] == "/slow"
        File.write(ENV["SLOW_MARK"], "")
        sleep Float(env["QUERY_STRING"])
      end
      [200, { "content-type" => "text/plain" }, ["\#{VERSION_SEEN} \#{Process.pid}"]]
    }
  RUBY

  # Sends a request every ~10 ms, each on a new loopback connection, and
  # records how long each took and what it got: [seconds, status, body].
  # Bounded in count and time, so a hung server cannot hang the test.
  class Prober
    INTERVAL = 0.01
    LIMIT = 4000
    MAX_RUN = 40.0

    def initialize(port)
      @port = port
      @results = []
      @lock = Mutex.new
      @stop = false
      @thread = Thread.new { run }
    end

    def results
      @lock.synchronize { @results.dup }
    end

    def stop
      @stop = true
      @thread.join
      results
    end

    private

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def run
      deadline = now + MAX_RUN
      until @stop || now > deadline || results.size >= LIMIT
        result = request
        @lock.synchronize { @results << result }
        sleep INTERVAL
      end
    end

    def request
      started = now
      socket = Socket.tcp("127.0.0.1", @port, connect_timeout: 5)
      socket.write("GET / HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
      response = read_response(socket, started + 5)
      [now - started, response[%r{\AHTTP/1\.1 (\d+)}, 1] || "no status", response.split("\r\n\r\n", 2)[1]]
    rescue StandardError => e
      [now - started, e.class.name, e.message]
    ensure
      socket&.close
    end

    def read_response(socket, deadline)
      response = +""
      loop do
        left = deadline - now
        raise Timeout::Error, "no full response in 5 s: #{response.inspect}" if left <= 0 || !socket.wait_readable(left)

        chunk = socket.read_nonblock(65_536, exception: false)
        return response if chunk.nil?

        response << chunk unless chunk == :wait_readable
      end
    end
  end

  def setup
    @dir = Dir.mktmpdir("tsubame-stall")
    @version_file = File.join(@dir, "version")
    @broken_mark = File.join(@dir, "broken")
    @slow_mark = File.join(@dir, "slow")
    File.write(@version_file, "v1")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def app_env
    { "VERSION_FILE" => @version_file, "BROKEN_MARK" => @broken_mark, "SLOW_MARK" => @slow_mark }
  end

  # workers: 0 is single mode, still with the control app (ClusterServer).
  def with_app(workers, &block)
    # Reads an Array body's bytes as they are; Rack 2's Lint hides it (sent chunked).
    with_cluster(APP, workers: workers, env: app_env, lint: Tsubame::TestHelpers::LINT_FORWARDS_BODY, &block)
  end

  def assert_no_stall(results, server)
    failed = results.reject { |_, status, _| status == "200" }
    assert_empty failed, "every request got a 200\n#{server.stdout}\n#{server.stderr}"
    slowest = results.max_by(&:first)
    assert_operator slowest.first, :<, MAX_SECONDS,
                    "the slowest request took #{slowest.first.round(3)} s (#{slowest.inspect}); " \
                    "the app boots in #{BOOT_SECONDS} s\n#{server.stdout}\n#{server.stderr}"
    # The restart takes several seconds (two or three boots), so this many
    # requests means the client kept going all through it.
    assert_operator results.size, :>, 100, "the client ran all along"
  end

  def versions(results)
    results.map { |_, _, body| body.to_s.split.first }
  end

  def served_by(results)
    results.map { |_, _, body| body.to_s.split.last.to_i }
  end

  def test_single_mode_usr2_serves_throughout_and_keeps_the_pid
    with_app(0) do |s|
      assert_equal "v1 #{s.pid}", get(s)
      File.write(@version_file, "v2")
      prober = Prober.new(s.port)
      sleep 0.2
      s.signal("USR2")
      s.wait_until(20, "the re-executed process serving v2") do
        recent = prober.results.last(20)
        recent.size == 20 && recent.all? { |_, _, body| body == "v2 #{s.pid}" }
      end
      stand_ins = served_by(prober.results).uniq - [s.pid]
      s.wait_until(10, "the stand-in to exit") { stand_ins.none? { |pid| s.alive?(pid) } }
      sleep 0.2
      results = prober.stop

      assert_no_stall(results, s)
      assert_equal 1, stand_ins.size, "one stand-in served while this process re-executed: #{stand_ins}"
      assert_equal ["v2"], versions(results).uniq - ["v1"], "the stand-in runs the new code already"
      assert s.alive?(s.pid), "same pid"
      assert_equal "v2 #{s.pid}", get(s)
      assert_equal 2, s.stdout.scan("Tsubame starting in single mode").size, "the process re-executed"
      assert_match(/Hot restart: stand-in \(PID #{stand_ins.first}\) serves the new code/, s.stdout)
      assert_equal 0, s.stop("TERM").exitstatus
    end
  end

  def test_cluster_mode_usr2_serves_throughout_and_keeps_the_pid
    with_app(2) do |s|
      old = s.booted_workers.values
      File.write(@version_file, "v2")
      prober = Prober.new(s.port)
      sleep 0.2
      s.signal("USR2")
      s.wait_until(20, "new workers, the old ones gone") do
        now = s.booted_workers
        now.size == 2 && (now.values & old).empty? && old.none? { |pid| s.alive?(pid) }
      end
      sleep 0.2
      results = prober.stop

      assert_no_stall(results, s)
      assert_equal %w[v1 v2], versions(results).uniq, "old workers served until the new ones took over"
      assert_equal s.pid, s.stats["master_pid"], "same master pid"
      assert_equal 2, s.stdout.scan("Tsubame starting in cluster mode").size, "the master re-executed"
      assert_equal ["v2"], Array.new(5) { get(s).split.first }.uniq
      assert_equal 0, s.stop("TERM").exitstatus
    end
  end

  def test_single_mode_new_code_that_cannot_boot_leaves_the_old_serving
    with_app(0) do |s|
      File.write(@broken_mark, "")
      File.write(@version_file, "v2")
      prober = Prober.new(s.port)
      sleep 0.2
      # The control app's restart and tmp/restart.txt take USR2's path.
      assert_equal "restarting (hot restart)", s.control("restart")["message"]
      s.wait_until(15, "the failure") { s.stderr.include?("hot restart failed") }
      sleep 0.5
      results = prober.stop

      assert_no_stall(results, s)
      assert_equal ["v1 #{s.pid}"], results.map(&:last).uniq, "the old code served all along"
      failure = /hot restart failed: the new code \(stand-in PID \d+\) exited with status 1 before it served/
      assert_match(/#{failure}; the old code keeps serving/, s.stderr)
      assert_match(/broken deploy: .* exists/, s.stderr, "the log says why the new code failed")
      assert_equal 1, s.stdout.scan("Tsubame starting in single mode").size, "no re-exec"

      # Once the deploy is fixed, the next restart goes through.
      File.delete(@broken_mark)
      s.signal("USR2")
      s.wait_until(20, "the new code") { get(s) == "v2 #{s.pid}" }
      assert_equal 0, s.stop("TERM").exitstatus
    end
  end

  def test_single_mode_stop_while_the_stand_in_boots_leaves_no_process_behind
    with_app(0) do |s|
      # Answered once it serves, which is after its traps are in place (the
      # banner comes before them: USR2's default action would kill it).
      get(s)
      s.signal("USR2")
      stand_in = s.wait_until(10, "the stand-in") { s.stdout[/stand-in \(PID (\d+)\) booting/, 1]&.to_i }
      assert_equal 0, s.stop("TERM").exitstatus
      assert_includes s.stdout, "- Goodbye!"
      s.wait_until(5, "the stand-in to be gone") { !s.alive?(stand_in) }
    end
  end

  def test_single_mode_usr2_during_a_stop_does_not_restart
    with_app(0) do |s|
      slow = slow_request(s, 1.5, @slow_mark)
      s.signal("TERM")
      sleep 0.2
      s.signal("USR2")
      status = Timeout.timeout(15) { Process.wait2(s.pid).last }
      assert_equal 0, status.exitstatus
      assert_equal ["200", "v1 #{s.pid}"], slow.value, "the request in flight was answered"
      assert_includes s.stdout, "Hot restart not done: the server is stopping"
      refute_includes s.stdout, "stand-in (PID", "no stand-in was started"
      refute_includes s.stdout, "Restarting"
    end
  end

  # tmp/restart.txt takes USR2's path too, and a restart that failed must
  # not stop the next touch from restarting.
  def test_single_mode_tmp_restart_retries_after_a_failed_restart
    write_file(@dir, "tsubame.rb", "plugin :tmp_restart\n")
    # Reads an Array body's bytes as they are; Rack 2's Lint hides it (sent chunked).
    write_file(@dir, "config.ru", Tsubame::TestHelpers::LINT_FORWARDS_BODY ? Tsubame::TestHelpers.linted(APP) : APP)
    FileUtils.mkdir_p(File.join(@dir, "tmp"))
    log = File.join(@dir, "out.log")
    pid = Process.spawn(app_env, RbConfig.ruby, "-w", Tsubame::TestHelpers::EXE, "-b", "tcp://127.0.0.1:0",
                        "-C", "tsubame.rb", "config.ru", chdir: @dir, out: log, err: File.join(@dir, "err.log"))
    port = wait_for(15, "the banner") { File.read(log)[/Listening on http:\/\/127\.0\.0\.1:(\d+)/, 1] }
    File.write(@broken_mark, "")
    File.write(@version_file, "v2")
    touch_restart_file
    wait_for(15, "the failure") { File.read(File.join(@dir, "err.log")).include?("hot restart failed") }
    File.delete(@broken_mark)
    touch_restart_file
    wait_for(20, "the new code") { Net::HTTP.get(URI("http://127.0.0.1:#{port}/")) == "v2 #{pid}" }
  ensure
    if pid
      Process.kill("TERM", pid)
      Process.wait(pid)
    end
  end

  private

  # The file is looked at once a second and must get a new mtime.
  def touch_restart_file
    sleep 1.1
    FileUtils.touch(File.join(@dir, "tmp/restart.txt"))
  end

  def wait_for(timeout, what)
    deadline = monotonic + timeout
    until (result = yield)
      raise "timed out waiting for #{what}" if monotonic > deadline

      sleep 0.05
    end
    result
  end

  def get(server)
    Net::HTTP.get(URI("http://127.0.0.1:#{server.port}/"))
  end
end
