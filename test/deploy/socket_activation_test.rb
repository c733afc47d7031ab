# frozen_string_literal: true

require "deploy/support"
require "tsubame/serve/socket_activation"

# systemd socket activation (docs/SYSTEMD.md): the matching rules alone,
# then exe/tsubame under Debian's systemd-socket-activate, which opens the
# listening sockets and execs the server (same pid) on the first
# connection with LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES set.
class SocketActivationTest < Minitest::Test
  include Tsubame::DeployHelpers

  Activated = Tsubame::SocketActivation::Activated

  # --- matching -----------------------------------------------------------

  def match(addresses, uri)
    sockets = addresses.each_with_index.map { |address, i| Activated.new(3 + i, nil, address, nil) }
    Tsubame::SocketActivation.match(sockets, uri).map(&:address)
  end

  def test_match_by_address
    assert_equal ["tcp://127.0.0.1:8080"], match(%w[tcp://127.0.0.1:8080 tcp://127.0.0.1:8081], "tcp://127.0.0.1:8080")
    assert_equal ["tcp://127.0.0.1:8080"], match(%w[tcp://127.0.0.1:8080], "ssl://127.0.0.1:8080?cert=a&key=b")
    assert_equal ["tcp://[::1]:8080"], match(%w[tcp://[::1]:8080], "tcp://[::1]:8080")
    assert_empty match(%w[tcp://127.0.0.1:8080], "tcp://127.0.0.2:8080")
    assert_empty match(%w[tcp://127.0.0.1:8080], "tcp://127.0.0.1:8081")
    # Port 0 asks for a new port: never an activated socket.
    assert_empty match(%w[tcp://127.0.0.1:8080], "tcp://127.0.0.1:0")
  end

  def test_match_a_host_name_by_what_it_resolves_to
    assert_equal ["tcp://127.0.0.1:8080"], match(%w[tcp://127.0.0.1:8080], "tcp://localhost:8080")
  end

  # systemd's ListenStream=8080 is one dual-stack [::] socket.
  def test_wildcards_match_across_families
    assert_equal ["tcp://[::]:8080"], match(%w[tcp://[::]:8080], "tcp://0.0.0.0:8080")
    assert_equal ["tcp://0.0.0.0:8080"], match(%w[tcp://0.0.0.0:8080], "tcp://[::]:8080")
  end

  def test_match_unix_paths
    assert_equal ["unix:///run/app.sock"], match(%w[unix:///run/app.sock], "unix:///run/app.sock")
    assert_empty match(%w[unix:///run/app.sock], "unix:///run/other.sock")
    assert_empty match(%w[tcp://127.0.0.1:8080], "unix:///run/app.sock")
  end

  def test_variables_for_another_pid_are_ignored_and_removed
    env = { "LISTEN_FDS" => "2", "LISTEN_PID" => (Process.pid + 1).to_s, "LISTEN_FDNAMES" => "a:b" }
    assert_empty Tsubame::SocketActivation.from_env(env)
    assert_empty env
  end

  # --- under systemd-socket-activate ---------------------------------------

  def activated(listen, args, **opts)
    server = Tsubame::ActivatedServer.new(listen, args, **opts)
    yield server
  ensure
    server&.kill
  end

  # systemd-socket-activate starts the server only when a client connects:
  # this client is in the activated socket's queue before the server
  # exists. It is answered only if the server accepts on that very socket;
  # a socket the server bound itself could not have it (and binding the
  # same address would fail with EADDRINUSE).
  def test_single_mode_serves_the_activated_socket
    port = free_port
    in_tmpdir do |dir|
      ru = write_file(dir, "config.ru", ENV_APP)
      activated(["127.0.0.1:#{port}"], ["-b", "tcp://127.0.0.1:#{port}", ru], names: ["web"]) do |server|
        socket = TCPSocket.new("127.0.0.1", port)
        response = Timeout.timeout(20) { request_on(socket) }
        assert_match(/\AHTTP\/1.1 200/, response)
        # The server is the process systemd-socket-activate exec'd.
        assert_includes response, "pid=#{server.pid} "
        # LISTEN_* were removed before the app loaded.
        assert_match(/seen=\z/, response)
        assert_includes server.stdout, "* Using activated socket fd 3 (web) tcp://127.0.0.1:#{port} for tcp://127.0.0.1:#{port}"
        assert_includes server.stdout, "* Listening on http://127.0.0.1:#{port}"
        assert_equal 0, server.stop.exitstatus
      ensure
        socket&.close
      end
    end
  end

  def test_unmatched_activated_socket_is_closed_with_a_log_line
    port = free_port
    spare = free_port
    in_tmpdir do |dir|
      ru = write_file(dir, "config.ru", ENV_APP)
      listen = ["127.0.0.1:#{port}", "127.0.0.1:#{spare}"]
      activated(listen, ["-b", "tcp://127.0.0.1:#{port}", ru], names: %w[web admin]) do |server|
        socket = TCPSocket.new("127.0.0.1", port)
        assert_match(/\AHTTP\/1.1 200/, Timeout.timeout(20) { request_on(socket) })
        server.wait_for(:stdout, /Use Ctrl-C/)
        assert_includes server.stdout, "* Closing unused activated socket: fd 4 (admin) tcp://127.0.0.1:#{spare}"
        # Closed in the only process that held it.
        assert_raises(Errno::ECONNREFUSED) { TCPSocket.new("127.0.0.1", spare).close }
        server.stop
      ensure
        socket&.close
      end
    end
  end

  def test_cluster_mode_workers_serve_the_activated_socket
    port = free_port
    in_tmpdir do |dir|
      ru = write_file(dir, "config.ru", ENV_APP)
      activated(["127.0.0.1:#{port}"], ["-w", "2", "-b", "tcp://127.0.0.1:#{port}", ru]) do |server|
        socket = TCPSocket.new("127.0.0.1", port)
        response = Timeout.timeout(20) { request_on(socket) }
        assert_match(/\AHTTP\/1.1 200/, response)
        assert_match(/seen=\z/, response)
        server.wait_for(:stdout, /Worker 1 \(PID: \d+\) booted/)
        server.wait_for(:stdout, /Worker 0 \(PID: \d+\) booted/)
        assert_includes server.stdout, "* Using activated socket fd 3 tcp://127.0.0.1:#{port} for tcp://127.0.0.1:#{port}"
        # Answered by a worker, not by the master systemd started.
        pids = Array.new(4) { Net::HTTP.get(URI("http://127.0.0.1:#{port}/"))[/pid=(\d+)/, 1].to_i }
        refute_includes pids, server.pid
        assert_equal 0, server.stop.exitstatus
      ensure
        socket&.close
      end
    end
  end
end
