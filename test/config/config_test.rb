# frozen_string_literal: true

require "test_helper"
require "tsubame/config/loader"

# Options, the config DSL, environment variables and how they combine.
# Nothing here needs the native extension.
class ConfigTest < Minitest::Test
  include Tsubame::TestHelpers

  NATIVE_DEFAULTS = {
    binds: ["tcp://0.0.0.0:9292"],
    backlog: 1024,
    threads_min: 0,
    threads_max: 5,
    io_threads: 1,
    max_body_size: nil,
    spool_threshold: 262_144,
    upload_dir: nil,
    max_uri_size: 12_288,
    max_header_size: 114_688,
    max_headers: 100,
    first_data_timeout: 30.0,
    persistent_timeout: 20.0,
    body_timeout: 30.0,
    drain_timeout: 30.0,
    log_requests: false,
    tcp_nodelay: true,
    request_timeout: nil,
    request_timeout_grace: 10.0,
    queue_timeout: 30.0,
    max_queue: 1024,
    max_connections: nil,
    max_spooled_uploads: 32,
    retry_after: 1,
    health_check_path: nil,
    readiness_check_path: nil,
    upload_memory: 67_108_864, readiness_queue_threshold: nil, readiness_queue_wait: 0.25, readiness_hold: 0.5, handoff_spin: 0.00005, inline: :auto,
    fiber_scheduler: false, fiber_paths: [], fiber_threads: 1, max_fibers: 10_000,
    http2: true,
    tls_ticket_rotation: 3600.0,
    h2c: false,
    h2_max_concurrent_streams: 100,
    h2_initial_window_size: 1_048_576,
    h2_initial_connection_window_size: 4_194_304,
    trust_forwarded_proto: false,
    proxy_protocol: nil,
    remote_address_header: nil,
    remote_address_value: nil,
    trusted_proxies: %w[127.0.0.0/8 ::1 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 fc00::/7],
    public_dir: nil,
    public_index: false,
    compress: false,
    compress_min_size: 1024,
    compress_types: %w[
      text/ application/json application/javascript application/xml application/xhtml+xml
      application/rss+xml application/atom+xml application/manifest+json application/ld+json
      application/wasm image/svg+xml
    ],
    websocket_max_frame: 1_048_576,
    websocket_max_message: 4_194_304,
    websocket_max_rate: 1000,
    websocket_deflate: true,
    upgrade_max_pending: 16_777_216,
    upgrade_ping_interval: 30.0,
    max_keep_alive: nil,
    supported_http_methods: nil,
    allow_underscore_headers: true,
    metrics: true,
    access_log: nil,
    access_log_file: nil,
    request_id: false,
    request_start_header: false
  }.freeze

  # Loads config as the CLI does: named files and whatever the block sets
  # go in the :cli layer first. Returns [options, loader].
  def load_config(dir, env: {}, files: nil)
    options = Tsubame::Options.new
    Array(files).each { |path| options.append(:config_files, path) }
    yield options if block_given?
    loader = Tsubame::ConfigLoader.new(options, env: env, dir: dir).load
    [options, loader]
  end

  def load_file(source, env: {}, name: "config/tsubame.rb", &block)
    in_tmpdir do |dir|
      write_file(dir, name, source)
      load_config(dir, env: env, &block)
    end
  end

  def assert_config_error(pattern, &block)
    error = assert_raises(Tsubame::ConfigError, &block)
    assert_match pattern, error.message
    error
  end

  # --- defaults -----------------------------------------------------------

  def test_native_defaults
    assert_equal NATIVE_DEFAULTS, Tsubame::Options.new.native
  end

  def test_observability_directives_and_their_errors
    options, = load_file(%(metrics_url "tcp://127.0.0.1:9394"\naccess_log :common\n))
    assert_equal "tcp://127.0.0.1:9394", options[:metrics_url]
    assert_equal "common", options.native[:access_log]
    assert_nil options.native[:access_log_file], "no path: stdout"
    options, = load_file("access_log :json\naccess_log :off\n")
    assert_nil options.native[:access_log]
    assert_config_error(%r{config/tsubame\.rb:2: access_log must be one of common, combined, json \(got :xml\)}) do
      load_file("# a comment\naccess_log :xml\n")
    end
    assert_config_error(%r{config/tsubame\.rb:1: metrics_url must be tcp://HOST:PORT or unix://PATH}) do
      load_file(%(metrics_url "http://x"\n))
    end
  end

  # The engine's own fingerprint pattern unless another is given; off is
  # an explicit nil the engine reads as "none".
  def test_public_folder_options
    in_tmpdir do |dir|
      options = Tsubame::Options.new
      options[:public_dir] = dir
      options[:public_index] = true
      assert_equal [File.expand_path(dir), true], options.native.values_at(:public_dir, :public_index)
      refute options.native.key?(:public_immutable)
      options[:public_immutable] = /-\h{8}\./
      assert_equal "-\\h{8}\\.", options.native[:public_immutable]
      options[:public_immutable] = "off"
      assert_equal [true, nil], [options.native.key?(:public_immutable), options.native[:public_immutable]]
      assert_config_error(/public_dir must be an existing directory/) { options[:public_dir] = File.join(dir, "nope") }
      assert_config_error(/public_immutable must be a Regexp/) { options[:public_immutable] = 3 }
    end
  end

  def test_compress_directive_and_type_lists
    options, = load_file("compress min_size: 512, types: %w[text/html Application/JSON]\n")
    assert_equal [true, 512, %w[text/html application/json]],
                 options.native.values_at(:compress, :compress_min_size, :compress_types)
    options[:compress_types] = "text/, image/svg+xml,,"
    assert_equal %w[text/ image/svg+xml], options.native[:compress_types]
    options, = load_file("compress false\n")
    assert_equal [false, 1024], options.native.values_at(:compress, :compress_min_size)
    assert_config_error(/compress_min_size must be a non-negative integer/) { options[:compress_min_size] = "big" }
  end

  def test_x_sendfile_roots_from_the_directive_and_flags
    in_tmpdir do |dir|
      options, = load_file("x_sendfile #{dir.inspect}\nx_sendfile #{File.join(dir, ".").inspect}\n")
      assert_equal [File.expand_path(dir)] * 2, options[:x_sendfile_roots]
      refute options.native.key?(:x_sendfile_roots), "Ruby-side: the env and the check are made there"
      options.append(:x_sendfile_roots, "/")
      assert_equal "/", options[:x_sendfile_roots].last
      assert_config_error(/x_sendfile_roots must be an existing directory/) do
        options.append(:x_sendfile_roots, File.join(dir, "missing"))
      end
    end
    assert_equal [], Tsubame::Options.new[:x_sendfile_roots]
  end

  def test_x_accel_mappings_from_the_directive_and_flags
    in_tmpdir do |dir|
      sub = FileUtils.mkdir_p(File.join(dir, "sub")).first
      options, = load_file("x_accel_redirect \"/_files/\" => #{dir.inspect}\nx_accel_redirect \"/a\": \"#{sub}/\", \"/b/c\" => #{sub.inspect}\n")
      assert_equal [["/_files/", File.expand_path(dir)], ["/a/", sub], ["/b/c/", sub]], options[:x_accel_mappings],
                   "URIs end in '/', directories are absolute without one"
      refute options.native.key?(:x_accel_mappings), "Ruby-side: the env and the check are made there"
      options.append(:x_accel_mappings, "/flag=#{dir}")
      assert_equal ["/flag/", File.expand_path(dir)], options[:x_accel_mappings].last
      Dir.chdir(dir) { options[:x_accel_mappings] = { "/rel/" => "sub" } }
      assert_equal [["/rel/", sub]], options[:x_accel_mappings]
      [
        ["files/=#{dir}", /x_accel_mappings: URI must start with '\/'/],
        ["/a,b/=#{dir}", /hold no ','/],
        ["/q?/=#{dir}", /hold no ','/],
        ["/_files/=#{File.join(dir, "missing")}", /x_accel_mappings must be an existing directory \(got ".*missing"\)/],
        ["/_files/", /x_accel_mappings entries must be URI=DIR or "URI" => "DIR" \(got "\/_files\/"\)/],
        [["/only"], /entries must be URI=DIR/],
        ["/rel=#{dir}", %r{x_accel_mappings: "/rel/" is mapped twice}]
      ].each do |entry, pattern|
        assert_config_error(pattern) { options.append(:x_accel_mappings, entry) }
      end
      comma = FileUtils.mkdir_p(File.join(dir, "a,b")).first
      assert_config_error(/directory must hold no ',' or '='/) { options.append(:x_accel_mappings, ["/c/", comma]) }
    end
    assert_equal [], Tsubame::Options.new[:x_accel_mappings]
  end

  def test_x_accel_redirect_directive_errors_name_the_line
    assert_config_error(%r{config/tsubame\.rb:2: x_accel_mappings must be an existing directory \(got "/nope/here"\)}) do
      load_file("threads 1, 2\nx_accel_redirect \"/_files/\" => \"/nope/here\"\n")
    end
    assert_config_error(%r{config/tsubame\.rb:3: x_accel_mappings: URI must start with '/'}) do
      load_file("\n\nx_accel_redirect \"_files/\" => \"/\"\n")
    end
    assert_config_error(%r{config/tsubame\.rb:1: x_accel_redirect takes "URI" => "DIR" \(got "/_files/"\)}) do
      load_file("x_accel_redirect \"/_files/\"\n")
    end
  end

  # Rack::Sendfile reads one variation from the env.
  def test_x_sendfile_and_x_accel_redirect_exclude_each_other
    in_tmpdir do |dir|
      assert_config_error(/x_sendfile and x_accel_redirect cannot both be set/) do
        load_file("x_sendfile #{dir.inspect}\nx_accel_redirect \"/_files/\" => #{dir.inspect}\n")
      end
      options, = load_file("x_accel_redirect \"/_files/\" => #{dir.inspect}\n")
      options.append(:x_sendfile_roots, dir)
      assert_config_error(/cannot both be set/) { options.native }
    end
  end

  def test_ruby_only_defaults
    options = Tsubame::Options.new
    assert_equal "development", options[:environment]
    assert_equal "config.ru", options[:rackup]
    assert_nil options[:pidfile]
    assert_nil options[:lowlevel_error_handler]
    assert_equal false, options[:quiet]
    assert_equal [], options[:config_files]
    assert_equal Tsubame::Options::DEFAULTS.keys.sort, options.to_h.keys.sort
  end

  def test_defaults_are_frozen
    assert_predicate Tsubame::Options::DEFAULTS, :frozen?
    assert_predicate Tsubame::Options::DEFAULTS[:binds], :frozen?
  end

  def test_times_are_floats_and_sizes_integers
    options = Tsubame::Options.new
    options[:drain_timeout] = 5
    options[:persistent_timeout] = "2.5"
    options[:max_body_size] = "1048576"
    native = options.native
    assert_equal 5.0, native[:drain_timeout]
    assert_kind_of Float, native[:drain_timeout]
    assert_equal 2.5, native[:persistent_timeout]
    assert_equal 1_048_576, native[:max_body_size]
  end

  # --- precedence: defaults < file < env < cli ----------------------------

  def test_precedence
    source = <<~RUBY
      threads 2, 8
      backlog 10
      environment "staging"
      io_threads 3
    RUBY
    options, = load_file(source, env: { "RAILS_MAX_THREADS" => "6", "RACK_ENV" => "production" }) do |o|
      o.set(:threads_max, 7)
      o.set(:environment, "cli")
    end
    assert_equal 10, options[:backlog], "file beats default"
    assert_equal 3, options[:io_threads], "file beats default"
    assert_equal 6, options[:threads_min], "env beats file (RAILS_MAX_THREADS sets min too)"
    assert_equal 7, options[:threads_max], "cli beats env"
    assert_equal "cli", options[:environment], "cli beats env"
    assert_equal 100, options[:max_headers], "default when nothing set it"
  end

  def test_env_beats_file_for_environment
    options, = load_file(%(environment "staging"\n), env: { "RACK_ENV" => "production" })
    assert_equal "production", options[:environment]
  end

  def test_cli_binds_replace_file_binds
    options, = load_file(%(bind "unix:///tmp/file.sock"\n)) { |o| o.append(:binds, "tcp://127.0.0.1:1") }
    assert_equal ["tcp://127.0.0.1:1"], options.native[:binds]
  end

  def test_file_binds_replace_default_and_accumulate
    options, = load_file(%(bind "unix:///tmp/a.sock"\nport 3000\nport 3001, "::1"\n))
    assert_equal ["unix:///tmp/a.sock", "tcp://0.0.0.0:3000", "tcp://[::1]:3001"], options[:binds]
  end

  # --- DSL directives -----------------------------------------------------

  def test_off_turns_off_the_optional_timeouts
    %i[request_timeout queue_timeout idle_memory_trim].each do |key|
      options = Tsubame::Options.new
      options.set(key, "off")
      assert_nil options[key], key
    end
  end

  def test_overload_settings_are_validated
    assert_raises(Tsubame::ConfigError) { load_file(%(request_timeout 0\n)) }
    assert_raises(Tsubame::ConfigError) { load_file(%(health_check_path "up"\n)) }
    assert_raises(Tsubame::ConfigError) { load_file(%(max_queue(-1)\n)) }
  end

  def test_directives_map_to_native_keys
    source = <<~RUBY
      threads 1, 16
      bind "tcp://127.0.0.1:4000"
      backlog 2048
      io_threads 2
      http_content_length_limit 10_000
      persistent_timeout 5
      first_data_timeout 7
      force_shutdown_after 12
      log_requests
      spool_threshold 1024
      upload_dir "/tmp"
      max_uri_size 4096
      max_header_size 8192
      max_headers 50
      body_timeout 9
      tcp_nodelay false
      request_timeout 15
      request_timeout_grace 3
      queue_timeout nil
      max_queue 64
      max_connections 500
      max_spooled_uploads 4
      upload_memory 1_000_000
      retry_after 2
      idle_memory_trim false
      health_check_path "/up"
      readiness_check_path "/ready"
      readiness_queue_threshold 3
      readiness_queue_wait 0.5
      readiness_hold 2
      shutdown_delay 5
      handoff_spin 0
      inline false
      fiber_scheduler
      fiber_paths "/io/", %r{\\A/api/\\d+}i
      fiber_paths "/more/"
      fiber_threads 2
      max_fibers 500
      http2 false
      tls_ticket_rotation 600
      h2c
      h2_max_concurrent_streams 10
      h2_initial_window_size 100_000
      h2_initial_connection_window_size 200_000
      trust_forwarded_proto
      set_remote_address header: "X-Real-IP"
      trusted_proxies ["10.0.0.0/8", "::1"]
      public_dir "/tmp", index: true, immutable: /\\.v\\d+\\./
      compress min_size: 256, types: ["text/html"]
      upgrade_threads 3
      websocket_max_frame 2048
      websocket_max_message 4096
      websocket_max_rate 0
      upgrade_max_pending 100_000
      upgrade_ping_interval 5
      max_keep_alive 20
      supported_http_methods %w[GET PURGE]
      allow_underscore_headers false
      access_log :json, "/tmp/access.log"
      metrics false
      request_id
      request_start_header
    RUBY
    options, = load_file(source)
    assert_equal(
      {
        binds: ["tcp://127.0.0.1:4000"], backlog: 2048, threads_min: 1, threads_max: 16,
        io_threads: 2, max_body_size: 10_000, spool_threshold: 1024, upload_dir: "/tmp", max_uri_size: 4096,
        max_header_size: 8192, max_headers: 50, first_data_timeout: 7.0, persistent_timeout: 5.0,
        body_timeout: 9.0, drain_timeout: 12.0, log_requests: true, tcp_nodelay: false,
        request_timeout: 15.0, request_timeout_grace: 3.0, queue_timeout: nil, max_queue: 64,
        max_connections: 500, max_spooled_uploads: 4, upload_memory: 1_000_000, retry_after: 2, health_check_path: "/up",
        readiness_check_path: "/ready", readiness_queue_threshold: 3, readiness_queue_wait: 0.5, readiness_hold: 2.0,
        handoff_spin: 0.0, inline: false, fiber_scheduler: true, fiber_paths: ["/io/", %r{\A/api/\d+}i, "/more/"], fiber_threads: 2, max_fibers: 500,
        http2: false, tls_ticket_rotation: 600.0, h2c: true,
        h2_max_concurrent_streams: 10, h2_initial_window_size: 100_000, h2_initial_connection_window_size: 200_000,
        trust_forwarded_proto: true, proxy_protocol: nil, remote_address_header: "X-Real-IP", remote_address_value: nil,
        trusted_proxies: ["10.0.0.0/8", "::1"],
        public_dir: "/tmp", public_index: true, public_immutable: "\\.v\\d+\\.",
        compress: true, compress_min_size: 256, compress_types: ["text/html"],
        websocket_max_frame: 2048, websocket_max_message: 4096, websocket_max_rate: 0, websocket_deflate: true,
        upgrade_max_pending: 100_000, upgrade_ping_interval: 5.0,
        max_keep_alive: 20, supported_http_methods: %w[GET PURGE], allow_underscore_headers: false,
        metrics: false, access_log: "json", access_log_file: "/tmp/access.log", request_id: true,
        request_start_header: true
      },
      options.native
    )
    assert_equal 3, options[:upgrade_threads], "Ruby-side: the handler threads"
    assert_equal 5.0, options[:shutdown_delay], "Ruby-side: the launcher and the cluster wait it out"
  end

  # Puma's set_remote_address forms; each replaces the others.
  def test_set_remote_address_forms
    cases = {
      "set_remote_address" => [nil, nil, nil],
      "set_remote_address :socket" => [nil, nil, nil],
      "set_remote_address :localhost" => [nil, "127.0.0.1", nil],
      "set_remote_address \"1.2.3.4\"" => [nil, "1.2.3.4", nil],
      "set_remote_address header: \"X-Forwarded-For\"" => ["X-Forwarded-For", nil, nil],
      "set_remote_address proxy_protocol: :v1" => [nil, nil, "v1"],
      "set_remote_address proxy_protocol: \"V2\"" => [nil, nil, "v2"],
      "set_remote_address \"9.9.9.9\"\nset_remote_address header: \"X-Real-IP\"" => ["X-Real-IP", nil, nil]
    }
    cases.each do |source, expected|
      options, = load_file("#{source}\n")
      assert_equal expected, options.native.values_at(:remote_address_header, :remote_address_value, :proxy_protocol), source
    end
    [
      ["set_remote_address proxy_protocol: :v3", /proxy_protocol must be v1 or v2/],
      ["set_remote_address header: \"X Forwarded\"", /must be a header name/],
      ["set_remote_address header: \"A\", proxy_protocol: :v1", /one of header: or proxy_protocol:/],
      ["set_remote_address 42", /set_remote_address takes/],
      ["trusted_proxies [\"10.0.0.0/33\"]", %r{"10\.0\.0\.0/33" is not an address or CIDR range}],
      ["trusted_proxies \"example.com\"", /is not an address or CIDR range/]
    ].each do |source, pattern|
      assert_config_error(pattern) { load_file("#{source}\n") }
    end
  end

  def test_ssl_bind_early_hints_and_self_signed
    source = <<~'RUBY'
      ssl_bind "127.0.0.1", 9443, cert: "/etc/tls/a b.pem", key: "/etc/tls/k&1.pem", ca: "/ca.pem", verify_mode: "peer"
      ssl_bind "::1", "9444", { cert: "c.pem", key: "k.pem" }
      early_hints
      tls_self_signed
    RUBY
    options, = load_file(source)
    assert_equal ["ssl://127.0.0.1:9443?cert=/etc/tls/a%20b.pem&key=/etc/tls/k%261.pem&ca=/ca.pem&verify_mode=peer",
                  "ssl://[::1]:9444?cert=c.pem&key=k.pem"], options[:binds]
    assert options[:early_hints]
    assert options[:tls_self_signed]
    refute options.native.key?(:early_hints), "early_hints is the Ruby side's (it builds the env key)"
    assert_config_error(/h2_initial_window_size must be a whole number from 65535/) do
      load_file("h2_initial_window_size 100\n")
    end
  end

  def test_aliases
    options, = load_file("max_body_size 5\ndrain_timeout 3\n")
    assert_equal 5, options[:max_body_size]
    assert_equal 3.0, options[:drain_timeout]
  end

  def test_ruby_only_directives
    source = <<~RUBY
      environment "production"
      rackup "app.ru"
      pidfile "tmp/tsubame.pid"
      lowlevel_error_handler { |exception, env, status| [500, {}, [exception.message, env.size.to_s, status.to_s]] }
    RUBY
    options, = load_file(source)
    assert_equal "production", options[:environment]
    assert_equal "app.ru", options[:rackup]
    assert_equal "tmp/tsubame.pid", options[:pidfile]
    handler = options[:lowlevel_error_handler]
    assert_equal [500, {}, %w[boom 0 500]], handler.call(RuntimeError.new("boom"), {}, 500)
  end

  def test_lowlevel_error_handler_takes_a_callable
    callable = ->(_exception, _env, _status) { [500, {}, []] }
    options = Tsubame::Options.new
    options[:lowlevel_error_handler] = callable
    assert_same callable, options[:lowlevel_error_handler]
    assert_config_error(/lowlevel_error_handler must respond to #call/) { options[:lowlevel_error_handler] = 1 }
  end

  def test_quiet_and_log_requests
    options, = load_file("log_requests\nquiet\n")
    assert_equal false, options.native[:log_requests]
    options, = load_file("quiet\nlog_requests\n")
    assert_equal true, options.native[:log_requests]
    # -q on the command line beats log_requests in the file, and -v beats quiet.
    options, = load_file("log_requests\n") { |o| o.set(:quiet, true) }
    assert_equal false, options.native[:log_requests]
  end

  def test_puma_constants_resolve
    options, = load_file("rackup DefaultRackup\nport DefaultTCPPort, DefaultTCPHost\n")
    assert_equal "config.ru", options[:rackup]
    assert_equal ["tcp://0.0.0.0:9292"], options[:binds]
  end

  def test_force_shutdown_after_immediately
    options, = load_file("force_shutdown_after :immediately\n")
    assert_equal 0.0, options[:drain_timeout]
  end

  def test_reforking_directives_set_options_and_unknown_plugins_are_collected
    source = <<~RUBY
      fork_worker
      nakayoshi_fork
      threads 1, 4
      before_refork do
        raise "never called"
      end
      plugin :heroku
      plugin :tmp_restart
    RUBY
    options, loader = load_file(source, name: "config/puma.rb")
    assert_equal 4, options[:threads_max]
    assert_equal 1000, options[:fork_worker], "Puma's default count"
    assert options[:nakayoshi_fork]
    assert_equal 1, options[:before_refork].size
    assert options[:tmp_restart], "a plugin Tsubame has is not ignored"
    assert_equal 1, loader.ignored.size
    assert_match(/\Aplugin :heroku \(.*config\/puma\.rb:7\)\z/, loader.ignored.first)
  end

  def test_unknown_directive_names_file_and_line
    error = assert_raises(Tsubame::ConfigError) { load_file("threads 1, 2\n\nfrobnicate 3\n") }
    assert_match %r{config/tsubame\.rb:3: unknown directive 'frobnicate'\z}, error.message
  end

  def test_unknown_directive_without_arguments
    assert_config_error(%r{config/tsubame\.rb:2: unknown directive 'frobnicate'\z}) { load_file("\nfrobnicate\n") }
  end

  def test_syntax_error_names_file_and_line
    error = assert_raises(Tsubame::ConfigError) { load_file("threads 1, 2\nport(\n\n") }
    assert_match %r{config/tsubame\.rb:\d+: syntax error}, error.message
    refute_includes error.message, "\n"
  end

  def test_exception_in_file_names_file_and_line
    assert_config_error(%r{config/tsubame\.rb:2: boom \(RuntimeError\)\z}) { load_file("threads 1, 2\nraise 'boom'\n") }
  end

  def test_bad_value_names_file_and_line
    assert_config_error(%r{config/tsubame\.rb:2: backlog must be a positive integer}) { load_file("\nbacklog(-1)\n") }
  end

  # --- config file lookup ---------------------------------------------------

  def test_default_files_in_order
    in_tmpdir do |dir|
      write_file(dir, "config/puma.rb", "backlog 1\n")
      assert_equal 1, load_config(dir).first[:backlog]
      write_file(dir, "config/puma/development.rb", "backlog 2\n")
      assert_equal 2, load_config(dir).first[:backlog]
      write_file(dir, "config/tsubame.rb", "backlog 3\n")
      assert_equal 3, load_config(dir).first[:backlog]
      write_file(dir, "config/tsubame/development.rb", "backlog 4\n")
      assert_equal 4, load_config(dir).first[:backlog]
      assert_equal 3, load_config(dir, env: { "RACK_ENV" => "production" }).first[:backlog]
      _, loader = load_config(dir)
      assert_equal [File.join(dir, "config/tsubame/development.rb")], loader.loaded_files
    end
  end

  def test_named_config_file
    in_tmpdir do |dir|
      write_file(dir, "config/tsubame.rb", "backlog 3\n")
      other = write_file(dir, "other.rb", "backlog 9\n")
      assert_equal 9, load_config(dir, files: other).first[:backlog]
      assert_equal 1024, load_config(dir, files: "-").first[:backlog]
      assert_config_error(/config file not found: .*missing\.rb/) { load_config(dir, files: File.join(dir, "missing.rb")) }
    end
  end

  # --- environment variables ----------------------------------------------

  def test_port_moves_the_default_bind_only
    in_tmpdir do |dir|
      assert_equal ["tcp://0.0.0.0:4567"], load_config(dir, env: { "PORT" => "4567" }).first.native[:binds]
      options, = load_config(dir, env: { "PORT" => "4567" }) { |o| o.append(:binds, "tcp://127.0.0.1:1") }
      assert_equal ["tcp://127.0.0.1:1"], options.native[:binds]
      assert_config_error(/\APORT: invalid port "http"/) { load_config(dir, env: { "PORT" => "http" }) }
    end
    options, = load_file("port 3000\n", env: { "PORT" => "4567" })
    assert_equal ["tcp://0.0.0.0:3000"], options.native[:binds]
  end

  def test_environment_variables_for_environment
    in_tmpdir do |dir|
      assert_equal "development", load_config(dir).first[:environment]
      assert_equal "test", load_config(dir, env: { "RAILS_ENV" => "test" }).first[:environment]
      both = { "RACK_ENV" => "production", "RAILS_ENV" => "test" }
      assert_equal "production", load_config(dir, env: both).first[:environment]
      options, = load_config(dir, env: both) { |o| o.set(:environment, "cli") }
      assert_equal "cli", options[:environment]
    end
  end

  def test_rails_max_threads_sets_both_bounds
    in_tmpdir do |dir|
      options, = load_config(dir, env: { "RAILS_MAX_THREADS" => "8" })
      assert_equal [8, 8], [options[:threads_min], options[:threads_max]]
      options, = load_config(dir, env: { "RAILS_MAX_THREADS" => "8", "RAILS_MIN_THREADS" => "2" })
      assert_equal [2, 8], [options[:threads_min], options[:threads_max]]
      # Puma's own variable leaves min alone.
      options, = load_config(dir, env: { "PUMA_MAX_THREADS" => "3" })
      assert_equal [0, 3], [options[:threads_min], options[:threads_max]]
      assert_config_error(/\ARAILS_MAX_THREADS: threads_max must be a positive integer/) do
        load_config(dir, env: { "RAILS_MAX_THREADS" => "many" })
      end
    end
  end

  def test_web_concurrency_is_the_default_worker_count
    in_tmpdir do |dir|
      options, loader = load_config(dir, env: { "WEB_CONCURRENCY" => "4" })
      assert_equal 4, options[:workers]
      assert_empty loader.ignored
      assert_equal 0, load_config(dir).first[:workers]
      # As in Puma, the config file's `workers` wins over it...
      write_file(dir, "config/puma.rb", "workers 2\n")
      assert_equal 2, load_config(dir, env: { "WEB_CONCURRENCY" => "4" }).first[:workers]
      # ...and so does -w.
      options, = load_config(dir, env: { "WEB_CONCURRENCY" => "4" }) { |o| o.set(:workers, 3) }
      assert_equal 3, options[:workers]
      assert_config_error(/\AWEB_CONCURRENCY: workers must be a non-negative integer/) do
        load_config(dir, env: { "WEB_CONCURRENCY" => "lots" })
      end
    end
  end

  # --- validation -----------------------------------------------------------

  def test_thread_validation
    options = Tsubame::Options.new
    assert_config_error(/threads_max must be a positive integer \(got 0\)/) { options.set_threads(0, 0) }
    assert_config_error(/min threads \(5\) must not be greater than max threads \(2\)/) { options.set_threads(5, 2) }
    assert_config_error(/invalid threads "x"/) { Tsubame::Options.parse_threads("x") }
    assert_equal [4, 4], Tsubame::Options.parse_threads("4")
    assert_equal [1, 8], Tsubame::Options.parse_threads("1:8")
  end

  def test_cross_layer_thread_range_is_checked
    error = assert_raises(Tsubame::ConfigError) { load_file("threads 4, 8\n", env: { "MAX_THREADS" => "2" }) }
    assert_match(/min threads \(4\) must not be greater than max threads \(2\)/, error.message)
  end

  def test_negative_sizes_and_timeouts
    options = Tsubame::Options.new
    assert_config_error(/max_body_size must be a non-negative integer or nil/) { options[:max_body_size] = -1 }
    assert_config_error(/spool_threshold must be a non-negative integer/) { options[:spool_threshold] = -5 }
    assert_config_error(/upload_dir must be an existing, writable directory \(got "\/nonexistent-tsubame"\)/) do
      options[:upload_dir] = "/nonexistent-tsubame"
    end
    assert_config_error(/drain_timeout must be a non-negative number of seconds/) { options[:drain_timeout] = -0.5 }
    assert_config_error(/persistent_timeout must be a non-negative number of seconds/) do
      options[:persistent_timeout] = Float::INFINITY
    end
    assert_config_error(/backlog must be a positive integer \(got "ten"\)/) { options[:backlog] = "ten" }
    assert_config_error(/log_requests must be true or false/) { options[:log_requests] = "yes" }
    assert_config_error(/unknown option 'frobnicate'/) { options[:frobnicate] = 1 }
  end

  def test_bind_forms
    options = Tsubame::Options.new
    valid = %w[
      tcp://0.0.0.0:9292 tcp://127.0.0.1:0 tcp://[::1]:80 tcp://localhost:3000
      unix:///tmp/x.sock unix://relative.sock ssl://0.0.0.0:443?key=k.pem&cert=c.pem
    ]
    valid.each { |uri| options.append(:binds, uri) }
    assert_equal valid, options[:binds]
    %w[http://0.0.0.0:80 tcp://0.0.0.0 tcp://0.0.0.0:70000 0.0.0.0:9292 unix://].each do |uri|
      assert_config_error(/invalid (bind|port)/) { options.append(:binds, uri) }
    end
  end
end
