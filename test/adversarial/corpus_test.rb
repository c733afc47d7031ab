# frozen_string_literal: true

require "http1/support"
require "json"
require_relative "corpus"

# Runs every case of the adversarial request corpus (test/adversarial/*.yml)
# against one server, a fresh connection per case. Each case asserts the
# exact answer, what the application was called with (nothing, for a
# refused request), that nothing pipelined behind a bad request ran, and
# that the next request on a fresh connection is served.
class AdversarialCorpusTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport

  # The one server every case runs against (under Rack::Lint), and one
  # without Lint for what Rack 2's SPEC has no room for; both append to
  # the same log.
  module Shared
    def self.server(lint: true)
      @servers ||= {}
      @servers[lint] ||= begin
        server = Tsubame::TestServer.new(File.read(File.join(__dir__, "recording_app.ru")),
                                         args: ["-t", "2:2"], env: { "ADV_LOG" => log }, lint: lint)
        Minitest.after_run { server.kill }
        server
      end
    end

    def self.log
      @log ||= begin
        dir = Dir.mktmpdir("tsubame-adv")
        Minitest.after_run { FileUtils.rm_rf(dir) }
        File.join(dir, "app.log").tap { |path| File.write(path, "") }
      end
    end
  end

  def self.define_case(c)
    define_method("test_#{c.category}_#{c.name}") { run_case(c) }
  end

  AdversarialCorpus.cases.each { |c| define_case(c) }

  def test_the_corpus_is_large_and_every_name_is_unique
    names = AdversarialCorpus.cases.map { |c| "#{c.category}/#{c.name}" }
    assert_operator names.size, :>=, 150
    assert_equal names.size, names.uniq.size, "duplicate case names"
  end

  READ_TIMEOUT = 3

  def run_case(c)
    # OPTIONS * reaches the app with PATH_INFO "*": Rack 3's SPEC allows
    # that asterisk-form, Rack 2's says PATH_INFO starts with "/".
    server = Shared.server(lint: !(RACK2 && c.bytes.start_with?("OPTIONS * ")))
    offset = File.size(Shared.log)
    label = "#{c.category}/#{c.name} (#{c.why})"
    client = conn(server, timeout: READ_TIMEOUT)
    send_bytes(client, c)
    check_answers(client, c, label)
    check_next_request_served(server, c, label)
    check_app_saw(c, offset, label)
    assert_nil Process.waitpid(server.pid, Process::WNOHANG), "server died on #{label}"
    refute_match(/panic/i, server.stderr, label)
  ensure
    client&.close
  end

  # A case that must end with the connection closed also carries a good
  # request pipelined right behind it (unless it ends the stream itself):
  # it must never be answered or reach the app. The server may refuse and
  # close before the last byte is sent; what it answered is still there to
  # read.
  def send_bytes(client, c)
    probe = c.after == "closed" && !c.close_write ? "GET /__smuggled/#{c.name} HTTP/1.1\r\nHost: a\r\n\r\n" : ""
    client.write(c.bytes + probe)
    client.sock.close_write if c.close_write
  rescue Errno::EPIPE, Errno::ECONNRESET
    nil
  end

  def check_answers(client, c, label)
    c.statuses.each_with_index do |status, i|
      response = client.read_response(head: c.head)
      assert_equal status, response.status, "#{label}: response #{i + 1} was #{response.status_line.inspect}"
      next unless status >= 400

      assert_equal "close", response["connection"], "#{label}: a refusal closes the connection"
      assert_equal "text/plain; charset=utf-8", response["content-type"], label
      assert response.body.start_with?("#{status} "), "#{label}: #{response.body.inspect}"
    end
    if c.after == "closed"
      assert_equal :eof, client.wait_close(READ_TIMEOUT), "#{label}: expected the connection to close, nothing more sent"
    else
      end_path = "/__end/#{c.name}"
      client.write("GET #{end_path} HTTP/1.1\r\nHost: corpus\r\nConnection: close\r\n\r\n")
      response = client.read_response
      assert_equal [200, "GET #{end_path}"], [response.status, response.body],
                   "#{label}: the connection must stay usable, with nothing left over from the case"
      assert_equal :eof, client.wait_close(READ_TIMEOUT), label
    end
  rescue Conn::Timeout, Conn::Closed => e
    flunk "#{label}: #{e.message}"
  end

  def check_next_request_served(server, c, label)
    path = "/__next/#{c.name}"
    client = conn(server, timeout: READ_TIMEOUT)
    client.write("GET #{path} HTTP/1.1\r\nHost: corpus\r\nConnection: close\r\n\r\n")
    response = client.read_response
    assert_equal [200, "GET #{path}"], [response.status, response.body], "#{label}: next request on a fresh connection"
  ensure
    client&.close
  end

  def check_app_saw(c, offset, label)
    seen = File.open(Shared.log) do |f|
      f.seek(offset)
      f.read.lines.map { |line| JSON.parse(line) }
    end
    markers = []
    markers << ["GET", "/__end/#{c.name}"] if c.after == "open"
    markers << ["GET", "/__next/#{c.name}"]
    assert_equal markers, seen.last(markers.size).map { |r| [r["method"], r["path"]] },
                 "#{label}: the app saw #{seen.map { |r| "#{r["method"]} #{r["path"]}" }}"
    requests = seen[0...-markers.size]
    assert_equal c.app_saw.size, requests.size,
                 "#{label}: the app was called with #{requests.map { |r| r.slice("method", "path", "body") }}"
    c.app_saw.zip(requests).each do |expected, actual|
      expected.each do |key, value|
        # assert_equal with nil is deprecated in Minitest; a nil expectation
        # (no CONTENT_LENGTH, say) is an absence check.
        value.nil? ? assert_nil(actual[key], "#{label}: app saw #{key}") : assert_equal(value, actual[key], "#{label}: app saw #{key}")
      end
    end
  end
end
