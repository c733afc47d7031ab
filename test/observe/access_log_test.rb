# frozen_string_literal: true

require "observe/support"
require "time"

# The access log: its three formats, its file reopened on HUP, request
# ids, and lines dropped (never requests held up) when the file is slow.
class AccessLogTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::ObserveHelpers

  APP = <<~'RUBY'
    run lambda { |env|
      case env["PATH_INFO"]
      when "/id" then [200, { "content-type" => "text/plain" }, [env["HTTP_X_REQUEST_ID"].to_s]]
      when "/own-id" then [200, { "content-type" => "text/plain", "x-request-id" => "from-app" }, ["x"]]
      when "/start" then [200, { "content-type" => "text/plain" }, [env["HTTP_X_REQUEST_START"].to_s]]
      when "/missing" then [404, { "content-type" => "text/plain" }, ["nope"]]
      else
        sleep 0.05 if env["QUERY_STRING"] == "slow"
        [200, { "content-type" => "text/plain" }, ["hello"]]
      end
    }
  RUBY

  def lines_of(path, count)
    wait_until(timeout: 10) { File.exist?(path) && (lines = File.readlines(path)).size >= count && lines }
  end

  def test_json_lines_carry_every_field_and_the_request_id
    in_tmpdir do |dir|
      log = File.join(dir, "access.log")
      with_server(APP, args: ["--access-log", "json", "--access-log-file", log, "--request-id"]) do |s|
        response = request(s.port, "GET", "/id?a=1", headers: { "X-Request-Id" => "req-42", "User-Agent" => "probe/1",
                                                                 "Referer" => "http://example/" })
        assert_equal "req-42", response["x-request-id"]
        assert_equal "req-42", response.body
        request(s.port, "GET", "/?slow", headers: { "X-Request-Id" => "has space" })
        lines = lines_of(log, 2)
        assert lines, "two lines in #{log}"
        first, second = lines.map { |line| JSON.parse(line) }
        assert_equal %w[time request_id method path protocol status bytes duration queue_wait app worker
                        remote_addr user_agent referer], first.keys
        assert_equal ["req-42", "GET", "/id?a=1", "HTTP/1.1", 200, 6, nil, "127.0.0.1", "probe/1", "http://example/"],
                     first.values_at("request_id", "method", "path", "protocol", "status", "bytes", "worker",
                                     "remote_addr", "user_agent", "referer")
        assert Time.iso8601(first["time"])
        %w[duration queue_wait app].each { |key| assert_kind_of Numeric, first[key], key }
        assert_operator first["duration"], :>=, first["app"]
        # An invalid id was replaced by a generated UUID.
        assert_match(/\A\h{8}-\h{4}-4\h{3}-[89ab]\h{3}-\h{12}\z/, second["request_id"])
        assert_operator second["app"], :>=, 0.05
      end
    end
  end

  def test_request_ids_generated_replaced_or_left_to_the_app
    with_server(APP, args: ["--request-id"]) do |s|
      generated = request(s.port, "GET", "/id")
      assert_match(/\A\h{8}-\h{4}-4\h{3}-[89ab]\h{3}-\h{12}\z/, generated.body)
      assert_equal generated.body, generated["x-request-id"], "the env and the response carry the same id"
      other = request(s.port, "GET", "/id")
      refute_equal generated.body, other.body
      bad = request(s.port, "GET", "/id", headers: { "X-Request-Id" => "a\"b" })
      refute_equal "a\"b", bad.body
      assert_equal bad.body, bad["x-request-id"]
      own = request(s.port, "GET", "/own-id")
      assert_equal ["from-app"], own.get_fields("x-request-id"), "the app's own id is not doubled"
    end
    with_server(APP) do |s|
      response = request(s.port, "GET", "/id")
      assert_nil response["x-request-id"], "off by default"
      assert_equal "", response.body
    end
  end

  def test_request_start_added_only_when_missing_and_upstream_wait_measured
    control = free_port
    with_server(APP, args: ["--request-start-header", "--control-url", "tcp://127.0.0.1:#{control}",
                            "--control-token", TOKEN]) do |s|
      before = (Time.now.to_f * 1_000_000).to_i
      stamped = request(s.port, "GET", "/start").body
      after = (Time.now.to_f * 1_000_000).to_i
      assert_match(/\At=\d{16}\z/, stamped)
      assert_includes before..after, stamped.delete_prefix("t=").to_i
      # Heroku's milliseconds, three seconds ago: kept as it came, and
      # three seconds of waiting in front of the server counted.
      three_ago = ((Time.now.to_f - 3) * 1000).to_i
      assert_equal "t=#{three_ago}", request(s.port, "GET", "/start", headers: { "X-Request-Start" => "t=#{three_ago}" }).body
      # A stamp from a clock ahead of the server's is not counted.
      ahead = ((Time.now.to_f + 60) * 1000).to_i
      request(s.port, "GET", "/start", headers: { "X-Request-Start" => "t=#{ahead}" })
      text = scrape(control)
      assert_equal 1, sample(text, "tsubame_http_request_upstream_wait_seconds_count")
      assert_equal 0, sample(text, "tsubame_http_request_upstream_wait_seconds_bucket", le: "2.5")
      assert_equal 1, sample(text, "tsubame_http_request_upstream_wait_seconds_bucket", le: "10")
    end
  end

  def test_common_and_combined_to_stdout
    with_server(APP, args: %w[--access-log combined]) do |s|
      request(s.port, "GET", "/missing?q=\"x\"", headers: { "User-Agent" => "agent \"7\"" })
      line = wait_until(timeout: 10) { s.stdout.lines.find { |l| l.include?("/missing") } }
      assert_match(%r{\A127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\] "GET /missing\?q=\\"x\\" HTTP/1\.1" 404 4 "-" "agent \\"7\\""\n\z}, line)
    end
    # --access-log wins over -v's line; -q does not silence it.
    with_server(APP, args: %w[-v --access-log common]) do |s|
      request(s.port, "GET", "/")
      line = wait_until(timeout: 10) { s.stdout.lines.find { |l| l.include?("GET / ") } }
      assert_match(%r{\A127\.0\.0\.1 - - \[[^\]]+\] "GET / HTTP/1\.1" 200 5\n\z}, line)
      assert_equal 1, s.stdout.lines.count { |l| l.include?("GET / ") }
    end
    with_server(APP, args: %w[-q --access-log common]) do |s|
      request(s.port, "GET", "/")
      assert wait_until(timeout: 10) { s.stdout.lines.find { |l| l.include?("\"GET / HTTP/1.1\" 200 5") } }
    end
  end

  def test_the_last_lines_are_written_at_a_stop
    in_tmpdir do |dir|
      log = File.join(dir, "access.log")
      server = Tsubame::TestServer.new(APP, args: ["--access-log", "common", "--access-log-file", log])
      10.times { |i| request(server.port, "GET", "/?n=#{i}") }
      assert_equal 0, server.stop.exitstatus
      assert_equal 10, File.readlines(log).size
    ensure
      server&.kill
    end
  end

  def test_hup_reopens_the_file_and_keeps_serving
    in_tmpdir do |dir|
      log = File.join(dir, "access.log")
      with_server(APP, args: ["--access-log", "common", "--access-log-file", log]) do |s|
        request(s.port, "GET", "/?before")
        assert lines_of(log, 1)
        File.rename(log, "#{log}.1")
        s.signal("HUP")
        sleep 0.3
        assert_equal "200", request(s.port, "GET", "/?after").code, "HUP with an access log file does not stop"
        assert lines_of(log, 1), "a new file after HUP"
        assert_match(/GET \/\?after /, File.read(log))
        assert_equal 1, File.readlines("#{log}.1").size
        assert_match(/GET \/\?before /, File.read("#{log}.1"))
      end
    end
  end

  def test_bad_format_and_unwritable_file_are_errors
    _, err, status = run_tsubame("--access-log", "xml", "config.ru")
    refute status.success?
    assert_match(/access_log must be one of common, combined, json \(got "xml"\)/, err)
    in_tmpdir do |dir|
      ru = write_file(dir, "config.ru", "run ->(_) { [200, {}, []] }\n")
      _, err, status = run_tsubame("-b", "tcp://127.0.0.1:0", "--access-log", "json", "--access-log-file",
                                   "/nonexistent-dir/a.log", ru)
      refute status.success?
      assert_match(%r{cannot open the access log /nonexistent-dir/a\.log}, err)
    end
  end

  # A file nobody drains (a FIFO whose reader never reads): the writer
  # blocks, the bounded buffer fills, and further lines are dropped and
  # counted while requests go on being answered at full speed.
  def test_a_stuck_log_drops_lines_instead_of_requests
    in_tmpdir do |dir|
      fifo = File.join(dir, "access.fifo")
      File.mkfifo(fifo)
      reader = File.open(fifo, File::RDONLY | File::NONBLOCK)
      control = free_port
      with_server(APP, args: ["--access-log", "json", "--access-log-file", fifo, "--control-url",
                              "tcp://127.0.0.1:#{control}", "--control-token", TOKEN]) do |s|
        out, err, status = Open3.capture3("ab", "-q", "-k", "-n", "12000", "-c", "16", "http://127.0.0.1:#{s.port}/")
        assert status.success?, err
        assert_match(/Complete requests:\s+12000/, out)
        assert_match(/Failed requests:\s+0/, out)
        text = wait_until(timeout: 10) do
          t = scrape(control)
          total(t, "tsubame_http_requests_total") >= 12_000 ? t : nil
        end
        refute_nil text
        dropped = sample(text, "tsubame_access_log_dropped_total")
        written = sample(text, "tsubame_access_log_lines_total")
        assert_operator dropped, :>, 0, "lines dropped"
        # Written: what the pipe took (64 KiB) before the writer blocked;
        # the rest wait in the buffer (8192 lines, and a batch of at most
        # 256 in the blocked write) or were dropped.
        assert_operator written, :<, 1000
        assert_operator dropped, :>=, 12_000 - 8192 - 256 - written
      end
    ensure
      reader&.close
    end
  end
end
