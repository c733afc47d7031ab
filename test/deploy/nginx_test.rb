# frozen_string_literal: true

require_relative "support"

# nginx proxy_pass to a Tsubame UNIX socket through an upstream keepalive
# pool, adding X-Forwarded-For; Tsubame takes REMOTE_ADDR from it
# (set_remote_address header:) because the peer, a UNIX socket (127.0.0.1),
# is a trusted proxy. A client's own X-Forwarded-For is passed over.
class NginxTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::DeploySupport

  CONFIG = <<~RUBY
    set_remote_address header: "X-Forwarded-For"
    trusted_proxies ["127.0.0.1"]
  RUBY

  def setup
    skip "nginx is not installed (make deps)" unless File.executable?("/usr/sbin/nginx") || system("which nginx > /dev/null 2>&1")
  end

  def test_remote_addr_from_x_forwarded_for_over_a_unix_socket
    Dir.mktmpdir("tsubame-nginx") do |dir|
      socket = File.join(dir, "tsubame.sock")
      with_deploy_server(binds: ["unix://#{socket}?umask=0111"], config: CONFIG) do |_server, log|
        front = free_port
        config = File.join(dir, "nginx.conf")
        File.write(config, nginx_config(dir, front, socket))
        nginx = File.executable?("/usr/sbin/nginx") ? "/usr/sbin/nginx" : "nginx"
        command = [nginx, "-p", dir, "-c", config, "-e", File.join(dir, "error.log")]
        with_daemon(command, ready_port: front, log: File.join(dir, "nginx.out")) do
          http = Net::HTTP.new("127.0.0.1", front)
          http.local_host = "127.0.0.3"
          http.start do
            assert_equal "127.0.0.3", http.get("/").body
            assert_equal "127.0.0.3", http.get("/", "X-Forwarded-For" => "6.6.6.6").body, "the forged entry is passed over"
            assert_equal "127.0.0.3", http.get("/again").body
          end
          assert_equal ["127.0.0.3"] * 3, app_saw(log)
        end
      end
    end
  end
end
