# frozen_string_literal: true

require "test_helper"
require "json"
require "cluster/support"
require "upgrade/support"

# websocket_workers (docs/REALTIME.md): in cluster mode more workers serve
# every WebSocket connection; the HTTP workers hand them each upgrade
# request they read, socket and bytes.
class WebsocketWorkersTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::ClusterHelpers

  # A rack.upgrade handler that says, on open, which process serves it and
  # what the request looked like there; "pid" asks again. Plain requests
  # answer the pid.
  APP = <<~'RUBY'
    require "json"
    handler = Class.new do
      def initialize(env)
        @seen = { "pid" => Process.pid, "query" => env["QUERY_STRING"], "x_test" => env["HTTP_X_TEST"],
                  "remote_addr" => env["REMOTE_ADDR"], "server_port" => env["SERVER_PORT"],
                  "path" => env["PATH_INFO"] }
      end

      def on_open(conn)
        conn.write(JSON.generate(@seen))
      end

      def on_message(conn, data)
        conn.write(data == "pid" ? Process.pid.to_s : data)
      end
    end
    run lambda { |env|
      if env["rack.upgrade?"] == :websocket
        env["rack.upgrade"] = handler.new(env)
        [200, {}, []]
      else
        pid = Process.pid.to_s
        [200, { "content-type" => "text/plain", "content-length" => pid.bytesize.to_s }, [pid]]
      end
    }
  RUBY

  CONFIG = "worker_check_interval 0.5\n"

  HANDED = "WebSocket connections go to the WebSocket workers"

  # Returns the server and the pids of its `count` WebSocket workers once
  # all have booted and the HTTP workers were told to hand upgrades over.
  # config and args: more lines for the config file, more flags.
  def start(count = 1, config: "", args: [])
    server = Tsubame::ClusterServer.new(APP, workers: 2, config: CONFIG + config,
                                             args: ["--websocket-workers", count.to_s, *args])
    [server, wait_for_websocket_workers(server, count)]
  end

  # The pids of `count` booted WebSocket workers, none of `old`, once the
  # HTTP workers were told `handoffs` times to hand upgrades over.
  def wait_for_websocket_workers(server, count, old: [], handoffs: 1)
    server.wait_until(20, "#{count} booted WebSocket workers") do
      pids = server.serving(server.stats["websocket_workers"]).map { |w| w["pid"] } - old
      pids if pids.size == count && server.stdout.scan(HANDED).size >= handoffs && server.handing_off?
    end
  end

  def ws_client(server, **opts)
    client = Tsubame::UpgradeSupport::Client.new(server.port, **opts)
    assert client.accepted?, client.response_head
    client
  end

  def opened(client)
    JSON.parse(client.read_message || flunk("no message after the handshake"))
  end

  def test_websocket_connections_go_to_the_websocket_workers_and_plain_requests_never_do
    server, ws_pids = start(2)
    stats = server.stats
    assert_equal 2, stats["workers"], "Puma's worker count is the HTTP workers'"
    assert_equal %w[http http], stats["worker_status"].map { |w| w["role"] }
    assert_equal [[-1, "websocket"], [-2, "websocket"]], stats["websocket_workers"].map { |w| w.values_at("index", "role") }
    assert_match(/WebSocket worker 2 \(PID: \d+\) booted/, server.stdout)
    assert_equal [true, true], stats["worker_status"].map { |w| w.dig("last_status", "engine", "handoff_on") }
    # A WebSocket worker has nothing to hand off (once it has checked in).
    ws_handoff = server.wait_until(5, "the WebSocket workers' check-ins") do
      seen = server.stats["websocket_workers"].map { |w| w.dig("last_status", "engine", "handoff_on") }
      seen unless seen.include?(nil)
    end
    assert_equal [false, false], ws_handoff
    http_pids = server.booted_workers.values
    assert_empty http_pids & ws_pids

    plain = Array.new(20) { get_pid(server) }
    assert((plain - http_pids).empty?, "plain requests served by #{plain.uniq} (HTTP workers #{http_pids})")

    10.times do |i|
      client = ws_client(server, path: "/ws/#{i}?n=#{i}", headers: { "X-Test" => "t#{i}" })
      seen = opened(client)
      assert_includes ws_pids, seen["pid"], "connection #{i} in #{seen["pid"]}"
      assert_equal "n=#{i}", seen["query"]
      assert_equal "/ws/#{i}", seen["path"]
      assert_equal "t#{i}", seen["x_test"]
      assert_equal "127.0.0.1", seen["remote_addr"]
      assert_equal server.port.to_s, seen["server_port"]
      client.text("pid")
      assert_equal seen["pid"].to_s, client.read_message
      client.close
    end

    # A kept-alive connection upgrades after a plain request, and a frame
    # the client sent right behind the upgrade request (in the same write)
    # goes over with it.
    sock = server.socket
    sock.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    head = +""
    Timeout.timeout(5) { head << sock.readpartial(4096) until head.match?(/\r\n\r\n\d+\z/) }
    assert_match(/\AHTTP\/1.1 200/, head)
    assert_includes server.booted_workers.values, head[/\d+\z/].to_i
    key = Base64.strict_encode64(Random.bytes(16))
    sock.write("GET /later HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" \
               "Sec-WebSocket-Key: #{key}\r\nSec-WebSocket-Version: 13\r\n\r\n" +
               Tsubame::UpgradeSupport.frame(0x1, "pid", fin: true, mask: true, rsv: 0))
    got = +"".b
    Timeout.timeout(5) { got << sock.readpartial(4096) until got.include?("/later") && got.match?(/\x81.\d+\z/n) }
    assert_match(/\AHTTP\/1.1 101/, got)
    assert_includes ws_pids, got[/\x81.(\d+)\z/n, 1].to_i
    sock.close

    # /metrics has a sample of each WebSocket worker, under its index.
    metrics = UNIXSocket.open(server.control_path) do |ctl|
      ctl.write("GET /metrics?token=#{Tsubame::ClusterServer::TOKEN} HTTP/1.1\r\nHost: ctl\r\nConnection: close\r\n\r\n")
      ctl.read
    end
    %w[-1 -2 0 1].each { |index| assert_includes metrics, "worker=\"#{index}\"" }

    # The counters: 11 handed over by the HTTP workers, 11 taken.
    server.wait_until(10, "hand-off counters") do
      stats = server.stats
      sent = stats["worker_status"].sum { |w| w.dig("last_status", "engine", "handoffs_sent").to_i }
      received = stats["websocket_workers"].sum { |w| w.dig("last_status", "engine", "handoffs_received").to_i }
      sent == 11 && received == 11
    end
  ensure
    server&.kill
  end

  # Issue 25: a worker killed mid-broadcast loses only its own
  # connections. Here the WebSocket worker dies: its clients see their
  # connections end; upgrades made while it is gone are served (by the HTTP
  # workers, or by its replacement once it boots); afterwards they go to
  # the replacement.
  # A worker checks in as soon as the master turns hand-offs on, not at
  # its next ping: with pings 5 s apart, /stats shows it within moments.
  def test_http_workers_report_the_hand_off_as_soon_as_the_master_turns_it_on
    server = Tsubame::ClusterServer.new(APP, workers: 2, config: "worker_check_interval 5\n",
                                             args: ["--websocket-workers", "1"])
    server.wait_until(20, "the master's hand-off line") { server.stdout.include?(HANDED) }
    deadline = monotonic + 2
    sleep 0.05 until server.handing_off? || monotonic > deadline
    assert server.handing_off?, "handoff_on in every HTTP worker within 2 s\n#{server.stats["worker_status"]}"
  ensure
    server&.kill
  end

  def test_a_killed_websocket_worker_loses_only_its_connections_and_nothing_else_fails
    server, (ws_pid,) = start
    clients = Array.new(3) { ws_client(server) }
    clients.each { |c| assert_equal ws_pid, opened(c)["pid"] }
    Process.kill("KILL", ws_pid)
    clients.each { |c| assert c.eof?(5), "a connection of the killed worker stayed open" }

    served_by = []
    plain = []
    deadline = monotonic + 20
    # At least once right after the kill, then until the replacement is up.
    loop do
      client = ws_client(server)
      served_by << opened(client)["pid"]
      client.close
      plain << get_pid(server)
      replacement = server.stats["websocket_workers"].first
      break if replacement && replacement["booted"] && replacement["pid"] != ws_pid &&
               server.stdout.scan(HANDED).size >= 2 && server.handing_off?
      flunk "no replacement WebSocket worker\n#{server.stdout}" if monotonic > deadline
    end
    refute_includes served_by, ws_pid
    refute_includes plain, 0
    assert_match(/WebSocket worker 1 \(PID: #{ws_pid}\) died/, server.stderr)
    assert_match(/WebSocket connections are served by every worker until one is back/, server.stdout)

    new_pid = server.stats["websocket_workers"].first["pid"]
    5.times { assert_equal new_pid, opened(ws_client(server))["pid"] }
  ensure
    server&.kill
  end

  def test_a_phased_restart_replaces_the_websocket_worker_too
    server, (ws_pid,) = start
    client = ws_client(server)
    assert_equal ws_pid, opened(client)["pid"]
    server.signal("USR1")
    new_pid, = wait_for_websocket_workers(server, 1, old: [ws_pid])
    server.wait_until(30, "the phased restart to finish") { server.stdout.include?("Phased restart done") }
    # The old worker drained and closed its connection (going away).
    assert_equal 1001, client.read_close(timeout: 10)
    assert_equal new_pid, opened(ws_client(server))["pid"]
  ensure
    server&.kill
  end

  # A hand-off the socket cannot take (here a head larger than the 192 KiB
  # a datagram carries) is served by the HTTP worker that read it, and
  # counted as failed.
  def test_an_upgrade_too_large_to_hand_off_is_served_where_it_was_read
    server, (ws_pid,) = start(config: "max_header_size 400_000\n")
    client = ws_client(server, headers: { "X-Test" => "a" * 200_000 })
    seen = opened(client)
    refute_equal ws_pid, seen["pid"]
    assert_includes server.booted_workers.values, seen["pid"]
    assert_equal 200_000, seen["x_test"].bytesize
    server.wait_until(10, "the failed hand-off counted") do
      server.stats["worker_status"].sum { |w| w.dig("last_status", "engine", "handoffs_failed").to_i } == 1
    end
  ensure
    server&.kill
  end

  # Under fork_worker the WebSocket worker is forked by the master, not
  # by worker 0, and a refork (URG) leaves it and its connections alone.
  def test_a_refork_leaves_the_websocket_worker_and_its_connections_alone
    server, (ws_pid,) = start(config: "fork_worker 0\n")
    ws = server.stats["websocket_workers"].first
    assert_equal server.pid, parent_pid(ws_pid), "forked by the master"
    assert_equal server.booted_workers[0], parent_pid(server.booted_workers[1]), "worker 1 forked by worker 0"
    client = ws_client(server)
    assert_equal ws_pid, opened(client)["pid"]
    Process.kill("URG", server.pid)
    server.wait_until(20, "the refork's end") { server.stdout.include?("- Refork done, phase: 1") }
    assert_equal [ws_pid, 1], server.stats["websocket_workers"].map { |w| w.values_at("pid", "phase") }.first
    client.text("pid")
    assert_equal ws_pid.to_s, client.read_message, "its connection is still served"
    assert_equal ws["started_at"], server.stats["websocket_workers"].first["started_at"]
  ensure
    server&.kill
  end

  def parent_pid(pid)
    File.read("/proc/#{pid}/stat")[/\) \S (\d+)/, 1].to_i
  end

  # On a PROXY-protocol bind the header is read by the HTTP worker; the
  # WebSocket worker sees the client it named.
  def test_the_proxy_headers_client_goes_over_with_the_connection
    server, (ws_pid,) = start(args: ["--proxy-protocol", "v1"])
    sock = server.socket
    key = Base64.strict_encode64(Random.bytes(16))
    sock.write("PROXY TCP4 203.0.113.9 127.0.0.1 5555 80\r\nGET /p HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n" \
               "Connection: Upgrade\r\nSec-WebSocket-Key: #{key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
    got = +"".b
    Timeout.timeout(5) { got << sock.readpartial(4096) until got.include?("}") }
    assert_match(/\AHTTP\/1.1 101/, got)
    seen = JSON.parse(got[/\{.*\}/m])
    assert_equal [ws_pid, "203.0.113.9"], seen.values_at("pid", "remote_addr")
    sock.close
  ensure
    server&.kill
  end

  # TLS stays where its handshake was made: a wss:// connection is served
  # by the HTTP worker that accepted it.
  def test_wss_connections_stay_in_the_worker_that_accepted_them
    server, (ws_pid,) = start(args: ["--tls-self-signed", "-b", "ssl://127.0.0.1:0"])
    tls_port = server.addresses.find { |a| a.start_with?("https://") }[/:(\d+)\z/, 1].to_i
    context = OpenSSL::SSL::SSLContext.new
    context.verify_mode = OpenSSL::SSL::VERIFY_NONE
    client = Tsubame::UpgradeSupport::Client.new(tls_port, tls: context)
    assert client.accepted?, client.response_head
    pid = opened(client)["pid"]
    refute_equal ws_pid, pid
    assert_includes server.booted_workers.values, pid
    assert_equal ws_pid, opened(ws_client(server))["pid"], "plain ws:// still goes to the WebSocket worker"
  ensure
    server&.kill
  end

  def test_single_mode_warns_and_serves_websockets_itself
    server = Tsubame::TestServer.new(APP, args: ["--websocket-workers", "1"])
    assert_match(/websocket_workers needs cluster mode/, server.stderr)
    client = ws_client(server)
    assert_equal server.pid, opened(client)["pid"]
  ensure
    server&.kill
  end
end
