# frozen_string_literal: true

require "test_helper"
require "json"
require "open3"

module Tsubame
  # Reading /metrics and the control app in the observability tests.
  module ObserveHelpers
    TOKEN = "obs-token"

    # The control app's answer to GET path over a fresh connection:
    # [status, headers (lower-case names), body].
    def control_get(port, path, headers = {})
      response = Net::HTTP.start("127.0.0.1", port, read_timeout: 20) { |http| http.get(path, headers) }
      [response.code.to_i, response.each_header.to_h, response.body]
    end

    # /metrics from a control app on a UNIX socket (ClusterServer's).
    def scrape_unix(path, token)
      raw = UNIXSocket.open(path) do |socket|
        socket.write("GET /metrics?token=#{token} HTTP/1.1\r\nHost: ctl\r\n\r\n")
        socket.read
      end
      head, body = raw.split("\r\n\r\n", 2)
      assert_match(%r{\AHTTP/1\.1 200 }, head)
      body
    end

    def scrape(port, token: TOKEN)
      status, headers, body = control_get(port, "/metrics?token=#{token}")
      assert_equal 200, status, body
      assert_equal "text/plain; version=0.0.4; charset=utf-8", headers["content-type"]
      body
    end

    # { "name{label=\"v\",...}" => value } for every sample, labels in the
    # order written; `sample(text, name, labels)` finds one by its labels.
    def samples(text)
      text.each_line.reject { |line| line.start_with?("#") || line.strip.empty? }.to_h do |line|
        key, value = line.strip.match(/\A(\S+(?:\{.*\})?) (\S+)\z/).captures
        [key, Float(value)]
      end
    end

    def sample(text, name, labels = {})
      samples(text).each do |key, value|
        metric, label_text = key.match(/\A([^{]+)(?:\{(.*)\})?\z/).captures
        next unless metric == name

        found = label_text.to_s.scan(/(\w+)="((?:[^"\\]|\\.)*)"/).to_h
        return value if labels.all? { |k, v| found[k.to_s] == v.to_s }
      end
      nil
    end

    # The sum of every sample of `name` whose labels include `labels`.
    def total(text, name, labels = {})
      samples(text).sum do |key, value|
        metric, label_text = key.match(/\A([^{]+)(?:\{(.*)\})?\z/).captures
        found = label_text.to_s.scan(/(\w+)="((?:[^"\\]|\\.)*)"/).to_h
        metric == name && labels.all? { |k, v| found[k.to_s] == v.to_s } ? value : 0
      end
    end

    def promtool_check(text)
      out, status = Open3.capture2e("promtool", "check", "metrics", stdin_data: text)
      [status.success?, out]
    end

    def request(port, method, path, body: nil, headers: {})
      Net::HTTP.start("127.0.0.1", port, read_timeout: 20) do |http|
        req = Net::HTTPGenericRequest.new(method, !body.nil?, method != "HEAD", path, headers)
        if body
          req["content-type"] ||= "application/octet-stream"
          req.body = body
        end
        http.request(req)
      end
    end
  end
end
