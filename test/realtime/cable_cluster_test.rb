# frozen_string_literal: true

require_relative "support"
require "time"

module Tsubame
  # ActionCable's `tsubame` adapter (lib/action_cable/subscription_adapter/
  # tsubame.rb, docs/REALTIME.md) with the real Rails app and real
  # WebSocket clients: in a cluster a broadcast in either worker reaches
  # the subscribers of both, every worker's adapter hands the messages on
  # in one same order, a worker killed mid-broadcast loses only its own
  # connections, and a stopped worker holds up nobody (its messages are
  # dropped past publish_buffer and counted in the stats).
  class CableClusterTest < Minitest::Test
    include RealtimeSupport
    include ClusterHelpers

    SERVER_ARGS = ["-e", "production", "-t", "5:5"].freeze
    TSUBAME_ADAPTER = { "CABLE_ADAPTER" => "tsubame" }.freeze
    # ActionCable's worker pool of one thread: with more, two messages
    # for one connection may be sent in either order after the adapter
    # handed them on in order (docs/REALTIME.md).
    IN_ORDER = TSUBAME_ADAPTER.merge("CABLE_POOL" => "1").freeze

    def setup
      skip_unless_cable_deps
    end

    def cable_clients(server, count, &block)
      with_clients(url: "ws://127.0.0.1:#{server.port}/cable", http: "http://127.0.0.1:#{server.port}",
                   clients: count, &block)
    end

    def get(server, path)
      Net::HTTP.get(URI("http://127.0.0.1:#{server.port}#{path}"))
    end

    # GETs `path` (with a fresh ?n= each time) until every pid in `pids`
    # answered; returns { pid => body }.
    def from_each_worker(server, pids, path)
      answers = {}
      200.times do |n|
        body = get(server, "#{path}#{path.include?('?') ? '&' : '?'}n=#{n}")
        answers[body.split.first.to_i] ||= body
        return answers if (pids - answers.keys).empty?
      end
      flunk "not every worker answered #{path}: #{answers.keys.inspect} of #{pids.inspect}"
    end

    # Single mode: the process's own subscribers, as with async, through
    # Tsubame.publish; with a worker pool of 1, every client gets the
    # broadcasts in the order they were made. The broadcasting names are
    # Tsubame.publish channels, behind channel_prefix: a publish on
    # "app:chat" reaches the stream of "chat", one on "chat" does not.
    def test_single_mode_delivers_like_async
      with_server(CABLE_APP, args: SERVER_ARGS, env: IN_ORDER.merge("CABLE_PREFIX" => "app")) do |server|
        cable_clients(server, 200) do |clients|
          assert_equal 200, clients.subscribed["subscribed"], clients.subscribed.inspect
          burst = clients.command("burst 10 30", timeout: 45)
          assert_equal 2000, burst["delivered"], burst.inspect
          assert_equal [server.pid.to_s], burst["answered_pids"]
          assert_equal 200, burst["in_get_order"], burst.inspect

          get(server, "/tsubame_publish?channel=chat&id=bare-1")
          get(server, "/tsubame_publish?channel=app:chat&id=prefixed-1")
          prefixed = clients.command("series prefixed 1 20", timeout: 30)["clients"]
          assert_equal [1], prefixed.map { |c| c["got"] }.uniq, "Tsubame.publish on app:chat reached every stream"
          bare = clients.command("series bare 1 0.5", timeout: 15)["clients"]
          assert_equal [0], bare.map { |c| c["got"] }.uniq, "chat is not app:chat"
        end
      end
    end

    # 400 clients over two workers; 20 broadcasts made by whichever worker
    # the GET reached: all 8,000 deliveries, every client in one same
    # order (the master's: two GETs answered by two workers may reach it
    # in either order). Then a series in each worker at
    # once: both workers' adapters handed on every message of both, in the
    # same order, each worker's in the order it broadcast them.
    def test_broadcast_in_either_worker_reaches_subscribers_of_both
      with_cluster(CABLE_APP, workers: 2, args: SERVER_ARGS, env: IN_ORDER) do |server|
        workers = server.booted_workers.values.sort
        cable_clients(server, 400) do |clients|
          subscribed = clients.subscribed
          assert_equal 400, subscribed["subscribed"], subscribed.inspect
          assert_equal workers, subscribed["pids"].keys.map(&:to_i).sort, "both workers hold connections"

          burst = clients.command("burst 20 30", timeout: 45)
          puts "\n  -w 2 burst: #{burst.slice('delivered', 'seconds', 'in_get_order')}" if ENV["REALTIME_REPORT"]
          assert_equal 8000, burst["delivered"], burst.inspect
          assert_equal workers, burst["answered_pids"].map(&:to_i).sort, "both workers broadcast"
          assert burst["same_order"], burst.inspect

          # A series in each worker at once (a GET starts one wherever it
          # lands; until both workers run one).
          series = {}
          40.times do |n|
            break if (workers - series.values.uniq).empty?

            series["o#{n}"] = get(server, "/series?prefix=o#{n}&count=60").to_i
          end
          assert_equal workers, series.values.uniq.sort, "a series in each worker"
          expected = series.size * 60
          heard = nil
          assert wait_until(timeout: 30) {
            heard = from_each_worker(server, workers, "/heard?prefix=o").transform_values { |b| b.split.drop(1) }
            heard.values.all? { |ids| ids.size >= expected }
          }, "both workers heard every series: #{heard&.transform_values(&:size).inspect}"
          first, second = heard.values
          assert_equal expected, first.size
          assert_equal first, second, "one order in every worker"
          series.each_key do |prefix|
            mine = first.select { |id| id.start_with?("#{prefix}-") }
            assert_equal (1..60).map { |i| "#{prefix}-#{i}" }, mine, "#{prefix} in the order it was broadcast"
          end
        end
      end
    end

    # SIGKILL to the worker that is not broadcasting, while a series of
    # 100 broadcasts flows: the other worker's clients get every message
    # and never see a close; the killed worker's clients see their socket
    # close, reconnect (to the survivor, or the replacement once booted)
    # and hear the rest of the series; the master replaces the worker, and
    # then a broadcast reaches everyone again.
    def test_worker_killed_mid_broadcast_loses_only_its_connections
      with_cluster(CABLE_APP, workers: 2, args: SERVER_ARGS, env: TSUBAME_ADAPTER) do |server|
        workers = server.booted_workers.values.sort
        cable_clients(server, 200) do |clients|
          assert_equal 200, clients.subscribed["subscribed"], clients.subscribed.inspect
          speaker = get(server, "/series?prefix=k&count=100&interval=0.03").to_i
          victim = (workers - [speaker]).first
          assert_includes workers, speaker
          sleep 0.5
          Process.kill("KILL", victim)

          result = clients.command("series k 100 30", timeout: 45)["clients"]
          kept = result.select { |c| c["pids"].first == speaker }
          lost = result.select { |c| c["pids"].first == victim }
          refute_empty kept
          refute_empty lost
          summary = ->(list) { list.map { |c| c.slice("pids", "closes", "got", "last") }.uniq.first(5).inspect }
          assert(kept.all? { |c| c["closes"].zero? && c["got"] == 100 },
                 summary.call(kept.reject { |c| c["got"] == 100 }))
          assert(lost.all? { |c| c["closes"].positive? && c["subscribed"] && c["pid"] != victim },
                 summary.call(lost))
          assert(lost.all? { |c| c["last"] == 100 }, "the killed worker's clients heard the end of the series: " \
                                                        "#{summary.call(lost.reject { |c| c["last"] == 100 })}")
          puts "\n  killed mid-series: #{kept.size} kept all 100, #{lost.size} reconnected and heard " \
               "#{lost.sum { |c| c['got'] }} of #{lost.size * 100}" if ENV["REALTIME_REPORT"]

          replacement = server.wait_for_workers(2).values.sort
          refute_includes replacement, victim
          assert_equal 1, server.stats["worker_deaths"]
          burst = clients.command("burst 1 20")
          assert_equal 200, burst["delivered"], burst.inspect
        end
      end
    end

    # websocket_workers 1: every ActionCable client is held by the WebSocket
    # worker, broadcasts made in the HTTP workers reach them all, and
    # when it is killed mid-series its clients reconnect (served by the
    # HTTP workers until its replacement is up) and hear the series' end.
    def test_websocket_worker_holds_every_actioncable_client
      with_cluster(CABLE_APP, workers: 2, args: SERVER_ARGS + ["--websocket-workers", "1"], env: TSUBAME_ADAPTER) do |server|
        ws_pid = server.wait_until(30, "the WebSocket worker") do
          ws = server.stats["websocket_workers"].first
          ws["pid"] if ws&.dig("booted") && server.stdout.include?("go to the WebSocket workers") && server.handing_off?
        end
        http_pids = server.booted_workers.values
        cable_clients(server, 200) do |clients|
          assert_equal({ ws_pid.to_s => 200 }, clients.subscribed["pids"], clients.subscribed.inspect)
          burst = clients.command("burst 5 30")
          assert_equal 1000, burst["delivered"], burst.inspect
          assert_empty burst["answered_pids"].map(&:to_i) - http_pids, "broadcasts made by the HTTP workers"

          # Long enough (9 s) for every client to be back before its end.
          speaker = get(server, "/series?prefix=w&count=300&interval=0.03").to_i
          assert_includes http_pids, speaker
          sleep 0.5
          Process.kill("KILL", ws_pid)
          # "series" waits for the subscribed clients only, and right after
          # the kill none is: first wait until every one is back.
          back = clients.command("reconnected #{ws_pid} 30", timeout: 45)
          assert back["ok"], back.inspect
          result = clients.command("series w 300 30", timeout: 45)["clients"]
          summary = result.map { |c| c.slice("pids", "closes", "last") }.uniq.first(5).inspect
          assert(result.all? { |c| c["closes"].positive? && c["subscribed"] && c["pid"] != ws_pid }, summary)
          assert(result.all? { |c| c["last"] == 300 }, summary)

          server.wait_until(30, "a replacement WebSocket worker") do
            ws = server.stats["websocket_workers"].first
            ws && ws["booted"] && ws["pid"] != ws_pid
          end
          burst = clients.command("burst 1 20")
          assert_equal 200, burst["delivered"], burst.inspect
        end
      end
    end

    # A worker that does not read (SIGSTOP) holds up neither the master
    # nor the other worker: the other's clients get a 200-message series
    # (4 KB each, 10 ms apart: 800 KB, past what the socket and
    # publish_buffer 262144 hold) while it is stopped, and the master counts what it
    # dropped for the stopped one, in total and per worker. Once it runs
    # again and has worked through its backlog, it hears new broadcasts.
    def test_stopped_worker_holds_up_nobody_and_its_drops_are_counted
      with_cluster(CABLE_APP, workers: 2, args: SERVER_ARGS, env: TSUBAME_ADAPTER,
                              config: "publish_buffer 262_144\n") do |server|
        workers = server.booted_workers.values.sort
        cable_clients(server, 60) do |clients|
          assert_equal 60, clients.subscribed["subscribed"], clients.subscribed.inspect
          assert_equal workers, clients.subscribed["pids"].keys.map(&:to_i).sort, "both workers hold connections"
          stopped, speaker = workers
          begin
            stop_process(stopped)
            assert_equal speaker, get(server, "/series?prefix=p&count=200&pad=4000&interval=0.01").to_i
            result = clients.command("series p 200 30 #{speaker}", timeout: 45)["clients"]
            on_speaker = result.select { |c| c["pid"] == speaker }
            refute_empty on_speaker
            assert(on_speaker.all? { |c| c["got"] == 200 }, lambda {
              "#{on_speaker.map { |c| c['got'] }.inspect}; listeners: " \
                "#{server.stats['worker_status'].map { |w| w['last_status']['publish'] }.inspect}; master: " \
                "#{server.stats['publish'].inspect} #{server.stats['worker_status'].map { |w| w['publish_dropped'] }.inspect}"
            })

            stats = server.stats
            assert_operator stats["publish"]["dropped"], :>, 0, stats["publish"].inspect
            dropped = stats["worker_status"].to_h { |w| [w["pid"], w["publish_dropped"]] }
            assert_operator dropped[stopped], :>, 0, dropped.inspect
            assert_equal 0, dropped[speaker], dropped.inspect
          ensure
            begin
              Process.kill("CONT", stopped)
            rescue Errno::ESRCH
              nil # killed by the master as hung (worker_timeout): the failure above says why
            end
          end

          # Back, it first works through what waited for it (the master's
          # outbox, its socket, its listener queue), and a broadcast in that
          # moment may still be dropped for it; once through, it hears them.
          resumed = Time.now
          caught_up = wait_until(timeout: 20) do
            stats = server.stats
            mine = stats["worker_status"].find { |w| w["pid"] == stopped }
            stats["publish"]["buffered_bytes"].zero? && mine && mine["last_checkin"] &&
              Time.iso8601(mine["last_checkin"]) > resumed && mine["last_status"]["publish"]["queued"].zero?
          end
          assert caught_up, "the resumed worker caught up: #{server.stats.slice('publish', 'worker_status').inspect}"
          burst = clients.command("burst 1 20")
          assert_equal 60, burst["delivered"], burst.inspect
        end
      end
    end

    # USR1: old workers keep hearing broadcasts until they stop, and the
    # clients that reconnect to the new workers hear the broadcasts made
    # in either new worker.
    def test_phased_restart_new_workers_broadcast_to_each_other
      with_cluster(CABLE_APP, workers: 2, args: SERVER_ARGS, env: TSUBAME_ADAPTER) do |server|
        old = server.booted_workers.values.sort
        cable_clients(server, 100) do |clients|
          assert_equal 100, clients.subscribed["subscribed"], clients.subscribed.inspect
          server.signal("USR1")
          result = clients.command("reconnected #{old.join(',')} 60", timeout: 75)
          assert result["ok"], result.inspect
          new_pids = server.wait_for_workers(2, phase: 1).values.sort
          assert_equal new_pids, result["pids"].keys.map(&:to_i).sort, "clients on both new workers\n#{server.stderr}"

          burst = clients.command("burst 10 30", timeout: 45)
          assert_equal 1000, burst["delivered"], burst.inspect
          assert_equal new_pids, burst["answered_pids"].map(&:to_i).sort, "both new workers broadcast"
        end
      end
    end
  end
end
