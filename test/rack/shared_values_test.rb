# frozen_string_literal: true

require "rack/support"

# What a request costs Ruby in objects: env values that repeat from request
# to request are shared frozen strings, a request without a body shares one
# empty rack.input, and a hello-world request stays within its object budget
# (docs/ARCHITECTURE.md, "The request path", step 6).
class SharedValuesTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::RackSupport

  # Keeps the previous request's values alive, so "the same object" below
  # means shared, not merely reused memory.
  SHARING_APP = <<~'RUBY'
    require "json"
    previous = {}
    keys = %w[HTTP_HOST HTTP_USER_AGENT HTTP_ACCEPT REMOTE_ADDR SERVER_NAME SERVER_PORT HTTP_COOKIE PATH_INFO rack.input]
    run lambda { |env|
      input = env["rack.input"]
      report = {
        "same_as_previous" => keys.select { |k| previous[k] && previous[k].equal?(env[k]) },
        "frozen" => keys.select { |k| env[k].frozen? },
        "path_is_request_path" => env["PATH_INFO"].equal?(env["REQUEST_PATH"]),
        "reads" => [input.read, input.read(4), input.gets, input.rewind, input.read(0)],
        "each" => [].tap { |lines| input.each { |line| lines << line } },
      }
      input.rewind
      buffer = +"left over"
      report["read_into_buffer"] = [input.read(4, buffer), buffer]
      previous = keys.to_h { |k| [k, env[k]] }
      text = JSON.generate(report)
      [200, { "content-type" => "application/json", "content-length" => text.bytesize.to_s }, [text]]
    }
  RUBY

  BROWSER_HEADERS = "Host: example.com:8080\r\nUser-Agent: test/1.0\r\nAccept: */*\r\nCookie: id=1\r\n"

  def keep_alive_get(sock, path, headers = BROWSER_HEADERS)
    sock.write("GET #{path} HTTP/1.1\r\n#{headers}\r\n")
    head = +""
    head << sock.readpartial(1) until head.end_with?("\r\n\r\n")
    length = head[/content-length: (\d+)/i, 1].to_i
    body = +""
    body << sock.readpartial(length - body.bytesize) while body.bytesize < length
    assert_match %r{\AHTTP/1\.1 200 }, head
    body
  end

  def test_repeating_values_are_shared_frozen_strings_and_bodyless_requests_share_one_empty_input
    with_server(SHARING_APP, lint: false) do |s|
      sock = s.socket
      keep_alive_get(sock, "/one")
      report = JSON.parse(keep_alive_get(sock, "/two"))
      shared = %w[HTTP_HOST HTTP_USER_AGENT HTTP_ACCEPT REMOTE_ADDR SERVER_NAME SERVER_PORT rack.input]
      assert_equal shared.sort, report["same_as_previous"].sort, s.stderr
      assert_equal (shared - ["rack.input"]).sort, report["frozen"].sort,
                   "a cookie and the path are the request's own, unfrozen strings"
      assert_equal true, report["path_is_request_path"]
      assert_equal ["", nil, nil, 0, ""], report["reads"]
      assert_equal [], report["each"]
      assert_equal [nil, ""], report["read_into_buffer"], "read(4, buf) at EOF: nil, buf emptied"
    ensure
      sock&.close
    end
  end

  # An empty value (here Accept and User-Agent) is shared as well, and
  # reaches the app as "" (it once crashed the interning).
  def test_empty_repeating_values
    with_server(SHARING_APP, lint: false) do |s|
      sock = s.socket
      2.times { keep_alive_get(sock, "/empty", "Host: a\r\nAccept:\r\nUser-Agent:\r\n") }
      report = JSON.parse(keep_alive_get(sock, "/empty", "Host: a\r\nAccept:\r\nUser-Agent:\r\n"))
      assert_includes report["same_as_previous"], "HTTP_ACCEPT", s.stderr
      assert_includes report["frozen"], "HTTP_USER_AGENT"
    ensure
      sock&.close
    end
  end

  def test_a_request_with_a_body_gets_its_own_input
    with_server(SHARING_APP, lint: false) do |s|
      sock = s.socket
      keep_alive_get(sock, "/empty")
      sock.write("POST /body HTTP/1.1\r\nHost: example.com:8080\r\nContent-Length: 11\r\n\r\nline1\nrest!")
      data = +""
      data << sock.readpartial(65_536) until (body = data[/\r\n\r\n(\{.*\})\z/m, 1])
      report = JSON.parse(body)
      refute_includes report["same_as_previous"], "rack.input"
      assert_equal ["line1\nrest!", nil, nil, 0, ""], report["reads"]
      assert_equal ["line1\n", "rest!"], report["each"]
      assert_equal ["line", "line"], report["read_into_buffer"]
    ensure
      sock&.close
    end
  end

  BUDGET_APP = <<~'RUBY'
    # frozen_string_literal: true

    run lambda { |env|
      if env["PATH_INFO"] == "/allocated"
        text = GC.stat(:total_allocated_objects).to_s
        [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]]
      elsif env["PATH_INFO"] == "/misses"
        text = "#{Tsubame::Native.env_in_place_misses} #{env["HTTP_VERSION"]} #{env["REQUEST_METHOD"]} #{env["rack.input"].class}"
        [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]]
      else
        [200, { "content-type" => "text/plain" }, ["OK Rack"]]
      end
    }
  RUBY

  # 3 objects are the app's (the response Array, its headers Hash, the body
  # Array); the server's 5 are the request, the env, PATH_INFO, REQUEST_URI
  # and the rack.response_finished Array. One more would be a regression.
  def test_a_hello_world_request_allocates_at_most_eight_objects
    with_server(BUDGET_APP, lint: false, args: ["-t", "1:1"]) do |s|
      sock = s.socket
      count = 500
      host = "Host: example.com\r\n"
      20.times { keep_alive_get(sock, "/", host) }
      before = keep_alive_get(sock, "/allocated", host).to_i
      count.times { keep_alive_get(sock, "/", host) }
      after = keep_alive_get(sock, "/allocated", host).to_i
      per_request = (after - before).fdiv(count + 1)
      assert_operator per_request, :<=, 8.05, "#{after - before} objects for #{count + 1} requests"
    ensure
      sock&.close
    end
  end

  # The entries every env gets are stored by position into the copy of the
  # template that holds their keys (step 6): none was inserted instead, and
  # a header field named like one of them (`Version`: HTTP_VERSION) still
  # replaces it, as Puma's parser does.
  def test_the_entries_every_env_gets_are_filled_in_place
    with_server(BUDGET_APP, lint: false, args: ["-t", "1:1"]) do |s|
      sock = s.socket
      20.times { keep_alive_get(sock, "/", "Host: example.com\r\n") }
      misses, version, method, input = keep_alive_get(sock, "/misses", "Host: a\r\n").split
      assert_equal ["0", "HTTP/1.1", "GET"], [misses, version, method]
      refute_empty input
      assert_equal "9.9", keep_alive_get(sock, "/misses", "Host: a\r\nVersion: 9.9\r\n").split[1]
      assert_equal "0", keep_alive_get(sock, "/misses", "Host: a\r\n").split[0]
    ensure
      sock&.close
    end
  end

  TABLE_APP = <<~'RUBY'
    # frozen_string_literal: true

    require "objspace"
    run lambda { |env|
      at_entry = ObjectSpace.memsize_of(env)
      env["QUERY_STRING"].to_i.times { |i| env["app.entry.#{i}"] = i }
      text = "#{at_entry} #{ObjectSpace.memsize_of(env)}"
      [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]]
    }
  RUBY

  # The env is a copy of the smallest base table with room for the
  # request's entries and for what the app's last env held (step 6): a
  # short request's env is a small table, and an app that adds dozens of
  # entries finds room for them from its next request on.
  def test_the_env_comes_with_room_for_the_request_and_what_the_app_adds
    with_server(TABLE_APP, lint: false, args: ["-t", "1:1"]) do |s|
      sock = s.socket
      host = "Host: example.com\r\n"
      small, = keep_alive_get(sock, "/?0", host).split.map(&:to_i)
      _, grown = keep_alive_get(sock, "/?40", host).split.map(&:to_i)
      at_entry, after = keep_alive_get(sock, "/?40", host).split.map(&:to_i)
      assert_operator grown, :>, small, "adding 40 entries grows the table"
      assert_equal at_entry, after, "the next env already had room for the app's 40 entries"
      # A 32-entry table; 64 entries would be 1.8 KB, 128 3.4 KB.
      assert_operator small, :<, 1_200, "a short request's env is a 32-entry table"
    ensure
      sock&.close
    end
  end

  ECHO_HOST_APP = <<~'RUBY'
    # frozen_string_literal: true

    run lambda { |env|
      text = "#{env["HTTP_HOST"]} #{env["SERVER_NAME"]} #{env["SERVER_PORT"]} #{env["HTTP_USER_AGENT"]}"
      [200, { "content-type" => "text/plain", "content-length" => text.bytesize.to_s }, [text]]
    }
  RUBY

  # Shared values are found again by comparing bytes with the one slot a
  # value maps to (step 6): values that map to the same slot, or differ in
  # one byte in the middle, must each come back as sent.
  def test_shared_values_that_differ_by_a_byte_or_share_a_slot_come_back_as_sent
    with_server(ECHO_HOST_APP, lint: false) do |s|
      sock = s.socket
      hosts = (0...150).map { |i| "h#{i.to_s.rjust(3, "0")}x.test:#{8000 + i}" } +
              ["ab.test:80", "aa.test:80", "ab.test:80", "ab.tesu:80", "a.test"]
      2.times do
        hosts.each_with_index do |host, i|
          agent = "agent/#{i % 7}.0"
          name, port = host.split(":")
          body = keep_alive_get(sock, "/", "Host: #{host}\r\nUser-Agent: #{agent}\r\n")
          assert_equal "#{host} #{name} #{port || "80"} #{agent}", body
        end
      end
    ensure
      sock&.close
    end
  end
end
