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

    # The query keys that describe one certificate of a TLS bind; the
    # other TLS keys (ca, verify_mode, ciphers, reuse, sni_dir) are the
    # bind's.
    CERT_KEYS = %w[cert key cert_pem key_pem key_password_command ocsp sni].freeze

    # Several certificates on one address (SNI): `ssl_bind` repeated with
    # `sni:` (or `bind "ssl://...&sni=host"`) for the same HOST:PORT is one
    # listener, so those binds become one URI: the certificate without
    # `sni` keeps the plain keys (it is the default, for clients that send
    # no name), the others get numbered keys (`cert.1`, `key.1`,
    # `sni.1`...), as crates/tsubame-engine/src/net/tls_query.rs reads them.
    def merge_sni(binds)
      merged = []
      binds.each do |uri|
        at = merged.index { |other| sni_partner?(other, uri) }
        if at
          merged[at] = combine(merged[at], uri)
        else
          merged << uri
        end
      end
      merged
    end

    def sni_partner?(one, other)
      return false unless one.start_with?("ssl://") && other.start_with?("ssl://")
      return false unless one.split("?", 2).first == other.split("?", 2).first

      [one, other].any? { |uri| query_pairs(uri).any? { |name, _| name.split(".", 2).first == "sni" } }
    end

    def query_pairs(uri)
      uri.split("?", 2)[1].to_s.split("&").reject(&:empty?).map { |pair| pair.split("=", 2).push("")[0, 2] }
    end

    # Certificates as { key => value } hashes, and the bind's own keys.
    def certificates_of(uri)
      certs = Hash.new { |hash, index| hash[index] = {} }
      shared = {}
      query_pairs(uri).each do |name, value|
        base, index = name.split(".", 2)
        if CERT_KEYS.include?(base)
          certs[index.to_i][base] = value
        else
          shared[name] = value
        end
      end
      [certs.keys.sort.map { |index| certs[index] }, shared]
    end

    def combine(one, other)
      location = one.split("?", 2).first
      certs_one, shared = certificates_of(one)
      certs_other, shared_other = certificates_of(other)
      shared_other.each do |name, value|
        if shared.key?(name) && shared[name] != value
          raise ConfigError, "#{location}: the binds for its SNI certificates disagree on #{name} " \
                             "(#{shared[name].inspect} and #{value.inspect}); settings other than the " \
                             "certificate are the listener's, give them once"
        end
        shared[name] = value
      end
      certs = certs_one + certs_other
      defaults = certs.reject { |cert| cert.key?("sni") }
      if defaults.size > 1
        raise ConfigError, "#{location}: #{defaults.size} certificates without sni; give sni: \"HOST\" to " \
                           "every certificate but the default one"
      end
      ordered = defaults + (certs - defaults)
      pairs = shared.map { |name, value| "#{name}=#{value}" }
      ordered.each_with_index do |cert, index|
        suffix = index.zero? ? "" : ".#{index}"
        cert.each { |name, value| pairs << "#{name}#{suffix}=#{value}" }
      end
      "#{location}?#{pairs.join("&")}"
    end

    # A URI that carries secrets (PEM text, the password command) is not
    # put in the environment a hot restart hands over; a digest stands
    # for it there.
    SECRET_KEYS = /[?&](?:key_pem|cert_pem|key_password_command)(?:\.\d+)?=/.freeze

    def handover_key(uri)
      return uri unless SECRET_KEYS.match?(uri)

      require "digest"
      "sha256:#{Digest::SHA256.hexdigest(uri)}"
    end

    private_class_method :sni_partner?, :query_pairs, :certificates_of, :combine
  end
end
