# frozen_string_literal: true

require_relative "chaos_support"

# Uploads spooled to a disk that fills up: large request bodies go to
# unlinked temp files in upload_dir, here a 1 MiB tmpfs. An upload that does
# not fit gets a 500 (the server reads and drops the rest of the body
# before closing, so the client is not reset mid-upload), is logged and
# counted in spool_errors; uploads that fit, and every other request, keep
# succeeding, and the space is given back.
class DiskFullChaos < Minitest::Test
  include Tsubame::ChaosHelpers

  UPLOAD_APP = <<~RUBY
    run lambda { |env|
      [200, { "content-type" => "text/plain" }, [env["rack.input"].read.bytesize.to_s]]
    }
  RUBY

  FAILING = 8

  def setup
    skip "mounting a tmpfs needs root" unless Process.uid.zero?
    @mount = Dir.mktmpdir("tsubame-full")
    _, err, status = Open3.capture3("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", @mount)
    skip "cannot mount a tmpfs here: #{err.strip}" unless status.success?
    @mounted = true
  end

  def teardown
    system("umount", @mount) if @mounted
    Dir.rmdir(@mount) if @mount && Dir.exist?(@mount)
  end

  def test_uploads_that_do_not_fit_fail_alone
    with_cluster(UPLOAD_APP, workers: 2, config: "upload_dir #{@mount.inspect}\nupload_memory 0\n", args: %w[-t 3:3]) do |s|
      load = Tsubame::LoadLoop.new(s.port, clients: 2)
      outcomes = Array.new(FAILING) { upload(s, 2 * 1024 * 1024) }
      # Each stored body is freed as soon as its request is over, not when
      # the GC gets to it: the next one finds the space again.
      fits = Array.new(3) do
        result = upload(s, 600 * 1024)
        s.wait_until(3, "the 600 KiB temp file to be freed") { disk_used.zero? }
        result
      end
      load.stop

      assert_equal [[500, true]] * FAILING, outcomes, "2 MiB uploads into a 1 MiB disk"
      assert_equal [[200, "614400"]] * 3, fits, "uploads that fit are stored whole"
      assert_empty load.failures.map(&:detail)
      assert_operator load.ok.size, :>, 20
      assert_equal FAILING, s.stderr.scan(/cannot spool request body to disk: No space left on device/).size
      assert_total_eventually(FAILING, "spool_errors over the workers") do
        engine_total(s, "spool_errors", workers: 2)
      end
      assert_equal 0, disk_used, "the failed uploads' temp files were freed"
    end
  end

  private

  def disk_used
    `df -B1 --output=used #{@mount}`.lines.last.to_i
  end

  # [200, body] or [500, whether the body names the cause], or :reset when
  # the server reset the connection before the client read an answer. The
  # client writes the whole body, then reads, as most do; its send buffer
  # is kept small so loopback cannot swallow the body whole (as a real
  # network path would not), so a server that stopped reading would fail
  # the write.
  def upload(server, size)
    socket = raw_socket(server)
    socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_SNDBUF, 64 * 1024)
    socket.write("POST /upload HTTP/1.1\r\nHost: chaos\r\nContent-Length: #{size}\r\nConnection: close\r\n\r\n")
    socket.write("u" * size)
    response = server.read_all(socket, 15)
    return :reset if response.empty?

    status = response[%r{\AHTTP/1\.1 (\d{3})}, 1].to_i
    body = response.split("\r\n\r\n", 2).last
    status == 500 ? [500, body.include?("request body could not be stored")] : [status, body]
  rescue Errno::ECONNRESET, Errno::EPIPE
    :reset
  ensure
    socket&.close
  end
end
