# frozen_string_literal: true

require_relative "chaos_support"

# Workers killed (SIGKILL) or frozen (SIGSTOP) under continuous load: the
# master replaces them, the other workers keep serving, and only requests
# that were in flight on the hit worker fail; every death is in the log
# and in the master's stats.
class WorkerKillChaos < Minitest::Test
  include Tsubame::ChaosHelpers

  CLIENTS = 4

  def test_workers_killed_every_second_and_a_half
    in_tmpdir do |dir|
      log = File.join(dir, "requests.log")
      File.write(log, "")
      with_cluster(TRACED_APP, workers: 2, args: %w[-t 4:4], env: { "REQUEST_LOG" => log }) do |s|
        load = Tsubame::LoadLoop.new(s.port, clients: CLIENTS)
        sleep 1
        kills = []
        6.times do |round|
          index = round % 2
          pid = s.wait_for_workers(2, timeout: 20).fetch(index)
          before = monotonic
          Process.kill("KILL", pid)
          kills << { pid: pid, index: index, before: before, after: monotonic }
          sleep 1.5
        end
        s.wait_for_workers(2, timeout: 20)
        sleep 1
        load.stop

        assert_operator load.ok.size, :>, 100, "the load kept being served"
        seen = traced(log)
        killed = kills.map { |k| k[:pid] }
        load.failures.each do |failure|
          hit = kills.find { |k| failure.started <= k[:after] && failure.finished >= k[:before] }
          assert hit, "request #{failure.id} failed (#{failure.detail}) with no kill while it was in flight"
          pid, = seen[failure.id]
          # It either reached the app on the killed worker, or never reached
          # the app (accepted by the worker as it died).
          assert(pid.nil? || killed.include?(pid), "request #{failure.id} failed on pid #{pid}, which lived on")
        end
        kills.each do |k|
          in_flight = load.all.count { |r| r.started <= k[:after] && r.finished >= k[:before] }
          failed = load.failures.count { |r| r.started <= k[:after] && r.finished >= k[:before] }
          assert_operator failed, :<=, in_flight
          # Each client has one request at a time: it loses at most that one.
          assert_operator failed, :<=, CLIENTS
        end
        assert_operator load.failures.size, :<=, kills.size * CLIENTS

        out = s.stdout + s.stderr
        kills.each do |k|
          assert_match(/Worker #{k[:index]} \(PID: #{k[:pid]}\) died: killed by SIGKILL; starting a replacement/, out)
        end
        booted = out.scan(Tsubame::ClusterServer::BOOTED).map { |_, pid| pid.to_i }
        assert_equal 2 + kills.size, booted.uniq.size, "one replacement booted per kill"
        assert_equal kills.size, s.stats["worker_deaths"]
        assert_equal 0, s.stats["worker_kills"]
        puts "\n  SIGKILL x#{kills.size}: #{load.ok.size} ok, #{load.failures.size} failed " \
             "(all in flight on a killed worker)"
      end
    end
  end

  def test_a_frozen_worker_is_killed_as_hung_and_replaced
    in_tmpdir do |dir|
      log = File.join(dir, "requests.log")
      File.write(log, "")
      config = "worker_timeout 3\n"
      with_cluster(TRACED_APP, workers: 2, config: config, args: %w[-t 4:4], env: { "REQUEST_LOG" => log }) do |s|
        load = Tsubame::LoadLoop.new(s.port, clients: CLIENTS)
        sleep 1
        frozen = s.wait_for_workers(2).fetch(0)
        stopped_at = monotonic
        Process.kill("STOP", frozen)
        s.wait_until(15, "the frozen worker to be replaced") do
          !s.alive?(frozen) && s.booted_workers.size == 2 && !s.booted_workers.value?(frozen)
        end
        sleep 1
        load.stop

        during = load.all.select { |r| r.started > stopped_at + 0.5 && r.finished < stopped_at + 3 }
        refute_empty during.select { |r| r.outcome == :ok }, "the other worker served while one was frozen"
        # A client waiting on the frozen worker is stuck until the master
        # kills it, so each client loses at most one request.
        assert_operator load.failures.size, :<=, CLIENTS
        seen = traced(log)
        load.failures.each do |failure|
          assert_operator failure.started, :<=, stopped_at + 0.1, "request #{failure.id} started after the freeze"
          pid, = seen[failure.id]
          assert(pid.nil? || pid == frozen, "request #{failure.id} failed on pid #{pid}")
        end
        out = s.stdout + s.stderr
        assert_match(/Worker 0 \(PID: #{frozen}\) has not checked in for [\d.]+s \(worker_timeout 3.0\); hung; killing it/,
                     out)
        assert_match(/Worker 0 \(PID: #{frozen}\) died: killed by SIGKILL; starting a replacement/, out)
        assert_equal 1, s.stats["worker_kills"]
        puts "\n  SIGSTOP: #{load.ok.size} ok, #{load.failures.size} failed (stuck on the frozen worker)"
      end
    end
  end
end
