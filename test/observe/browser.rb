# frozen_string_literal: true

require "json"
require "net/http"
require "tmpdir"
require "upgrade/support"

module Tsubame
  # Headless Chromium (Debian's `chromium`) driven over the DevTools
  # protocol, with the tests' own WebSocket client: open a page, evaluate
  # JavaScript in it, take a screenshot.
  class HeadlessChromium
    def initialize(url, port:)
      @dir = Dir.mktmpdir("tsubame-chromium")
      @log = File.join(@dir, "chromium.log")
      @pid = Process.spawn("chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-dev-shm-usage", "--window-size=1280,900", "--remote-debugging-port=#{port}",
                          "--user-data-dir=#{File.join(@dir, "profile")}", url,
                          out: @log, err: @log, in: File::NULL)
      @next_id = 0
      @socket = connect(port, url)
    end

    # The value of a JavaScript expression in the page (JSON-able).
    def evaluate(expression)
      reply = call("Runtime.evaluate", expression: expression, returnByValue: true)
      raise "evaluate failed: #{reply.inspect}" if reply.dig("result", "exceptionDetails")

      reply.dig("result", "result", "value")
    end

    def screenshot(path)
      reply = call("Page.captureScreenshot", format: "png")
      File.binwrite(path, reply.dig("result", "data").unpack1("m"))
    end

    def close
      @socket&.close
      Process.kill("KILL", @pid)
      Process.wait(@pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    ensure
      FileUtils.rm_rf(@dir)
    end

    def log
      File.exist?(@log) ? File.read(@log) : ""
    end

    private

    def call(method, **params)
      id = (@next_id += 1)
      @socket.text(JSON.generate(id: id, method: method, params: params))
      loop do
        message = @socket.read_message(timeout: 20) or raise "chromium closed the DevTools connection"
        reply = JSON.parse(message)
        return reply if reply["id"] == id
      end
    end

    # The page's DevTools WebSocket, once Chromium lists it.
    def connect(port, url)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
      loop do
        target = page_target(port, url)
        if target
          path = URI(target.fetch("webSocketDebuggerUrl")).path
          return UpgradeSupport::Client.new(port, path: path)
        end
        raise "chromium did not start:\n#{log}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.2
      end
    end

    def page_target(port, url)
      list = JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{port}/json/list")))
      list.find { |t| t["type"] == "page" && t["url"].start_with?(url.split("?").first) }
    rescue SystemCallError, JSON::ParserError, EOFError, Net::ReadTimeout
      nil
    end
  end
end
