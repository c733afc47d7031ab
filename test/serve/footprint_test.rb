# frozen_string_literal: true

require "test_helper"
require "json"

# What a server process carries besides the app: the bench and tune front
# ends and YAML are loaded only by their subcommands and the state file,
# JSON only by what needs it (a hot restart's handover, Puma.stats,
# cluster mode; Puma does not load it either), and the request-timeout watchdog thread
# exists only with a timeout set.
class FootprintTest < Minitest::Test
  include Tsubame::TestHelpers

  REPORT_APP = <<~'RUBY'
    # frozen_string_literal: true

    # Plain lines, not JSON: the test checks that the server never loaded it.
    run lambda { |_env|
      text = [Thread.list.map(&:name).compact.join(","), *$LOADED_FEATURES].join("\n")
      [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]]
    }
  RUBY

  def report(server)
    reply = server.get("/")
    assert_equal "200", reply.code, server.stderr
    threads, *features = reply.body.split("\n")
    { "threads" => threads.split(","), "features" => features }
  end

  def test_a_server_loads_no_bench_tune_or_yaml_and_runs_no_watchdog_without_a_timeout
    with_server(REPORT_APP, lint: false) do |s|
      r = report(s)
      assert_empty r["features"].grep(%r{tsubame/(bench|tune)|/psych|/yaml\.rb}), "loaded by a plain server"
      assert_empty r["features"].grep(%r{/json\.rb}), "loaded by a plain server"
      # Required where they are used: trusted proxies, a restart command,
      # a control token made up (each about 0.1-0.4 MB of a process that
      # needs none of them).
      %w[ipaddr shellwords securerandom].each do |lib|
        assert_empty r["features"].grep(%r{/#{lib}\.rb\z}), "#{lib} loaded by a plain server"
      end
      assert_empty r["features"].grep(%r{tsubame/fiber/(loop|scheduler|timers)\.rb\z}), "fiber mode loaded"
      assert_empty r["features"].grep(%r{tsubame/restart/(check|stand_in)\.rb\z}), "hot restart's parts loaded"
      assert_empty r["features"].grep(%r{tsubame/serve/(x_sendfile|x_accel_redirect|file_handoff|custom_logger)\.rb\z}),
                   "file hand-offs or a custom logger loaded"
      # What Puma loads, an app may use without requiring it.
      %w[time uri socket].each { |lib| refute_empty r["features"].grep(%r{/#{lib}\.rb\z}), "#{lib} not loaded" }
      # The pool thread that served the request has named itself (the
      # others may not have yet on a loaded machine: each names itself as
      # it starts, and the last to sleep takes the first request).
      assert r["threads"].any? { |name| name.match?(/\Atsubame-\d+\z/) }, r["threads"].inspect
      refute_includes r["threads"], "tsubame-timeouts"
    end
  end

  # ext/tsubame_native/build.rs: on this machine (GNU ld 2.40, glibc 2.36)
  # the relative relocations are packed, so the loader's table is kilobytes,
  # not the 500 KB it was.
  def test_the_extension_packs_its_relative_relocations
    so = File.expand_path("../../lib/tsubame/tsubame_native.so", __dir__)
    sections = `readelf -SW #{so}`
    assert $?.success?, "readelf failed"
    relr = sections[/\.relr\.dyn\s+RELR\s+\h+\s+\h+\s+(\h+)/, 1]
    refute_nil relr, sections
    rela = sections[/\.rela\.dyn\s+RELA\s+\h+\s+\h+\s+(\h+)/, 1].to_i(16)
    assert_operator rela + relr.to_i(16), :<, 64 * 1024, sections
  end

  def test_a_request_timeout_starts_the_watchdog_and_a_state_file_is_written_as_yaml
    Dir.mktmpdir do |dir|
      state = File.join(dir, "state.yml")
      with_server(REPORT_APP, lint: false, args: ["--request-timeout", "30", "-S", state]) do |s|
        # The watchdog names itself once it runs, a moment after the banner.
        assert wait_until { report(s)["threads"].include?("tsubame-timeouts") }, report(s)["threads"].inspect
        wait_for_file(state)
        require "yaml"
        assert_equal s.pid, YAML.safe_load(File.read(state))["pid"]
      end
    end
  end
end
