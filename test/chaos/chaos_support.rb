# frozen_string_literal: true

require "test_helper"
require "cluster/support"

module Tsubame
  # Shared by the fault tests (make chaos): an app that logs when each
  # request starts and ends, and ways to read the workers' counters.
  module ChaosHelpers
    include ClusterHelpers

    # Logs "S id pid" when a request reaches the app and "E id pid" just
    # before it returns (to $REQUEST_LOG), so a test can tell which worker
    # had which request when it was killed. /work?MS sleeps MS ms.
    TRACED_APP = <<~RUBY
      log = ENV.fetch("REQUEST_LOG")
      run lambda { |env|
        id = env["QUERY_STRING"][/id=(\\d+)/, 1]
        File.write(log, "S \#{id} \#{Process.pid}\\n", mode: "a")
        sleep 0.02
        File.write(log, "E \#{id} \#{Process.pid}\\n", mode: "a")
        [200, { "content-type" => "text/plain" }, ["ok \#{id}"]]
      }
    RUBY

    # { id => [pid, ended?] } from the app's log.
    def traced(log)
      File.readlines(log).each_with_object({}) do |line, seen|
        kind, id, pid = line.split
        next unless id

        entry = (seen[id.to_i] ||= [pid.to_i, false])
        entry[1] = true if kind == "E"
      end
    end

    # The sum of one engine counter over the current workers, once every
    # worker has checked in after `since` (a monotonic time): the counters
    # travel with each check-in.
    def engine_total(server, key, workers:)
      summed(server, workers) { |status| status.fetch("engine", {}).fetch(key, 0).to_i }
    end

    def status_total(server, key, workers:)
      summed(server, workers) { |status| status.fetch(key, 0).to_i }
    end

    def summed(server, workers)
      statuses = server.stats["worker_status"].reject { |w| w["stopping"] }.map { |w| w["last_status"] || {} }
      return nil unless statuses.size == workers

      statuses.sum { |status| yield status }
    end

    # Waits until the summed counter equals `expected` (check-ins come
    # every second), and fails naming the last value if it never does.
    def assert_total_eventually(expected, what, timeout: 6)
      value = nil
      deadline = monotonic + timeout
      loop do
        value = yield
        return if value == expected
        break if monotonic > deadline

        sleep 0.2
      end
      flunk "#{what}: expected #{expected}, the workers report #{value.inspect}"
    end

    # A request on a raw socket, for clients that misbehave on purpose.
    def raw_socket(server)
      TCPSocket.new("127.0.0.1", server.port)
    end

    # Closes with a reset (SO_LINGER 0) instead of a FIN, the way a client
    # that crashed or lost its network looks to the server.
    def reset(socket)
      socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
      socket.close
    end
  end
end
