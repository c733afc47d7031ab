# frozen_string_literal: true

require_relative "chaos_support"

# Running out of file descriptors. With a low limit from the start, the
# engine derives max_connections from it and answers the excess with 503
# (counted as shed connection_limit) instead of failing accept. With the
# limit lowered under a running worker, accept fails with EMFILE: the
# engine logs it (at most a line a second), counts accept_errors, backs
# off, and the clients wait in the backlog until descriptors are free
# again; none is lost.
class DescriptorsChaos < Minitest::Test
  include Tsubame::ChaosHelpers

  def test_a_low_descriptor_limit_sheds_excess_connections_with_503
    config = "Process.setrlimit(:NOFILE, 256)\n"
    with_cluster(PID_APP, workers: 1, config: config, args: %w[-t 4:4]) do |s|
      worker = s.booted_workers.fetch(0)
      assert_equal "256", File.read("/proc/#{worker}/limits")[/Max open files\s+(\d+)/, 1]
      idle = Array.new(200) { raw_socket(s) }
      shed = answered_within(idle, 2)
      assert_equal 200 - 128, shed.size, "max_connections is the limit less 128"
      shed.each { |answer| assert_match(%r{\AHTTP/1\.1 503 .*connection_limit}m, answer) }
      idle.each(&:close)
      s.wait_until(5, "the idle connections to close") { engine_total(s, "connections_active", workers: 1).to_i.zero? }
      assert_equal worker, get_pid(s), "served again once connections closed"
      assert_total_eventually(shed.size, "shed connection_limit") do
        summed(s, 1) { |status| status.dig("engine", "shed", "connection_limit").to_i }
      end
      assert_equal shed.size, s.stderr.scan(/503 connection_limit from 127\.0\.0\.1/).size
    end
  end

  # What the server sent, within `seconds`, on the sockets it answered.
  def answered_within(sockets, seconds)
    answers = {}
    deadline = monotonic + seconds
    while (left = deadline - monotonic).positive?
      ready, = IO.select(sockets - answers.keys, nil, nil, left)
      break unless ready

      ready.each { |socket| answers[socket] = socket.read_nonblock(4096, exception: false) }
    end
    answers.values
  end

  def test_descriptors_running_out_under_a_running_worker
    with_cluster(PID_APP, workers: 1, args: %w[-t 4:4]) do |s|
      worker = s.booted_workers.fetch(0)
      load = Tsubame::LoadLoop.new(s.port, clients: 2)
      sleep 0.5
      load.stop
      assert_empty load.failures
      open = Dir.children("/proc/#{worker}/fd").size
      limit = open + 6
      assert system("prlimit", "--pid", worker.to_s, "--nofile=#{limit}:#{limit}"), "prlimit"
      idle = Array.new(20) { raw_socket(s) }
      out_at = monotonic
      s.wait_until(5, "accept to fail") { s.stderr.include?("accept failed: Too many open files") }
      # A client that arrives now waits in the backlog instead of failing.
      waiting = Thread.new do
        http = Net::HTTP.new("127.0.0.1", s.port)
        http.read_timeout = 20
        http.max_retries = 0
        http.start { |h| h.get("/") }.then { |response| [response.code, response.body.to_i] }
      rescue StandardError => e
        [e.class.name, e.message]
      end
      sleep 1
      assert waiting.alive?, "the client waits while no descriptor is free"
      idle.each(&:close)
      assert_equal ["200", worker], waiting.value, "served once descriptors were free"
      assert_equal worker, get_pid(s)
      # Accepting again is logged with the number of failures since the
      # last such line; a line due inside the rate limit waits for a later
      # accept, hence the GETs. In the end every failure counted in
      # accept_errors (reported at each check-in) is in the log.
      s.wait_until(8, "the log to account for every accept_errors") do
        get_pid(s)
        logged = recovered_counts(s).sum
        logged.positive? && logged == engine_total(s, "accept_errors", workers: 1)
      end
      failed_lines = s.stderr.scan(/accept failed: Too many open files/).size
      # Retried every 50 ms for over a second, logged at most once a second.
      assert_operator recovered_counts(s).sum, :>, 2 * failed_lines, "failures are counted, not all logged"
      assert_operator failed_lines, :<=, (monotonic - out_at).ceil + 1, "at most a line a second"
      assert s.alive?(worker), "the worker survived"
      assert_equal 0, s.stats["worker_deaths"]
    end
  end

  def recovered_counts(server)
    server.stderr.scan(/accepting connections again after (\d+) failed accepts/).flatten.map(&:to_i)
  end
end
