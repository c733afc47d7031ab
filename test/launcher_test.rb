# frozen_string_literal: true

require "test_helper"
require "stringio"
require "tsubame/launcher"

# The boot sequence around the server, with a stand-in for Tsubame::Server
# so the native extension is not needed.
class LauncherTest < Minitest::Test
  include Tsubame::TestHelpers

  # Speaks the server API the launcher codes against; stop may come from a
  # trap handler, so it only pushes to a queue.
  class FakeServer
    class << self
      attr_accessor :last, :on_start
    end

    attr_reader :app, :options, :calls

    def initialize(app, options)
      @app = app
      @options = options
      @calls = []
      @stopped = Queue.new
      self.class.last = self
    end

    def bind
      @calls << :bind
    end

    def addresses
      ["tcp://127.0.0.1:41234", "unix:///tmp/tsubame-test.sock"]
    end

    # None really bound: only their notes (socket activation) are read.
    def listeners
      Tsubame::Listeners.new([], owner: false)
    end

    def start
      @calls << :start
      self.class.on_start&.call(self)
    end

    def stop
      @stopped << :stop
    end

    def wait
      @stopped.pop
      @calls << :wait
    end
  end

  def setup
    @rack_env = ENV.fetch("RACK_ENV", nil)
    FakeServer.on_start = nil
  end

  def teardown
    ENV["RACK_ENV"] = @rack_env
  end

  def launch(options, **extra, &block)
    stdout = StringIO.new
    stderr = StringIO.new
    launcher = Tsubame::Launcher.new(options, stdout: stdout, stderr: stderr, server_class: FakeServer, **extra)
    status = launcher.run(&block)
    [status, stdout.string, stderr.string]
  end

  def test_banner_lifecycle_and_pidfile
    in_tmpdir do |dir|
      options = Tsubame::Options.new
      options[:pidfile] = File.join(dir, "tsubame.pid")
      options.set_threads(2, 7)
      options[:environment] = "staging"
      app = ->(_env) { [200, {}, []] }
      pid_during_run = nil
      status, stdout, stderr = launch(options, app: app) do |server|
        pid_during_run = File.exist?(options[:pidfile]) # written after the yield
        server.stop
      end
      assert_equal 0, status
      assert_empty stderr
      assert_equal false, pid_during_run
      refute File.exist?(options[:pidfile]), "pidfile removed on exit"
      assert_equal %i[bind start wait], FakeServer.last.calls
      assert_same app, FakeServer.last.app
      assert_equal "staging", ENV.fetch("RACK_ENV")
      assert_equal <<~TEXT, stdout
        Tsubame starting in single mode...
        * Tsubame version: #{Tsubame::VERSION} (ruby #{RUBY_VERSION}-p#{RUBY_PATCHLEVEL})
        *  Min threads: 2
        *  Max threads: 7
        *  Environment: staging
        *          PID: #{Process.pid}
        * Listening on http://127.0.0.1:41234
        * Listening on unix:///tmp/tsubame-test.sock
        Use Ctrl-C to stop
        - Goodbye!
      TEXT
    end
  end

  def test_pidfile_holds_pid_while_serving
    in_tmpdir do |dir|
      options = Tsubame::Options.new
      options[:pidfile] = File.join(dir, "tsubame.pid")
      seen = nil
      FakeServer.on_start = lambda do |server|
        seen = File.read(options[:pidfile])
        server.stop
      end
      launch(options, app: ->(_env) { [200, {}, []] })
      assert_equal "#{Process.pid}\n", seen
    end
  end

  def test_term_stops_the_server
    previous = trap("TERM", "DEFAULT")
    FakeServer.on_start = ->(_server) { Process.kill("TERM", Process.pid) }
    status, stdout, = launch(Tsubame::Options.new, app: ->(_env) { [200, {}, []] })
    assert_equal 0, status
    assert stdout.end_with?("- Goodbye!\n")
    assert_equal "DEFAULT", trap("TERM", previous), "previous handler restored"
  end

  def test_loads_the_rackup_file
    options = Tsubame::Options.new
    options[:rackup] = File.join(ROOT, "examples/demo/config.ru")
    launch(options) { |server| server.stop }
    status, _headers, body = FakeServer.last.app.call("PATH_INFO" => "/", "QUERY_STRING" => "")
    assert_equal 200, status
    assert_equal ["Hello from Tsubame\n"], body.to_a
  end

  def test_warns_once_about_ignored_settings
    ignored = ["workers (config/puma.rb:3)", "WEB_CONCURRENCY (environment)"]
    _, _, stderr = launch(Tsubame::Options.new, app: ->(_env) { [200, {}, []] }, ignored: ignored) { |s| s.stop }
    assert_equal 1, stderr.lines.size
    assert_match(/\Atsubame: warning: .*workers \(config\/puma\.rb:3\), WEB_CONCURRENCY \(environment\)$/, stderr)
  end
end
