# frozen_string_literal: true

require "deploy/support"

# Puma's bind_to_activated_sockets (docs/SYSTEMD.md): true serves every
# socket systemd handed over besides the configured binds; "only" serves
# them alone, whatever the binds say.
class ActivatedBindsTest < Minitest::Test
  include Tsubame::DeployHelpers

  def activated(listen, args)
    server = Tsubame::ActivatedServer.new(listen, args)
    yield server
  ensure
    server&.kill
  end

  def test_true_serves_the_activated_sockets_and_the_configured_binds
    port = free_port
    other = free_port
    in_tmpdir do |dir|
      ru = write_file(dir, "config.ru", ENV_APP)
      config = write_file(dir, "puma.rb", %(bind "tcp://127.0.0.1:#{other}"\nbind_to_activated_sockets\n))
      activated(["127.0.0.1:#{port}"], ["-C", config, ru]) do |server|
        socket = TCPSocket.new("127.0.0.1", port)
        assert_match(/\AHTTP\/1.1 200/, Timeout.timeout(20) { request_on(socket) })
        server.wait_for(:stdout, /Use Ctrl-C/)
        assert_includes server.stdout, "* Using activated socket fd 3 tcp://127.0.0.1:#{port} for tcp://127.0.0.1:#{port}"
        assert_includes server.stdout, "* Listening on http://127.0.0.1:#{other}"
        assert_match(/\AHTTP\/1.1 200/, request_on(TCPSocket.new("127.0.0.1", other)))
        server.stop
      ensure
        socket&.close
      end
    end
  end

  def test_only_serves_the_activated_sockets_alone
    port = free_port
    other = free_port
    in_tmpdir do |dir|
      ru = write_file(dir, "config.ru", ENV_APP)
      config = write_file(dir, "puma.rb", %(bind "tcp://127.0.0.1:#{other}"\nbind_to_activated_sockets "only"\n))
      activated(["127.0.0.1:#{port}"], ["-C", config, ru]) do |server|
        socket = TCPSocket.new("127.0.0.1", port)
        assert_match(/\AHTTP\/1.1 200/, Timeout.timeout(20) { request_on(socket) })
        server.wait_for(:stdout, /Use Ctrl-C/)
        assert_includes server.stdout, "* Listening on http://127.0.0.1:#{port}"
        refute_includes server.stdout, ":#{other}"
        assert_raises(Errno::ECONNREFUSED) { TCPSocket.new("127.0.0.1", other).close }
        server.stop
      ensure
        socket&.close
      end
    end
  end
end
