# frozen_string_literal: true

require "tsubame/errors"

module Tsubame
  # The listener address forms Tsubame accepts. Flags, config files, the PORT
  # variable and the Rack handler all build binds here, so a typo is caught
  # with the same message wherever it came from, before anything is opened.
  module BindURI
    # The host part is kept loose (names, IPv4, bracketed IPv6) because the
    # engine resolves it; the port must be there because there is no sensible
    # default for it once someone writes a bind by hand. A query string is
    # allowed because Puma puts per-listener settings there.
    NETWORK = %r{\A(?:tcp|ssl)://(?:\[[0-9A-Fa-f:.]+\]|[^\s/?#:\[\]]+):(?<port>\d+)(?:\?\S*)?\z}.freeze
    UNIX = %r{\Aunix://[^\s?]+(?:\?\S*)?\z}.freeze
    FORMS = "tcp://HOST:PORT, ssl://HOST:PORT or unix://PATH"

    module_function

    def validate(uri)
      text = uri.to_s
      match = NETWORK.match(text)
      if match
        port(match[:port])
      elsif !UNIX.match?(text)
        raise ConfigError, "invalid bind #{text.inspect}: expected #{FORMS}"
      end
      text.dup.freeze
    end

    def tcp(host, port_number)
      host = host.to_s
      # A bare IPv6 literal would make the port ambiguous.
      host = "[#{host}]" if host.include?(":") && !host.start_with?("[")
      validate("tcp://#{host}:#{port(port_number)}")
    end

    def port(value)
      number = Integer(value.to_s, 10)
      raise ArgumentError unless (0..65_535).cover?(number)

      number
    rescue ArgumentError
      raise ConfigError, "invalid port #{value.to_s.inspect}: expected a number from 0 to 65535"
    end

    # What the banner shows: the scheme a browser or curl would use.
    # An ssl:// bind, or a unix:// one asking for TLS with ssl=true.
    TLS = %r{\Assl://|[?&]ssl=(?:true|1)(?:&|\z)}.freeze

    def tls?(uri)
      TLS.match?(uri)
    end

    def display(uri)
      uri.sub(%r{\Atcp://}, "http://").sub(%r{\Assl://}, "https://")
    end
  end
end
