# frozen_string_literal: true

require "test_helper"
require "tsubame/config/loader"
require "tsubame/serve/socket_activation"
require "tsubame/serve/response_headers"
require "tsubame/serve/idle_timeout"

# Puma 7/8's DSL as a config file sees it (docs/PUMA.md): the names, the
# renamed hooks and their aliases, hook data, the Puma constant. What the
# server does with them is in puma8_server_test.rb.
class Puma8DslTest < Minitest::Test
  include Tsubame::TestHelpers

  NAMES = File.readlines(File.join(ROOT, "test/fixtures/puma8_dsl_names.txt"), chomp: true)
                .reject { |line| line.empty? || line.start_with?("#") }

  def load_source(source, &block)
    in_tmpdir do |dir|
      path = write_file(dir, "puma.rb", source)
      options = Tsubame::Options.new
      options.append(:config_files, path)
      block&.call(options)
      Tsubame::ConfigLoader.new(options, env: {}, dir: dir).load
      return options
    end
  end

  def test_every_puma8_dsl_name_is_a_directive
    assert_operator NAMES.size, :>, 80
    missing = NAMES.reject { |name| Tsubame::DSL.public_method_defined?(name) }
    assert_empty missing, "Puma 8 DSL names Tsubame's DSL lacks"
  end

  def test_renamed_hooks_and_their_aliases_share_one_list
    options = load_source(<<~RUBY)
      after_booted { :a }
      on_booted { :b }
      before_restart { :c }
      on_restart { :d }
      after_stopped { :e }
      on_stopped { :f }
      before_worker_boot { :g }
      on_worker_boot { :h }
      before_worker_shutdown { :i }
      on_worker_shutdown { :j }
      after_worker_fork { :k }
      after_worker_boot { :l }
      after_worker_shutdown { :m }
    RUBY
    { on_booted: %i[a b], on_restart: %i[c d], after_stopped: %i[e f], on_worker_boot: %i[g h],
      on_worker_shutdown: %i[i j], after_worker_fork: %i[k l], after_worker_shutdown: %i[m] }.each do |key, values|
      assert_equal values, options[key].map(&:call), key
    end
  end

  def test_hook_data_is_shared_by_key_within_a_process
    options = load_source(<<~RUBY)
      before_worker_boot(:test) { |index, data| data[:test] = index * 10 }
      before_worker_boot("other") { |_index, data| data[:seen] = data[:test] }
      before_worker_shutdown(:test) { |index, data| $hook_data_out = [index, data[:test]] }
    RUBY
    data = {}
    Tsubame::Hooks.run(options[:on_worker_boot], 3, data: data)
    Tsubame::Hooks.run(options[:on_worker_shutdown], 3, data: data)
    assert_equal [3, 30], $hook_data_out
    # A different key is a different Hash.
    assert_equal({ seen: nil }, data[:other])
  ensure
    $hook_data_out = nil
  end

  def test_hook_key_must_be_a_string_or_symbol
    error = assert_raises(Tsubame::ConfigError) { load_source("before_worker_boot(1) { }\n") }
    assert_match(/puma\.rb:1: before_worker_boot key must be a String or Symbol/, error.message)
  end

  def test_worker_shutdown_timeout_takes_zero
    assert_equal 0.0, load_source("worker_shutdown_timeout 0\n")[:worker_shutdown_timeout]
    assert_raises(Tsubame::ConfigError) { load_source("worker_shutdown_timeout(-1)\n") }
  end

  def test_keep_alive_settings
    assert_nil load_source("max_keep_alive Float::INFINITY\n").native[:max_keep_alive]
    assert_equal 20, load_source("max_keep_alive 20\n").native[:max_keep_alive]
    assert_equal 1, load_source("enable_keep_alives false\n").native[:max_keep_alive]
    assert_nil load_source("enable_keep_alives\n").native[:max_keep_alive]
    assert_equal 7, load_source("max_fast_inline 7\n").native[:max_keep_alive]
    assert_equal 5, load_source("max_keep_alive 5\nmax_fast_inline 7\n").native[:max_keep_alive]
    error = assert_raises(Tsubame::ConfigError) { load_source("max_keep_alive :lots\n") }
    assert_match(/max_keep_alive must be a non-negative number/, error.message)
  end

  def test_supported_http_methods
    assert_equal "any", load_source("supported_http_methods :any\n").native[:supported_http_methods]
    assert_equal %w[GET HEAD OPTIONS PROPFIND],
                 load_source("supported_http_methods %w[GET HEAD OPTIONS PROPFIND]\n").native[:supported_http_methods]
    assert_includes load_source("supported_http_methods Puma::Const::IANA_HTTP_METHODS\n")[:supported_http_methods], "MKCOL"
    ["[]", "%w[GET GET]", "'GET'", "['GE T']"].each do |bad|
      error = assert_raises(Tsubame::ConfigError) { load_source("supported_http_methods #{bad}\n") }
      assert_match(/supported_http_methods must be :any or a non-empty Array/, error.message)
    end
  end

  def test_set_default_host_moves_port
    options = load_source("set_default_host '127.0.0.2'\nport 4001\nport 4002, '::1'\n")
    assert_equal ["tcp://127.0.0.2:4001", "tcp://[::1]:4002"], options[:binds]
  end

  def test_get_inject_and_default_host
    options = load_source(<<~RUBY)
      threads 2, 7
      inject { workers get(:max_threads) - 5 }
      tag default_host
    RUBY
    assert_equal 2, options[:workers]
    assert_equal "0.0.0.0", options[:tag]
  end

  def test_fiber_per_request_is_fiber_mode
    assert load_source("fiber_per_request\n")[:fiber_scheduler]
    refute load_source("fiber_per_request false\n")[:fiber_scheduler]
  end

  def test_idle_timeout_custom_logger_and_io_threads
    options = load_source(<<~RUBY)
      idle_timeout 60
      custom_logger STDOUT
      max_io_threads 3
    RUBY
    assert_equal 60.0, options[:idle_timeout]
    assert_same $stdout, options[:custom_logger]
    assert_equal 3, options[:max_io_threads]
    error = assert_raises(Tsubame::ConfigError) { load_source("custom_logger 42\n") }
    assert_match(/custom_logger must respond to #write/, error.message)
  end

  def test_idle_timeout_counts_from_the_last_request
    idle = Tsubame::IdleTimeout.new(0.2)
    refute idle.idle?(1, false)
    sleep 0.3
    assert idle.idle?(1, false)
    refute idle.idle?(2, false), "a new request restarts the count"
    sleep 0.3
    refute idle.idle?(2, true), "a request in flight is not idle"
  end

  def test_bind_to_activated_sockets_values
    assert_nil load_source("bind_to_activated_sockets false\n")[:bind_to_activated_sockets]
    assert_equal true, load_source("bind_to_activated_sockets\n")[:bind_to_activated_sockets]
    assert_equal "only", load_source("bind_to_activated_sockets 'only'\n")[:bind_to_activated_sockets]
    assert_raises(Tsubame::ConfigError) { load_source("bind_to_activated_sockets :some\n") }
  end

  def test_puma_constant_in_config_files_only
    options = load_source(<<~RUBY) { |o| o[:workers] = 2 }
      Puma.cli_config._options[:workers] = 4 if Puma.cli_config._options[:workers] == 2
      tag Puma::Const::PUMA_VERSION
      threads 1, Puma.cli_config.options[:max_threads] + 1
    RUBY
    assert_equal 4, options[:workers], "a write wins over the command line, as in Puma"
    assert_equal "8.0.2", options[:tag]
    assert_equal 6, options[:threads_max]
    assert_nil defined?(::Puma), "no ::Puma for the app"
    error = assert_raises(Tsubame::ConfigError) { load_source("Puma.cli_config._options[:nakayoshi] = 1\n") }
    assert_match(/puma\.rb:1: Puma.cli_config: Tsubame has no setting :nakayoshi/, error.message)
  end

  def test_puma_stats_from_the_running_server
    source = Struct.new(:stats).new({ "workers" => 2, "worker_status" => [{ "index" => 0 }] })
    Tsubame::PumaConstant.stats_source = source
    assert_equal({ workers: 2, worker_status: [{ index: 0 }] }, Tsubame::DSL::Puma.stats_hash)
    assert_equal({ "workers" => 2, "worker_status" => [{ "index" => 0 }] }, JSON.parse(Tsubame::DSL::Puma.stats))
  ensure
    Tsubame::PumaConstant.stats_source = nil
  end

  def test_response_headers_under_rack2_and_rack3
    pairs = [%w[Content-Type text/plain], %w[Set-Cookie a=1], %w[Set-Cookie b=2]]
    assert_equal({ "Content-Type" => "text/plain", "Set-Cookie" => "a=1\nb=2" },
                 Tsubame::ResponseHeaders.normalize(pairs, false))
    assert_equal({}, Tsubame::ResponseHeaders.normalize([], false))
    error = assert_raises(TypeError) { Tsubame::ResponseHeaders.normalize([], true) }
    assert_equal "response headers must be a Hash under Rack 3 (got Array)", error.message
    assert_raises(TypeError) { Tsubame::ResponseHeaders.normalize(42, false) }
  end

  def test_single_and_cluster_blocks_run_in_their_mode
    source = "single { tag 'single' }\ncluster { tag 'cluster' }\n"
    assert_equal "single", load_source(source)[:tag]
    assert_equal "cluster", load_source(source) { |o| o[:workers] = 2 }[:tag]
  end

  def test_load_reads_another_file
    in_tmpdir do |dir|
      other = write_file(dir, "other.rb", "tag 'from other'\n")
      assert_equal "from other", load_source("load #{other.inspect}\n")[:tag]
    end
  end

  def test_allow_underscore_headers
    assert load_source("allow_underscore_headers\n").native[:allow_underscore_headers]
    refute load_source("allow_underscore_headers false\n").native[:allow_underscore_headers]
    error = assert_raises(Tsubame::ConfigError) { load_source("allow_underscore_headers :no\n") }
    assert_match(/puma\.rb:1: allow_underscore_headers must be true or false/, error.message)
  end
end
