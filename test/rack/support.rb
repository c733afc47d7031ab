# frozen_string_literal: true

require "test_helper"
require "json"
require "rack"

module Tsubame
  # Support for the rack_*_test.rb files: raw exchanges over one socket,
  # parsed strictly enough to tell a whole response from a cut one.
  module RackSupport
    # headers: [lowercased name, value] pairs in the order they came.
    # complete: the body ended where its framing said (for chunked bodies,
    # the terminating 0-chunk arrived). closed: the server closed the
    # connection before `timeout` ran out.
    Reply = Struct.new(:status_line, :headers, :body, :complete, :closed, :raw, keyword_init: true) do
      def status
        status_line.to_s[%r{\AHTTP/1\.[01] (\d{3}) }, 1].to_i
      end

      def all(name)
        headers.select { |(key, _)| key == name }.map(&:last)
      end

      def [](name)
        values = all(name)
        values.empty? ? nil : values.join(", ")
      end
    end

    # Sends `bytes` on a fresh connection and reads until the server closes
    # it or `timeout` seconds pass; returns the parsed Reply.
    def exchange(server, bytes, timeout: 5, head: false)
      sock = server.socket
      sock.write(bytes)
      data, closed = read_until_close(sock, timeout)
      parse_reply(data, closed, head: head)
    ensure
      sock&.close
    end

    def parse_reply(data, closed, head: false)
      head_end = data.index("\r\n\r\n")
      return Reply.new(status_line: nil, headers: [], body: data, complete: false, closed: closed, raw: data) unless head_end

      lines = data[0, head_end].split("\r\n")
      status_line = lines.shift
      headers = lines.map do |line|
        name, value = line.split(":", 2)
        raise "malformed header line #{line.inspect}" unless value

        [name.downcase, value.strip]
      end
      rest = data[(head_end + 4)..]
      reply = Reply.new(status_line: status_line, headers: headers, body: rest, complete: true, closed: closed, raw: data)
      return reply if head

      if reply["transfer-encoding"] == "chunked"
        reply.body, reply.complete = dechunk(rest)
      elsif (length = reply["content-length"])
        reply.complete = rest.bytesize >= Integer(length, 10)
        reply.body = rest[0, Integer(length, 10)]
      end
      reply
    end

    # [decoded body, whether the 0-chunk and final CRLF arrived].
    def dechunk(data)
      body = +"".b
      pos = 0
      loop do
        line_end = data.index("\r\n", pos) or return [body, false]
        size = Integer(data[pos...line_end].split(";").first, 16)
        pos = line_end + 2
        return [body, data[pos, 2] == "\r\n"] if size.zero?
        return [body << data[pos..], false] if data.bytesize < pos + size + 2

        body << data[pos, size]
        raise "chunk not followed by CRLF" unless data[pos + size, 2] == "\r\n"

        pos += size + 2
      end
    end

    # Headers are positional (a braceless hash of String keys would be
    # taken for keywords).
    def get_bytes(path, headers = {}, version = "HTTP/1.1")
      request_bytes("GET", path, headers, nil, version)
    end

    def request_bytes(method, path, headers = {}, body = nil, version = "HTTP/1.1")
      lines = ["#{method} #{path} #{version}"]
      lines << "Host: example.test" unless headers.any? { |(k, _)| k.casecmp?("host") }
      headers.each { |k, v| lines << "#{k}: #{v}" }
      lines << "Content-Length: #{body.bytesize}" if body && headers.none? { |(k, _)| k.match?(/\A(content-length|transfer-encoding)\z/i) }
      "#{lines.join("\r\n")}\r\n\r\n#{body}"
    end

    def rack2?
      Rack.release.start_with?("2.")
    end
  end
end
