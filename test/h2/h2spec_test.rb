# frozen_string_literal: true

require "tls/support"

# h2spec (the HTTP/2 conformance suite) against Tsubame's HTTP/2 listeners.
# Over TLS every case must pass. On an h2c bind one case is an expected
# exception (docs/TLS_HTTP2.md): that bind also serves HTTP/1.1, so an
# invalid preface is taken for an HTTP/1 request and answered 400 before
# the close, where h2spec wants a silent close.
class Http2H2specTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport

  # Answers with a body larger than h2spec's smallest window, so its
  # flow-control cases (6.9.2) have DATA to watch instead of skipping.
  APP = <<~'RUBY'
    run ->(env) { env["rack.input"].read; [200, { "content-type" => "text/plain" }, ["x" * 1024]] }
  RUBY

  H2C_EXCEPTIONS = ["3.5. HTTP/2 Connection Preface / 2: Sends invalid connection preface"].freeze

  def h2spec
    candidates = [ENV.fetch("H2SPEC", nil)]
    gopath = begin
      IO.popen(%w[go env GOPATH], err: File::NULL, &:read).strip
    rescue SystemCallError
      ""
    end
    candidates << File.join(gopath, "bin", "h2spec") unless gopath.empty?
    candidates += ENV["PATH"].split(File::PATH_SEPARATOR).map { |dir| File.join(dir, "h2spec") }
    found = candidates.compact.find { |path| File.executable?(path) }
    found or flunk "h2spec is not installed: run `make h2spec-install` (go install github.com/summerwind/h2spec/cmd/h2spec@latest)"
  end

  # Runs h2spec; returns [summary counts, names of the failed cases].
  def run_h2spec(port, *flags)
    out, status = Open3.capture2e(h2spec, "-h", "127.0.0.1", "-p", port.to_s, "-o", "5", *flags)
    summary = out[/(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed/] or flunk "no h2spec summary:\n#{out}"
    counts = %w[tests passed skipped failed].zip(summary.scan(/\d+/).map(&:to_i)).to_h
    failures = out.split("Failures:", 2)[1].to_s
    section = nil
    failed = failures.lines.filter_map do |line|
      section = line.strip if line =~ /\A\s+\d+(\.\d+)+\. /
      "#{section} / #{line.strip.delete_prefix("× ")}" if line.include?("×")
    end
    [counts, failed, status, out]
  end

  def test_every_case_passes_over_tls
    with_server(APP, args: ["-b", ssl_bind]) do |server|
      counts, failed, status, out = run_h2spec(ssl_port(server), "-t", "-k")
      assert_equal [], failed, out
      assert status.success?, out
      assert_operator counts["tests"], :>=, 145
      assert_equal [counts["tests"], 0, 0], counts.values_at("passed", "skipped", "failed"), out
    end
  end

  def test_h2c_passes_all_but_the_listed_exception
    with_server(APP, args: ["--h2c"]) do |server|
      counts, failed, _status, out = run_h2spec(server.port)
      assert_equal H2C_EXCEPTIONS, failed, out
      assert_equal [counts["tests"] - 1, 0], counts.values_at("passed", "skipped"), out
    end
  end
end
