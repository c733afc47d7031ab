# frozen_string_literal: true

require "observe/support"
require "observe/browser"

# The live status page: served by the control app with nothing external,
# loaded in headless Chromium, whose numbers appear and then move as
# requests arrive (server-sent events).
class StatusPageTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::ObserveHelpers

  APP = <<~'RUBY'
    run ->(_env) { [200, { "content-type" => "text/plain" }, ["hello"]] }
  RUBY

  def test_the_page_and_its_files_are_self_contained_and_need_the_token
    control = free_port
    with_server(APP, args: ["--control-url", "tcp://127.0.0.1:#{control}", "--control-token", TOKEN]) do
      status, = control_get(control, "/status")
      assert_equal 403, status
      status, headers, html = control_get(control, "/status?token=#{TOKEN}")
      assert_equal 200, status
      assert_equal "text/html; charset=utf-8", headers["content-type"]
      assert_match(/default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'/,
                   headers["content-security-policy"])
      # Only relative links, each with the token; no inline script or style.
      links = html.scan(/(?:src|href|data-events)="([^"]+)"/).flatten
      assert_equal ["status.css?token=#{TOKEN}", "status/events?token=#{TOKEN}", "status.js?token=#{TOKEN}"], links
      refute_match(%r{<script>|<style|style="|https?://}, html.gsub(%r{http://www\.w3\.org/2000/svg}, ""))
      %w[status.js status.css].each do |file|
        status, headers, body = control_get(control, "/#{file}?token=#{TOKEN}")
        assert_equal 200, status, file
        assert_match(/\Atext\/(javascript|css)/, headers["content-type"])
        refute_match(%r{https?://(?!www\.w3\.org/2000/svg)}, body, "#{file} loads nothing from elsewhere")
      end
      status, = control_get(control, "/status.js")
      assert_equal 403, status
      status, _, json = control_get(control, "/status.json?token=#{TOKEN}")
      assert_equal 200, status
      summary = JSON.parse(json)
      assert_equal ["single", 5, 1], summary.values_at("mode", "threads_max").push(summary["workers"].size)
    end
  end

  def test_at_most_eight_event_streams
    control = free_port
    with_server(APP, args: ["--control-url", "tcp://127.0.0.1:#{control}", "--control-token", TOKEN]) do
      streams = Array.new(8) do
        socket = TCPSocket.new("127.0.0.1", control)
        socket.write("GET /status/events?token=#{TOKEN} HTTP/1.1\r\nHost: x\r\n\r\n")
        socket
      end
      streams.each do |socket|
        assert socket.wait_readable(10)
        assert_match(%r{\AHTTP/1\.1 200 OK\r\ncontent-type: text/event-stream}, socket.readpartial(4096))
      end
      status, _, body = control_get(control, "/status/events?token=#{TOKEN}")
      assert_equal 503, status
      assert_match(/too many status pages open \(8\)/, body)
      # The stream goes on: the next event comes within a few seconds.
      assert streams.first.wait_readable(10)
      assert_match(/\Adata: \{/, streams.first.readpartial(65_536))
      streams.each(&:close)
    end
  end

  def test_chromium_shows_numbers_that_update
    control = free_port
    with_server(APP, args: ["--control-url", "tcp://127.0.0.1:#{control}", "--control-token", TOKEN]) do |s|
      stop = false
      load = Thread.new do
        until stop
          request(s.port, "GET", "/")
          sleep 0.02
        end
      end
      browser = Tsubame::HeadlessChromium.new("http://127.0.0.1:#{control}/status?token=#{TOKEN}", port: free_port)
      begin
        updates = wait_until(timeout: 30) do
          n = browser.evaluate("document.body ? Number(document.body.dataset.updates) : 0").to_i
          n >= 3 ? n : nil
        end
        assert updates, "three updates within 30 s; the page has #{browser.evaluate("document.body.outerHTML")}"
        page = JSON.parse(browser.evaluate(<<~JS))
          JSON.stringify({
            first: Number(document.body.dataset.firstTotal), last: Number(document.body.dataset.lastTotal),
            total: document.getElementById("requests-total").textContent,
            threadsMax: document.getElementById("threads-max").textContent,
            p99: document.getElementById("p99").textContent,
            rps: document.getElementById("rps").textContent,
            link: document.getElementById("link").textContent,
            workers: document.querySelectorAll("#workers tr").length,
            chart: document.querySelector("#chart-rps polyline").getAttribute("points").split(" ").length
          })
        JS
        assert_equal "live", page["link"]
        assert_operator page["last"], :>, page["first"], "the request count moved: #{page}"
        assert_equal page["last"].to_s, page["total"]
        assert_equal "5", page["threadsMax"]
        assert_match(/\A\d+(\.\d+)?\z/, page["p99"])
        assert_operator page["rps"].to_f, :>, 0
        assert_equal 1, page["workers"]
        assert_operator page["chart"], :>=, 3
        # The docs' screenshot: TSUBAME_SCREENSHOT=docs/status-page.png.
        browser.screenshot(ENV["TSUBAME_SCREENSHOT"]) if ENV["TSUBAME_SCREENSHOT"]
      ensure
        browser.close
      end
    ensure
      stop = true
      load&.join(5)
    end
  end
end
