# frozen_string_literal: true

require "test_helper"
require "json"
require "net/http"
require "timeout"

# The platform gem (`make native-gem`, script/native_gem): built from the
# extension and tsubame-bench already in lib/tsubame/ (no cargo), installed
# with `gem install --local` into a fresh GEM_HOME with no Rust toolchain on
# PATH, then its `tsubame` serves a request and its `tsubame bench` runs.
# Rack comes from the system gems (Debian's ruby-rack) through GEM_PATH.
# TSUBAME_NATIVE_GEM_FILE=path uses a gem already built instead.
class NativeGemTest < Minitest::Test
  include Tsubame::TestHelpers

  BINARIES = %w[lib/tsubame/tsubame_native.so lib/tsubame/tsubame-bench].freeze
  GEM_BIN = File.join(RbConfig::CONFIG.fetch("bindir"), "gem")

  def setup
    BINARIES.each do |bin|
      assert File.file?(File.join(ROOT, bin)), "#{bin} is missing: `make build` builds it"
    end
    @dir = Dir.mktmpdir("tsubame-native-gem")
    @server = nil
  end

  def teardown
    if @server
      begin
        Process.kill("KILL", @server)
        Process.wait(@server)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      end
    end
    FileUtils.rm_rf(@dir)
  end

  def test_installs_without_rust_and_serves
    Timeout.timeout(90) do
      gem_file = build_gem
      assert_spec(gem_file)

      gem_home = File.join(@dir, "gems")
      env = install_env(gem_home)
      _, _, found = Open3.capture3(env, "sh", "-c", "command -v cargo || command -v rustc")
      refute found.success?, "cargo or rustc is still on PATH: #{env["PATH"]}"

      # Into GEM_HOME (not --install-dir, which would look for rack there only).
      out, err, status = Open3.capture3(env, RbConfig.ruby, GEM_BIN, "install", "--local", "--no-document", gem_file,
                                        chdir: @dir)
      assert status.success?, "gem install failed:\n#{out}#{err}"
      refute_match(/Building native extensions/, out + err)
      installed = File.join(gem_home, "gems", File.basename(gem_file, ".gem"))
      BINARIES.each { |bin| assert File.file?(File.join(installed, bin)), "#{bin} not installed" }
      assert File.executable?(File.join(installed, "lib/tsubame/tsubame-bench")), "tsubame-bench lost its mode"
      assert_empty Dir.glob(File.join(gem_home, "extensions", "**", "tsubame*")), "an extension was built"

      serve_and_bench(gem_home, installed, env)
    end
  end

  # The source gem is unchanged: it builds the extension with cargo.
  def test_source_gemspec_still_builds_with_cargo
    code = 'spec = Gem::Specification.load("tsubame.gemspec"); ' \
           "puts JSON.generate([spec.platform.to_s, spec.extensions, spec.files.grep(/\\Acrates\\/|\\.so\\z/).size])"
    out, err, status = Open3.capture3({ "TSUBAME_NATIVE_GEM" => nil }, RbConfig.ruby, "-rjson", "-e", code, chdir: ROOT)
    assert status.success?, err
    platform, extensions, crate_or_so_files = JSON.parse(out)
    assert_equal "ruby", platform
    assert_equal ["ext/tsubame_native/extconf.rb"], extensions
    assert_operator crate_or_so_files, :>, 0, "the source gem ships the crates"
  end

  private

  def build_gem
    prebuilt = ENV["TSUBAME_NATIVE_GEM_FILE"].to_s
    return File.expand_path(prebuilt) unless prebuilt.empty?

    path = File.join(@dir, "tsubame-#{Tsubame::VERSION}-#{Gem::Platform.local}.gem")
    out, err, status = Open3.capture3(File.join(ROOT, "script", "native_gem"), path)
    assert status.success?, "script/native_gem failed:\n#{out}#{err}"
    path
  end

  # `gem specification` of the file: this platform, this Ruby's minor
  # version only, nothing to compile, the binaries inside.
  def assert_spec(gem_file)
    out, err, status = Open3.capture3(RbConfig.ruby, GEM_BIN, "specification", gem_file)
    assert status.success?, err
    spec = Gem::Specification.from_yaml(out)
    assert_equal Gem::Platform.local.to_s, spec.platform.to_s
    major, minor = RUBY_VERSION.split(".").map(&:to_i)
    assert_equal [">= #{major}.#{minor}", "< #{major}.#{minor + 1}"].sort,
                 spec.required_ruby_version.requirements.map { |op, v| "#{op} #{v}" }.sort
    assert_empty spec.extensions
    BINARIES.each { |bin| assert_includes spec.files, bin }
    assert_empty spec.files.grep(%r{\A(?:ext|crates)/}), "the platform gem ships no Rust sources"
    assert_equal ["tsubame"], spec.executables
  end

  # PATH without any directory holding cargo or rustc (nor ~/.cargo/bin),
  # HOME elsewhere so ~/.cargo is not found either; the gem's own GEM_HOME
  # first, then the system's gems for rack.
  def install_env(gem_home)
    path = ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).reject do |dir|
      dir.include?(".cargo") || %w[cargo rustc].any? { |tool| File.executable?(File.join(dir, tool)) }
    end
    home = File.join(@dir, "home")
    FileUtils.mkdir_p(home)
    {
      "PATH" => path.join(File::PATH_SEPARATOR), "HOME" => home,
      "GEM_HOME" => gem_home, "GEM_PATH" => [gem_home, *Gem.default_path].join(File::PATH_SEPARATOR),
      "CARGO" => nil, "CARGO_HOME" => nil, "RUSTUP_HOME" => nil, "CARGO_TARGET_DIR" => nil,
      "RUBYLIB" => nil, "RUBYOPT" => nil, "BUNDLE_GEMFILE" => nil, "TSUBAME_BENCH" => nil
    }
  end

  def serve_and_bench(gem_home, installed, env)
    app = write_file(@dir, "app/config.ru", <<~RUBY)
      run lambda { |_env|
        [200, { "content-type" => "text/plain" }, ["native gem: \#{$LOADED_FEATURES.grep(/tsubame_native/).first}"]]
      }
    RUBY
    log = File.join(@dir, "server.log")
    @server = Process.spawn(env, File.join(gem_home, "bin", "tsubame"), "-b", "tcp://127.0.0.1:0", "-t", "1:2", app,
                            chdir: File.dirname(app), out: log, err: log, in: File::NULL)
    url = wait_for_listening(log)

    body = Net::HTTP.get(URI("#{url}/"))
    assert_equal "native gem: #{File.join(installed, "lib/tsubame/tsubame_native.so")}", body

    out, err, status = Open3.capture3(env, File.join(gem_home, "bin", "tsubame"), "bench", "-q", "--json",
                                      "-n", "20", "-c", "2", "#{url}/", chdir: @dir)
    assert status.success?, "tsubame bench failed: #{err}"
    report = JSON.parse(out)
    assert_equal({ "200" => 20 }, report["status_codes"])

    Process.kill("TERM", @server)
    Process.wait(@server)
    @server = nil
    assert_includes File.read(log), "Goodbye"
  end

  def wait_for_listening(log)
    now = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    deadline = now.call + 30
    loop do
      text = File.exist?(log) ? File.read(log) : ""
      url = text[%r{Listening on (http://\S+)}, 1]
      return url if url && text.include?("Use Ctrl-C")
      raise "the installed tsubame exited:\n#{text}" if Process.waitpid(@server, Process::WNOHANG)
      raise "the installed tsubame did not boot in 30 s:\n#{text}" if now.call > deadline

      sleep 0.05
    end
  end
end
