# frozen_string_literal: true

require_relative "support"

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

    # Single mode: the adapter is the async one, through Tsubame.publish.
    def test_single_mode_delivers_like_async
      with_server(CABLE_APP, args: SERVER_ARGS, env: TSUBAME_ADAPTER) do |server|
        cable_clients(server, 200) do |clients|
          assert_equal 200, clients.subscribed["subscribed"], clients.subscribed.inspect
          burst = clients.command("burst 10 30", timeout: 45)
          assert_equal 2000, burst["delivered"], burst.inspect
          assert_equal [server.pid.to_s], burst["answered_pids"]
        end
      end
    end

    # 400 clients over two workers; 20 broadcasts made by whichever worker
    # the GET reached: all 8,000 deliveries. Then a series in each worker at
    # once: both workers' adapters handed on every message of both, in the
    # same order, each worker's in the order it broadcast them.
    def test_broadcast_in_either_worker_reaches_subscribers_of_both
      with_cluster(CABLE_APP, workers: 2, args: SERVER_ARGS, env: TSUBAME_ADAPTER) do |server|
        workers = server.booted_workers.values.sort
        cable_clients(server, 400) do |clients|
          subscribed = clients.subscribed
          assert_equal 400, subscribed["subscribed"], subscribed.inspect
          assert_equal workers, subscribed["pids"].keys.map(&:to_i).sort, "both workers hold connections"

          burst = clients.command("burst 20 30", timeout: 45)
          puts "\n  -w 2 burst: #{burst.inspect}" if ENV["REALTIME_REPORT"]
          assert_equal 8000, burst["delivered"], burst.inspect
          assert_equal workers, burst["answered_pids"].map(&:to_i).sort, "both workers broadcast"

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
  end
end
