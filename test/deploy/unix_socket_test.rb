# frozen_string_literal: true

require_relative "support"

# unix:// binds with Puma's umask= and mode= (docs/PROXY.md): the socket
# file has the permissions asked for, and serves.
class UnixSocketTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::DeploySupport

  def test_mode_and_umask_set_the_socket_file_permissions
    Dir.mktmpdir("tsubame-unix") do |dir|
      binds = {
        "mode=0600" => 0o600,
        "mode=666" => 0o666,
        "umask=0111" => 0o666,
        "umask=0077" => 0o700
      }
      paths = binds.keys.each_with_index.to_h { |query, i| [query, File.join(dir, "s#{i}.sock")] }
      with_deploy_server(binds: paths.map { |query, path| "unix://#{path}?#{query}" }) do |_server, _log|
        binds.each do |query, mode|
          assert_equal format("%o", mode), format("%o", File.stat(paths[query]).mode & 0o7777), query
        end
        sock = UNIXSocket.new(paths["umask=0111"])
        sock.write(request)
        assert_match(/\r\n\r\n127\.0\.0\.1\z/, read_until_close(sock, 5).first)
        sock.close
      end
    end
  end

  def test_a_bad_mode_fails_the_boot_naming_the_bind
    in_tmpdir do |dir|
      rackup = write_file(dir, "config.ru", "run ->(_env) { [200, {}, []] }\n")
      out, err, status = run_tsubame("-b", "unix://#{dir}/bad.sock?mode=0999", "-C", "-", rackup)
      refute status.success?, out
      assert_match(%r{unix://#{dir}/bad\.sock\?mode=0999: mode must be an octal number}, err)
      refute File.exist?("#{dir}/bad.sock")
    end
  end
end
