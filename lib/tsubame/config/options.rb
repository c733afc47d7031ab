# frozen_string_literal: true

require "tsubame/errors"
require "tsubame/config/bind_uri"

module Tsubame
  # The one place that knows every setting, its default and its valid values.
  #
  # Each source writes to its own layer and a read returns the value from the
  # highest layer that has one, so precedence does not depend on the order in
  # which sources happen to be applied:
  #
  #   :default  built-in DEFAULTS, plus the few things that only move a
  #             default (PORT, defaults handed over by a Rack launcher)
  #   :file     config file directives
  #   :env      environment variables
  #   :cli      command-line flags, Rack handler options, and #[]=
  class Options
    DEFAULT_HOST = "0.0.0.0"
    DEFAULT_PORT = 9292

    DEFAULTS = {
      binds: ["tcp://#{DEFAULT_HOST}:#{DEFAULT_PORT}"].freeze,
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
      upload_memory: 67_108_864,
      retry_after: 1,
      idle_memory_trim: 10.0,
      health_check_path: nil,
      readiness_check_path: nil,
      readiness_queue_threshold: nil,
      readiness_queue_wait: 0.25,
      readiness_hold: 0.5,
      shutdown_delay: 0.0,
      handoff_spin: 0.00005,
      # :auto is on when it applies: one app thread, one I/O thread, no fibers.
      inline: :auto,
      fiber_scheduler: false,
      fiber_paths: [].freeze,
      fiber_threads: 1,
      max_fibers: 10_000,
      # TLS and HTTP/2 (docs/TLS_HTTP2.md).
      http2: true,
      h2c: false,
      h2_max_concurrent_streams: 100,
      h2_initial_window_size: 1_048_576,
      h2_initial_connection_window_size: 4_194_304,
      trust_forwarded_proto: false,
      # Behind a proxy (docs/PROXY.md): a PROXY header on every bind
      # ("v1"/"v2"), and what REMOTE_ADDR says: a header walked past the
      # trusted proxies, or a fixed value; neither is the socket's peer.
      proxy_protocol: nil,
      remote_address_header: nil,
      remote_address_value: nil,
      trusted_proxies: %w[127.0.0.0/8 ::1 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 fc00::/7].freeze,
      # The public folder (docs/FILES.md). :fingerprint is the engine's own
      # pattern for fingerprinted names.
      public_dir: nil,
      public_index: false,
      public_immutable: :fingerprint,
      x_sendfile_roots: [].freeze,
      # X-Accel-Redirect: [URI prefix, directory] pairs (docs/FILES.md).
      x_accel_mappings: [].freeze,
      # Response compression by the engine (docs/FILES.md).
      compress: false,
      compress_min_size: 1024,
      compress_types: %w[
        text/ application/json application/javascript application/xml application/xhtml+xml
        application/rss+xml application/atom+xml application/manifest+json application/ld+json
        application/wasm image/svg+xml
      ].freeze,
      early_hints: false,
      # rack.upgrade: WebSockets and SSE held by the engine (docs/WEBSOCKETS.md).
      upgrade_threads: 2,
      websocket_max_frame: 1_048_576,
      websocket_max_message: 4_194_304,
      websocket_max_rate: 1000,
      websocket_deflate: true,
      upgrade_max_pending: 16_777_216,
      upgrade_ping_interval: 30.0,
      # Tsubame.publish across a cluster (docs/REALTIME.md): bytes held for
      # one worker (at the master, and for its Ruby listeners) before
      # messages for it are dropped.
      publish_buffer: 4_194_304,
      # Cluster mode: this many more workers that serve every WebSocket
      # connection, handed over by the others (docs/REALTIME.md).
      websocket_workers: 0,
      tls_self_signed: false,
      # Observability (docs/OBSERVABILITY.md): engine-kept metrics for
      # /metrics (and, optionally, a bind of their own), the access log,
      # X-Request-Id and X-Request-Start.
      metrics: true,
      metrics_url: nil,
      access_log: nil,
      access_log_file: nil,
      request_id: false,
      request_start_header: false,
      tls_ticket_rotation: 3600.0,
      environment: "development",
      rackup: "config.ru",
      pidfile: nil,
      lowlevel_error_handler: nil,
      quiet: false,
      config_files: [].freeze,
      # Cluster mode (docs/SIGNALS.md, README "Cluster mode").
      workers: 0,
      preload_app: false,
      worker_timeout: 60.0,
      worker_boot_timeout: nil,
      worker_shutdown_timeout: nil,
      worker_check_interval: 1.0,
      worker_max_requests: nil,
      worker_max_memory: nil,
      control_url: nil,
      control_token: nil,
      state_path: nil,
      redirect_stdout: nil,
      redirect_stderr: nil,
      redirect_append: false,
      tag: nil,
      tmp_restart: false,
      wait_for_less_busy_worker: 0.025,
      before_fork: [].freeze,
      on_worker_boot: [].freeze,
      on_worker_shutdown: [].freeze,
      after_worker_fork: [].freeze,
      on_booted: [].freeze,
      on_restart: [].freeze,
      # Puma 7/8 directives (docs/PUMA.md). max_keep_alive nil: no limit;
      # supported_http_methods nil: the engine's list, "any": every method.
      after_stopped: [].freeze,
      after_worker_shutdown: [].freeze,
      max_keep_alive: nil,
      enable_keep_alives: true,
      supported_http_methods: nil,
      idle_timeout: nil,
      custom_logger: nil,
      default_host: DEFAULT_HOST,
      bind_to_activated_sockets: nil,
      max_io_threads: 0,
      allow_underscore_headers: true,
      single_blocks: [].freeze,
      cluster_blocks: [].freeze,
      # Reforking (docs/REFORK.md): nil off; N: workers 1.. fork from
      # worker 0, and refork once after it served N requests (0: only on
      # `ctl refork` / URG).
      fork_worker: nil,
      nakayoshi_fork: false,
      before_refork: [].freeze,
      after_refork: [].freeze,
      before_worker_fork: [].freeze,
      # Puma's other directives (docs/PUMA.md, "Every Puma directive").
      app: nil,
      directory: nil,
      before_thread_start: [].freeze,
      before_thread_exit: [].freeze,
      out_of_band: [].freeze,
      clean_thread_locals: false,
      rack_url_scheme: nil,
      log_formatter: nil,
      state_permission: nil,
      worker_culling_strategy: :youngest,
      raise_exception_on_sigterm: false,
      restart_command: nil,
      debug: false,
      shutdown_debug: false,
      drain_on_shutdown: false,
      sync_stdout: true,
      silence_single_worker_warning: false,
      silence_fork_callback_warning: false
    }.freeze

    # What the Rust engine receives; everything else stays on the Ruby side.
    NATIVE_KEYS = %i[
      binds backlog threads_min threads_max io_threads max_body_size
      spool_threshold upload_dir max_uri_size max_header_size max_headers
      first_data_timeout persistent_timeout body_timeout drain_timeout
      log_requests tcp_nodelay request_timeout request_timeout_grace
      queue_timeout max_queue max_connections max_spooled_uploads upload_memory retry_after
      health_check_path readiness_check_path readiness_queue_threshold
      readiness_queue_wait readiness_hold handoff_spin inline fiber_scheduler fiber_paths fiber_threads max_fibers
      http2 tls_ticket_rotation h2c h2_max_concurrent_streams h2_initial_window_size
      h2_initial_connection_window_size trust_forwarded_proto
      proxy_protocol remote_address_header remote_address_value trusted_proxies
      public_dir public_index public_immutable compress compress_min_size compress_types
      websocket_max_frame websocket_max_message websocket_max_rate websocket_deflate upgrade_max_pending upgrade_ping_interval
      max_keep_alive supported_http_methods allow_underscore_headers
      metrics access_log access_log_file request_id request_start_header
    ].freeze

    KINDS = {
      binds: :binds,
      backlog: :positive_integer,
      threads_min: :integer,
      threads_max: :positive_integer,
      io_threads: :positive_integer,
      max_body_size: :optional_integer,
      spool_threshold: :integer,
      upload_dir: :optional_directory,
      max_uri_size: :positive_integer,
      max_header_size: :positive_integer,
      max_headers: :positive_integer,
      first_data_timeout: :seconds,
      persistent_timeout: :seconds,
      body_timeout: :seconds,
      drain_timeout: :seconds,
      log_requests: :boolean,
      tcp_nodelay: :boolean,
      request_timeout: :optional_seconds,
      request_timeout_grace: :seconds,
      queue_timeout: :optional_seconds,
      max_queue: :optional_integer,
      max_connections: :optional_integer,
      max_spooled_uploads: :positive_integer,
      upload_memory: :integer,
      retry_after: :integer,
      idle_memory_trim: :optional_seconds,
      health_check_path: :optional_path,
      readiness_check_path: :optional_path,
      readiness_queue_threshold: :optional_integer,
      readiness_queue_wait: :timeout,
      readiness_hold: :seconds,
      shutdown_delay: :seconds,
      handoff_spin: :seconds,
      inline: :inline_mode,
      fiber_scheduler: :boolean,
      fiber_paths: :fiber_paths,
      fiber_threads: :positive_integer,
      max_fibers: :optional_positive_integer,
      http2: :boolean,
      h2c: :boolean,
      h2_max_concurrent_streams: :positive_integer,
      h2_initial_window_size: :window_size,
      h2_initial_connection_window_size: :window_size,
      trust_forwarded_proto: :boolean,
      proxy_protocol: :proxy_protocol,
      remote_address_header: :header_name,
      remote_address_value: :optional_string,
      trusted_proxies: :cidrs,
      public_dir: :public_dir,
      public_index: :boolean,
      public_immutable: :public_immutable,
      x_sendfile_roots: :directories,
      x_accel_mappings: :accel_mappings,
      compress: :boolean,
      compress_min_size: :integer,
      compress_types: :content_types,
      early_hints: :boolean,
      upgrade_threads: :positive_integer,
      websocket_max_frame: :positive_integer,
      websocket_max_message: :positive_integer,
      websocket_max_rate: :integer,
      websocket_deflate: :boolean,
      upgrade_max_pending: :positive_integer,
      publish_buffer: :positive_integer,
      websocket_workers: :integer,
      upgrade_ping_interval: :timeout,
      tls_self_signed: :boolean,
      metrics: :boolean,
      metrics_url: :optional_control_url,
      access_log: :access_log_format,
      access_log_file: :optional_string,
      request_id: :boolean,
      request_start_header: :boolean,
      tls_ticket_rotation: :seconds,
      environment: :string,
      rackup: :string,
      pidfile: :optional_string,
      lowlevel_error_handler: :optional_callable,
      quiet: :boolean,
      config_files: :strings,
      workers: :integer,
      preload_app: :boolean,
      worker_timeout: :timeout,
      worker_boot_timeout: :optional_timeout,
      # 0 as in Puma: killed at the first check after TERM.
      worker_shutdown_timeout: :optional_delay,
      worker_check_interval: :timeout,
      worker_max_requests: :optional_positive_integer,
      worker_max_memory: :optional_megabytes,
      control_url: :optional_control_url,
      control_token: :optional_string,
      state_path: :optional_string,
      redirect_stdout: :optional_string,
      redirect_stderr: :optional_string,
      redirect_append: :boolean,
      tag: :optional_string,
      tmp_restart: :boolean,
      wait_for_less_busy_worker: :optional_delay,
      before_fork: :hooks,
      on_worker_boot: :hooks,
      on_worker_shutdown: :hooks,
      after_worker_fork: :hooks,
      on_booted: :hooks,
      on_restart: :hooks,
      after_stopped: :hooks,
      after_worker_shutdown: :hooks,
      max_keep_alive: :keep_alive_requests,
      enable_keep_alives: :boolean,
      supported_http_methods: :http_methods,
      idle_timeout: :optional_seconds,
      custom_logger: :optional_logger,
      default_host: :string,
      bind_to_activated_sockets: :activated_sockets,
      max_io_threads: :integer,
      allow_underscore_headers: :boolean,
      single_blocks: :hooks,
      cluster_blocks: :hooks,
      fork_worker: :optional_integer,
      nakayoshi_fork: :boolean,
      before_refork: :hooks,
      after_refork: :hooks,
      before_worker_fork: :hooks,
      app: :optional_callable,
      directory: :optional_existing_directory,
      before_thread_start: :hooks,
      before_thread_exit: :hooks,
      out_of_band: :hooks,
      clean_thread_locals: :boolean,
      rack_url_scheme: :optional_url_scheme,
      log_formatter: :optional_callable,
      state_permission: :optional_file_mode,
      worker_culling_strategy: :culling_strategy,
      raise_exception_on_sigterm: :boolean,
      restart_command: :optional_string,
      debug: :boolean,
      shutdown_debug: :shutdown_debug,
      drain_on_shutdown: :boolean,
      sync_stdout: :boolean,
      silence_single_worker_warning: :boolean,
      silence_fork_callback_warning: :boolean
    }.freeze

    LIST_KINDS = %i[binds strings hooks fiber_paths directories accel_mappings cidrs].freeze

    LAYERS = %i[default file env cli].freeze

    # An HTTP method is a token (RFC 9110 §9.1).
    METHOD_TOKEN = /\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\z/.freeze

    THREADS_FORM = /\A\s*(\d+)\s*(?::\s*(\d+)\s*)?\z/.freeze

    # "MIN:MAX", or "N" meaning N:N as Puma's -t does.
    def self.parse_threads(spec)
      match = THREADS_FORM.match(spec.to_s)
      raise ConfigError, "invalid threads #{spec.to_s.inspect}: expected MIN:MAX or N" unless match

      min = Integer(match[1], 10)
      [min, match[2] ? Integer(match[2], 10) : min]
    end

    def initialize
      @layers = LAYERS.to_h { |layer| [layer, {}] }
    end

    def [](key)
      check_key(key)
      LAYERS.reverse_each do |layer|
        values = @layers[layer]
        next unless values.key?(key)
        # An empty list means "not given here", so a layer that never bound
        # anything does not hide the binds of the layers below it.
        return values[key] unless values[key].is_a?(Array) && values[key].empty?
      end
      DEFAULTS[key]
    end

    def []=(key, value)
      set(key, value)
    end

    def set(key, value, layer: :cli)
      layer_values(layer)[check_key(key)] = coerce(key, value)
    end

    # For the list settings (binds, config_files): adds to what this layer
    # already has instead of replacing it, as repeated -b flags or bind
    # directives do.
    def append(key, value, layer: :cli)
      raise ConfigError, "#{key} is not a list" unless LIST_KINDS.include?(KINDS[check_key(key)])

      values = layer_values(layer)
      values[key] = coerce(key, Array(values[key]) + [value])
    end

    def clear(key, layer: :cli)
      layer_values(layer).delete(check_key(key))
    end

    # Checked as a pair so a config file line or a flag can report a bad
    # combination at the place where it was written.
    def set_threads(min, max, layer: :cli)
      min = coerce(:threads_min, min)
      max = coerce(:threads_max, max)
      check_thread_range(min, max)
      set(:threads_min, min, layer: layer)
      set(:threads_max, max, layer: layer)
    end

    # Catches combinations no single source got wrong, e.g. MAX_THREADS=2
    # with a config file asking for at least 4.
    def validate!
      check_thread_range(self[:threads_min], self[:threads_max])
      check_sendfile_variation
      self
    end

    def to_h
      DEFAULTS.keys.to_h { |key| [key, self[key]] }
    end

    def native
      validate!
      hash = NATIVE_KEYS.to_h { |key| [key, self[key]] }
      # quiet is the stronger word: `-q` silences request logs even when a
      # config file turned them on.
      hash[:log_requests] = hash[:log_requests] && !self[:quiet]
      # A custom_logger gets the request log instead (CustomLogger::RequestLog).
      hash[:log_requests] = false if self[:custom_logger]
      hash[:binds] = hash[:binds].dup
      # enable_keep_alives false: every response closes its connection.
      hash[:max_keep_alive] = 1 unless self[:enable_keep_alives]
      # Absent: the engine's default pattern.
      hash.delete(:public_immutable) if hash[:public_immutable] == :fingerprint
      hash
    end

    private

    def layer_values(layer)
      @layers.fetch(layer) { raise ArgumentError, "unknown layer #{layer.inspect}" }
    end

    def check_key(key)
      return key if KINDS.key?(key)

      raise ConfigError, "unknown option '#{key}'"
    end

    # Rack::Sendfile takes one variation from the env, so a server offers
    # one; which to drop is the user's choice, not a silent precedence.
    def check_sendfile_variation
      return if self[:x_sendfile_roots].empty? || self[:x_accel_mappings].empty?

      raise ConfigError, "x_sendfile and x_accel_redirect cannot both be set: Rack::Sendfile uses one variation per server"
    end

    def check_thread_range(min, max)
      return if min <= max

      raise ConfigError, "min threads (#{min}) must not be greater than max threads (#{max})"
    end

    # One check per kind of value (KINDS); every option has one.
    def coerce(key, value)
      case KINDS.fetch(key)
      when :binds then coerce_binds(value)
      when :integer then integer(key, value, 0, "a non-negative integer")
      when :positive_integer then integer(key, value, 1, "a positive integer")
      when :optional_integer then value.nil? ? nil : integer(key, value, 0, "a non-negative integer or nil")
      when :seconds then seconds(key, value)
      # "off" is how a flag (a string) says what nil or false say in a config file.
      when :optional_seconds then [nil, false, "off"].include?(value) ? nil : positive_seconds(key, value)
      when :optional_path then value.nil? ? nil : path(key, value)
      when :optional_directory then value.nil? ? nil : directory(key, value)
      when :boolean then boolean(key, value)
      when :string then string(key, value)
      when :optional_string then value.nil? ? nil : string(key, value)
      when :optional_callable then callable(key, value)
      when :strings then Array(value).map { |item| string(key, item) }.freeze
      when :timeout then timeout(key, value)
      when :optional_timeout then value.nil? ? nil : timeout(key, value)
      when :optional_positive_integer then value.nil? ? nil : integer(key, value, 1, "a positive integer or nil")
      when :optional_megabytes then value.nil? ? nil : megabytes(key, value)
      when :optional_control_url then value.nil? ? nil : control_url(key, value)
      when :optional_delay then value.nil? || value == false ? nil : seconds(key, value)
      when :hooks then Array(value).map { |hook| callable(key, hook) }.freeze
      when :fiber_paths then Array(value).map { |path| fiber_path(key, path) }.freeze
      when :window_size then window_size(key, value)
      when :public_dir then value.nil? ? nil : public_dir(key, value)
      when :public_immutable then public_immutable(key, value)
      when :directories then Array(value).map { |dir| public_dir(key, dir) }.freeze
      when :accel_mappings then accel_mappings(key, value)
      when :content_types then content_types(key, value)
      when :proxy_protocol then proxy_protocol(key, value)
      when :header_name then value.nil? ? nil : header_name(key, value)
      when :cidrs then cidrs(key, value)
      when :access_log_format then access_log_format(key, value)
      when :keep_alive_requests then keep_alive_requests(key, value)
      when :http_methods then http_methods(key, value)
      when :optional_logger then value.nil? ? nil : logger(key, value)
      when :activated_sockets then activated_sockets(key, value)
      when :optional_existing_directory then value.nil? ? nil : existing_directory(key, value)
      when :optional_url_scheme then value.nil? ? nil : url_scheme(key, value)
      when :optional_file_mode then value.nil? ? nil : integer(key, value, 0, "a file mode such as 0640")
      when :culling_strategy then culling_strategy(key, value)
      when :inline_mode then inline_mode(key, value)
      when :shutdown_debug then [true, false, :on_force].include?(value) ? value : boolean(key, value)
      end
    end

    # --- Puma 7/8 directives ------------------------------------------------

    # Puma takes any number, Float::INFINITY for no limit; nil here too.
    # 0 closes after every request, as 1 does (Puma's comparison).
    def keep_alive_requests(key, value)
      return nil if value.nil? || value == Float::INFINITY

      number = Float(value)
      return number.floor if number.finite? && number >= 0

      raise ArgumentError
    rescue ArgumentError, TypeError
      raise ConfigError, "#{key} must be a non-negative number of requests or Float::INFINITY (got #{value.inspect})"
    end

    # :any (or "any"), or a list of distinct method names: tokens, as sent.
    def http_methods(key, value)
      return nil if value.nil?
      return "any" if value.to_s == "any"

      list = value.is_a?(Array) ? value : []
      valid = !list.empty? && list.all? { |m| m.is_a?(String) && m.match?(METHOD_TOKEN) } && list.uniq.size == list.size
      return list.map { |m| m.dup.freeze }.freeze if valid

      raise ConfigError, "#{key} must be :any or a non-empty Array of distinct method names such as %w[GET POST] " \
                         "(got #{value.inspect})"
    end

    # Puma calls #write with each log line.
    def logger(key, value)
      return value if value.respond_to?(:write)

      raise ConfigError, "#{key} must respond to #write (got #{value.inspect})"
    end

    # nil/false: only binds that name an activated socket use it; true:
    # every activated socket is served besides the binds; "only": the
    # activated sockets replace the binds.
    def activated_sockets(key, value)
      case value
      when nil, false then nil
      when true then true
      when "only", :only then "only"
      else raise ConfigError, "#{key} takes true, false or 'only' (got #{value.inspect})"
      end
    end

    # The kinds of Puma's directives that came with issue 20.
    ACCESS_LOG_FORMATS = %w[common combined json].freeze

    # nil, false or off (a Symbol in a config file, a String from a flag): none.
    def access_log_format(key, value)
      return nil if [nil, false, "off", :off].include?(value)
      return value.to_s.freeze if ACCESS_LOG_FORMATS.include?(value.to_s)

      raise ConfigError, "#{key} must be one of #{ACCESS_LOG_FORMATS.join(", ")} (got #{value.inspect})"
    end

    # nil, false or "off": none; v1/v2 (Symbol or String, "1"/"2" too).
    def proxy_protocol(key, value)
      return nil if [nil, false, "off"].include?(value)

      version = value.to_s.downcase
      version = "v#{version}" if %w[1 2].include?(version)
      return version.freeze if %w[v1 v2].include?(version)

      raise ConfigError, "#{key} must be v1 or v2 (got #{value.inspect})"
    end

    # An HTTP field name (a token), as the header is sent: X-Forwarded-For.
    def header_name(key, value)
      text = string(key, value)
      return text if text.match?(/\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\z/)

      raise ConfigError, "#{key} must be a header name such as X-Forwarded-For (got #{value.inspect})"
    end

    # A list, or one String of comma-separated entries (a flag); each an
    # address or CIDR range, checked here so a typo names its line.
    def cidrs(key, value)
      list = value.is_a?(String) ? value.split(",") : Array(value)
      list.map { |entry| cidr(key, entry.to_s.strip) }.freeze
    end

    def cidr(key, text)
      # Required here, not at the top: a server without trusted proxies
      # or an allow list never carries it (test/serve/footprint_test.rb).
      require "ipaddr"
      address, prefix = text.split("/", 2)
      ip = IPAddr.new(address) if address&.match?(/\A[0-9A-Fa-f:.]+\z/)
      bits = ip&.ipv4? ? 32 : 128
      valid = ip && (prefix.nil? || (prefix.match?(/\A\d{1,3}\z/) && prefix.to_i <= bits))
      return text.dup.freeze if valid

      raise ArgumentError
    rescue ArgumentError, IPAddr::Error
      raise ConfigError, "#{key}: #{text.inspect} is not an address or CIDR range (such as 10.0.0.0/8 or ::1)"
    end

    # An existing directory, made absolute so a later chdir cannot move it.
    def public_dir(key, value)
      text = string(key, value)
      return File.expand_path(text) if File.directory?(text)

      raise ConfigError, "#{key} must be an existing directory (got #{text.inspect})"
    end

    # A Hash or a list of entries, each "URI=DIR" (a flag) or a [URI, DIR]
    # pair (the directive); the URIs must differ, so a URL has one directory.
    def accel_mappings(key, value)
      list = Array(value).map { |entry| accel_mapping(key, entry) }
      uris = list.map(&:first)
      twice = uris.find { |uri| uris.count(uri) > 1 }
      raise ConfigError, "#{key}: #{twice.inspect} is mapped twice" if twice

      list.freeze
    end

    # URI is a path prefix, kept with a trailing "/" so that /_files never
    # matches /_filesX/...; DIR an existing directory, made absolute. Both
    # travel in the X-Accel-Mapping header (`DIR/=URI,...`), so neither may
    # hold its separators, nor URI a query or fragment.
    def accel_mapping(key, entry)
      uri, dir = entry.is_a?(String) ? entry.split("=", 2) : entry
      unless (entry.is_a?(String) || (entry.is_a?(Array) && entry.size == 2)) && uri && dir
        raise ConfigError, "#{key} entries must be URI=DIR or \"URI\" => \"DIR\" (got #{entry.inspect})"
      end

      uri = string(key, uri)
      unless uri.start_with?("/") && !uri.match?(/[,=?#\s]/)
        raise ConfigError, "#{key}: URI must start with '/' and hold no ',', '=', '?', '#' or space (got #{uri.inspect})"
      end
      dir = public_dir(key, dir)
      raise ConfigError, "#{key}: directory must hold no ',' or '=' (got #{dir.inspect})" if dir.match?(/[,=]/)

      [uri.end_with?("/") ? uri : "#{uri}/", dir].freeze
    end

    # A list, or one String of comma-separated types ("text/,application/json"
    # from a flag); an entry ending in "/" is a prefix.
    def content_types(key, value)
      list = value.is_a?(String) ? value.split(",") : Array(value)
      list.map { |type| string(key, type).strip.downcase }.reject(&:empty?).freeze
    end

    # nil, false or "off": no name is marked immutable; true or
    # "fingerprint": the default pattern; a Regexp or String: a pattern of
    # the engine's regex crate, matched against the file's name.
    def public_immutable(key, value)
      case value
      when nil, false, "off" then nil
      when true, :fingerprint, "fingerprint" then :fingerprint
      when Regexp then value.source
      when String then value
      else raise ConfigError, "#{key} must be a Regexp, a String pattern, true or off (got #{value.inspect})"
      end
    end

    # HTTP/2 windows (RFC 9113 §6.9.2): at least the default 65535 here, so
    # a setting cannot slow every stream to a crawl; at most 2^31-1.
    def window_size(key, value)
      number = integer(key, value, 65_535, "a whole number from 65535 to 2147483647")
      return number if number <= 2_147_483_647

      raise ConfigError, "#{key} must be a whole number from 65535 to 2147483647 (got #{value.inspect})"
    end

    # A timeout of zero would fire at once; "off" is not offered for these.
    def timeout(key, value)
      number = seconds(key, value)
      raise ConfigError, "#{key} must be more than 0 seconds (got #{value.inspect})" unless number.positive?

      number
    end

    # A String prefix ("/io/") or a Regexp the engine's regex engine can
    # take; a Ruby-only construct (lookaround, backreference) is refused
    # here, where a config file error can name its line.
    def fiber_path(key, value)
      case value
      when String
        return path(key, value)
      when Regexp
        require "tsubame/tsubame_native"
        problem = Native.fiber_path_error(value)
        return value unless problem

        raise ConfigError, problem
      end
      raise ConfigError, "#{key} entries must be path prefixes (Strings) or Regexps (got #{value.inspect})"
    end

    def megabytes(key, value)
      number = Float(value) if value.is_a?(String) || value.is_a?(Numeric)
      return number if number&.finite? && number.positive?

      raise ArgumentError
    rescue ArgumentError, TypeError
      raise ConfigError, "#{key} must be a positive number of megabytes (got #{value.inspect})"
    end

    def control_url(key, value)
      text = value.to_s
      return BindURI.validate(text) if text.start_with?("tcp://", "unix://")

      raise ConfigError, "#{key} must be tcp://HOST:PORT or unix://PATH (got #{value.inspect})"
    end

    def coerce_binds(value)
      Array(value).map { |uri| BindURI.validate(uri) }.freeze
    end

    def integer(key, value, minimum, description)
      number = value.is_a?(String) ? Integer(value, 10) : value
      return number if number.is_a?(Integer) && number >= minimum

      raise ArgumentError
    rescue ArgumentError, TypeError
      raise ConfigError, "#{key} must be #{description} (got #{value.inspect})"
    end

    # Off is spelled nil (or false), so zero is a mistake worth reporting.
    def positive_seconds(key, value)
      number = seconds(key, value)
      raise ConfigError, "#{key} must be more than 0 seconds, or nil to turn it off" unless number.positive?

      number
    end

    def path(key, value)
      text = string(key, value)
      raise ConfigError, "#{key} must start with '/' (got #{text.inspect})" unless text.start_with?("/")

      text
    end

    # Checked at boot, so a typo is a config error rather than a 500 for
    # the first large upload.
    def existing_directory(key, value)
      text = string(key, value)
      return text if File.directory?(text)

      raise ConfigError, "#{key} must be an existing directory (got #{text.inspect})"
    end

    def url_scheme(key, value)
      text = string(key, value)
      return text if %w[http https].include?(text)

      raise ConfigError, "#{key} must be \"http\" or \"https\" (got #{value.inspect})"
    end

    def culling_strategy(key, value)
      strategy = value.respond_to?(:to_sym) ? value.to_sym : value
      return strategy if %i[youngest oldest].include?(strategy)

      raise ConfigError, "#{key} must be :youngest or :oldest (got #{value.inspect})"
    end

    def directory(key, value)
      text = string(key, value)
      return text if File.directory?(text) && File.writable?(text)

      raise ConfigError, "#{key} must be an existing, writable directory (got #{text.inspect})"
    end

    def seconds(key, value)
      number = Float(value) if value.is_a?(String) || (value.is_a?(Numeric) && value.real?)
      # Infinity and NaN cannot become a duration on the Rust side.
      return number if number&.finite? && number >= 0

      raise ArgumentError
    rescue ArgumentError, TypeError
      raise ConfigError, "#{key} must be a non-negative number of seconds (got #{value.inspect})"
    end

    def inline_mode(key, value)
      return :auto if [:auto, "auto"].include?(value)
      return value if [true, false].include?(value)

      raise ConfigError, "#{key} must be true, false or :auto (got #{value.inspect})"
    end

    def boolean(key, value)
      return value if [true, false].include?(value)

      raise ConfigError, "#{key} must be true or false (got #{value.inspect})"
    end

    def string(key, value)
      text = value.is_a?(Symbol) ? value.to_s : value
      # `b`: a path may hold bytes that are not valid in its encoding
      # (`strip` raises on those); Rust takes a path as bytes.
      return text.dup.freeze if text.is_a?(String) && !text.b.strip.empty?

      raise ConfigError, "#{key} must be a non-empty string (got #{value.inspect})"
    end

    def callable(key, value)
      return value if value.nil? || value.respond_to?(:call)

      raise ConfigError, "#{key} must respond to #call (got #{value.inspect})"
    end
  end
end
