# frozen_string_literal: true

# TSUBAME_TEST_RACK_LIB=DIR runs the suite on the Rack whose lib/ is DIR
# (make test-rack3: ../shared/vendor/rack-3.2.7/lib) instead of the
# installed one. DIR goes first on this process's load path, and into
# RUBYLIB, which every process the tests start inherits: servers, cluster
# workers, hot-restart re-execs, `tsubame ctl`, tune's servers and any
# `ruby -e` helper. test/rack/rack_version_test.rb checks that the server
# really runs on the same Rack as the tests.
if (rack_lib = ENV.fetch("TSUBAME_TEST_RACK_LIB", "")) != ""
  rack_lib = File.expand_path(rack_lib)
  abort "TSUBAME_TEST_RACK_LIB: #{rack_lib}/rack.rb does not exist" unless File.file?(File.join(rack_lib, "rack.rb"))
  abort "TSUBAME_TEST_RACK_LIB: rack was loaded before test_helper" if defined?(::Rack::RELEASE)

  $LOAD_PATH.unshift(rack_lib)
  ENV["RUBYLIB"] = [rack_lib, *ENV.fetch("RUBYLIB", "").split(File::PATH_SEPARATOR).reject(&:empty?)].uniq.join(File::PATH_SEPARATOR)
  require "rack"
  abort "TSUBAME_TEST_RACK_LIB: rack came from #{Rack.method(:release).source_location.first}" unless
    Rack.method(:release).source_location.first.start_with?("#{rack_lib}/")
end

require "minitest/autorun"
require "rack"
require "fileutils"
require "json"
require "open3"
require "rbconfig"
require "tmpdir"
require "tsubame"
require_relative "free_ports"

module Tsubame
  # Helpers shared by the test files; each test file includes this module.
  module TestHelpers
    ROOT = File.expand_path("..", __dir__)
    RACK2 = Rack.release.start_with?("2.")
    # Rack 3's Lint forwards to_ary and to_path to the app's body; Rack 2's
    # wraps the body in itself and hides both, so an Array body goes out
    # chunked and a file through each. A test that checks what the server
    # does with those passes `lint: LINT_FORWARDS_BODY` (Lint under Rack 3).
    LINT_FORWARDS_BODY = !RACK2
    EXE = File.join(ROOT, "exe", "tsubame")

    # Runs exe/tsubame under `ruby -w` so warnings show up on stderr.
    # Returns [stdout, stderr, Process::Status].
    def run_tsubame(*args, env: {}, chdir: ROOT)
      Open3.capture3(env, RbConfig.ruby, "-w", EXE, *args, chdir: chdir, stdin_data: "")
    end

    # Yields a fresh directory that is removed afterwards.
    def in_tmpdir(&block)
      Dir.mktmpdir("tsubame-test", &block)
    end

    # The rackup with Rack::Lint around the whole app, so every request and
    # response of a test checks the env the server builds against the SPEC
    # of the Rack in use. Inserted after leading comment lines, so magic
    # comments (and Rack 2's "#\\ options" line) stay first.
    def self.linted(rackup)
      head = rackup[/\A(?:#.*\n)*/]
      "#{head}use Rack::Lint\n#{rackup[head.size..]}"
    end

    # Writes content to dir/relative_path, creating directories; returns the path.
    def write_file(dir, relative_path, content)
      path = File.join(dir, relative_path)
      FileUtils.mkdir_p(File.dirname(path))
      File.write(path, content)
      path
    end
  end
end

require "socket"
require "net/http"
require "timeout"

module Tsubame
  # Starts exe/tsubame as a subprocess on an ephemeral port and talks to it
  # over real sockets. The banner's "Listening on" lines give the addresses.
  class TestServer
    CONTROL_TOKEN = "test-token"

    attr_reader :pid, :port, :addresses, :unix_path, :control_path

    # lint: false leaves Rack::Lint out, for an app that breaks the SPEC on
    # purpose (each caller says why).
    def initialize(rackup, args: [], env: {}, unix: false, lint: true, control: false)
      @dir = Dir.mktmpdir("tsubame-srv")
      @log_path = File.join(@dir, "server.log")
      @err_path = File.join(@dir, "server.err")
      @unix_path = File.join(@dir, "s.sock") if unix
      binds = ["-b", "tcp://127.0.0.1:0"]
      binds += ["-b", "unix://#{@unix_path}"] if unix
      if control
        @control_path = File.join(@dir, "ctl.sock")
        binds += ["--control-url", "unix://#{@control_path}", "--control-token", CONTROL_TOKEN]
      end
      ru = File.join(@dir, "config.ru")
      File.write(ru, lint ? TestHelpers.linted(rackup) : rackup)
      @pid = Process.spawn(env, RbConfig.ruby, "-w", TestHelpers::EXE, *binds, *args, ru,
                           out: @log_path, err: @err_path, in: File::NULL)
      wait_for_banner
    end

    def wait_for_banner
      Timeout.timeout(15) do
        until (listening = File.read(@log_path).scan(%r{Listening on (\S+)}).flatten).size >= 1 &&
              File.read(@log_path).include?("Use Ctrl-C")
          raise "server exited: #{stderr}" if Process.waitpid(@pid, Process::WNOHANG)

          sleep 0.02
        end
        @addresses = listening
        @port = listening.map { |a| a[/:(\d+)\z/, 1] }.compact.first.to_i
      end
    end

    def stdout
      File.read(@log_path)
    end

    def stderr
      File.read(@err_path)
    end

    def socket
      TCPSocket.new("127.0.0.1", @port)
    end

    def http
      Net::HTTP.start("127.0.0.1", @port, read_timeout: 20)
    end

    def get(path, headers = {})
      http.get(path, headers)
    end

    # Sends raw bytes on a fresh connection and returns everything the
    # server sends until it closes (or `timeout` seconds pass).
    def raw(bytes, timeout: 5, close_write: false)
      sock = socket
      sock.write(bytes)
      sock.close_write if close_write
      read_all(sock, timeout)
    ensure
      sock&.close
    end

    def read_all(sock, timeout)
      TestHelpers.read_until_close(sock, timeout).first
    end

    def signal(name)
      Process.kill(name, @pid)
    end

    # GET /`action` from the control app (started with `control: true`),
    # parsed from JSON.
    def control(action)
      socket = UNIXSocket.new(@control_path)
      socket.write("GET /#{action}?token=#{CONTROL_TOKEN} HTTP/1.1\r\nHost: ctl\r\n\r\n")
      JSON.parse(socket.read.split("\r\n\r\n", 2).last)
    ensure
      socket&.close
    end

    # Returns the exit status.
    def stop(signal = "TERM", timeout: 20)
      Process.kill(signal, @pid)
      Timeout.timeout(timeout) { Process.wait2(@pid).last }
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    ensure
      @stopped = true
    end

    def kill
      return if @stopped

      Process.kill("KILL", @pid)
      Process.wait(@pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    ensure
      FileUtils.rm_rf(@dir)
    end
  end

  module TestHelpers
    # [bytes, whether the server closed the connection within timeout].
    def self.read_until_close(sock, timeout)
      out = +"".b
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      loop do
        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        return [out, false] if left <= 0 || !sock.wait_readable(left)

        chunk = sock.read_nonblock(65_536, exception: false)
        return [out, true] if chunk.nil?

        out << chunk unless chunk == :wait_readable
      end
    rescue Errno::ECONNRESET
      [out, true]
    end

    def read_until_close(sock, timeout)
      TestHelpers.read_until_close(sock, timeout)
    end

    def monotonic
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # A TCP port for a server whose address must be known before it starts
    # (a control URL, $PORT): reserved for this process, and one the kernel
    # never hands out on its own (see FreePorts).
    def free_port
      FreePorts.take
    end

    # Waits until `path` exists and its contents satisfy the block (or are
    # non-empty); returns the contents, or what is there at the deadline.
    def wait_for_file(path, timeout: 5)
      deadline = Time.now + timeout
      loop do
        text = File.exist?(path) ? File.read(path) : nil
        return text if text && (block_given? ? yield(text) : !text.empty?)
        return text if Time.now > deadline

        sleep 0.02
      end
    end

    # Polls the block until it returns something truthy (returned) or
    # `timeout` passes (nil).
    def wait_until(timeout: 5)
      deadline = Time.now + timeout
      loop do
        result = yield
        return result if result
        return nil if Time.now > deadline

        sleep 0.02
      end
    end

    # Yields a running TestServer and always kills it afterwards.
    def with_server(rackup, **opts)
      server = TestServer.new(rackup, **opts)
      yield server
    ensure
      server&.kill
    end
  end
end
