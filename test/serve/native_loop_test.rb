# frozen_string_literal: true

require "rack/support"
require "json"

# The engine's own app loop (`Native::Server#serve`, docs/ARCHITECTURE.md
# step 7): it runs the pool threads when nothing of the server's has to
# run around each request, sends plain responses itself and hands
# everything else to the Ruby side. Without Rack::Lint, so the app's own
# Arrays and Hashes reach the server.
class NativeLoopTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::RackSupport

  APP = <<~'RUBY'
    text = ->(s, status = 200) { [status, { "content-type" => "text/plain" }, [s]] }
    kept = []
    run lambda { |env|
      case env["PATH_INFO"]
      when "/parts" then [200, { "content-type" => "text/plain", "x-two" => %w[a b] }, ["one ", "two"]]
      # Which loop called the app: Tsubame::Server#handle only in Ruby's.
      when "/loop" then text.(caller.any? { |line| line.include?("`handle'") } ? "ruby" : "engine")
      when "/raise" then raise ArgumentError, "the app failed"
      when "/bad-status" then ["abc", {}, ["x"]]
      when "/bad-header" then [200, { "x-bad" => "a\r\nb" }, ["x"]]
      when "/finished"
        env["rack.response_finished"] << lambda { |_env, status, _headers, error|
          File.write(ENV.fetch("FINISHED_LOG"), "#{status} #{error.inspect}")
        }
        text.("callbacks")
      when "/to-ary"
        Struct.new(:parts) { def to_ary = parts }.new([201, { "content-type" => "text/plain" }, ["from to_ary"]])
      when "/each"
        body = Object.new
        def body.each = %w[x y z].each { |s| yield s }
        [200, { "content-type" => "text/plain" }, body]
      when "/closed"
        body = Object.new
        def body.each = yield("closing body")
        def body.close = File.write(ENV.fetch("FINISHED_LOG"), "closed")
        [200, { "content-type" => "text/plain" }, body]
      when "/keep-input"
        kept << env["rack.input"]
        text.(env["rack.input"].read)
      when "/kept-input"
        input = kept.shift
        input.rewind
        text.(input.read.inspect)
      when "/protocol" then text.(env["rack.protocol"].inspect)
      when "/hijack"
        io = env["rack.hijack"].call
        io.write("HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\nhijacked")
        io.close
        [-1, {}, []]
      else text.("not here", 404)
      end
    }
  RUBY

  def start(args: [])
    @finished = File.join(Dir.mktmpdir("tsubame-loop"), "finished")
    Tsubame::TestServer.new(APP, lint: false, args: ["-t", "1:1", *args], env: { "FINISHED_LOG" => @finished })
  end

  def with_loop_server(args: [])
    server = start(args: args)
    yield server
  ensure
    server&.kill
  end

  def test_the_engine_loop_runs_by_default_and_ruby_loop_when_a_request_timeout_is_set
    with_loop_server { |s| assert_equal "engine", s.get("/loop").body }
    with_loop_server(args: ["--request-timeout", "30"]) { |s| assert_equal "ruby", s.get("/loop").body }
  end

  def test_plain_and_other_responses
    with_loop_server do |server|
      res = server.get("/parts")
      assert_equal ["200", "one two", "a, b"], [res.code, res.body, res["x-two"]]
      assert_equal "7", res["content-length"]

      res = server.get("/to-ary")
      assert_equal ["201", "from to_ary"], [res.code, res.body]

      res = server.get("/each")
      assert_equal ["200", "xyz"], [res.code, res.body]

      res = server.get("/closed")
      assert_equal "closing body", res.body
      assert wait_for { File.exist?(@finished) && File.read(@finished) == "closed" }, "the body was not closed"

      reply = exchange(server, "GET /protocol HTTP/1.1\r\nHost: x\r\nUpgrade: foo, bar\r\nConnection: close\r\n\r\n")
      assert_equal %w[foo bar].inspect, reply.body

      data = server.raw("GET /hijack HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_match(/\r\n\r\nhijacked\z/, data)
      assert_equal "engine", server.get("/loop").body, "the loop goes on after each of these"
    end
  end

  def test_errors_get_a_500_and_a_log_line_and_the_loop_goes_on
    with_loop_server do |server|
      assert_equal "500", server.get("/raise").code
      assert_equal "500", server.get("/bad-status").code
      assert_equal "500", server.get("/bad-header").code
      assert wait_for { server.stderr.include?("ArgumentError: the app failed") }, server.stderr
      assert_match(/GET \/bad-status: ArgumentError: invalid response status 0\n\[tsubame\]/, server.stderr)
      assert_match(/GET \/bad-header: ArgumentError: invalid value for response header "x-bad"/, server.stderr)
      assert_equal "callbacks", server.get("/finished").body
      assert wait_for { File.exist?(@finished) }, "the response_finished callback never ran"
      assert_equal "200 nil", File.read(@finished)
    end
  end

  def test_the_input_is_released_once_the_response_went
    with_loop_server do |server|
      http = server.http
      res = http.post("/keep-input", "the body", "content-type" => "text/plain")
      assert_equal "the body", res.body
      # The app kept the object; its request is over, so it reads empty.
      assert_equal "\"\"", http.get("/kept-input").body
    end
  end

  def wait_for(timeout = 5)
    deadline = monotonic + timeout
    until (ok = yield)
      break if monotonic > deadline

      sleep 0.02
    end
    ok
  end
end
