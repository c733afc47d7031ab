# frozen_string_literal: true

require "test_helper"
require "upgrade/support"

# A handler's write on a plain socket goes straight to the socket when
# nothing else is in flight, and is queued for the connection's task
# otherwise (docs/WEBSOCKETS.md "Writes", docs/ARCHITECTURE.md). What the
# client sees must not tell the two apart: frames whole and in the order
# written, pongs between frames and never inside one, back-pressure
# (`pending`, `on_drained`) and the close handshake as before.
class UpgradeDirectWriteTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::UpgradeSupport

  APP = <<~'RUBY'
    log = ENV.fetch("TSUBAME_TEST_EVENTS")
    record = ->(line) { File.open(log, "a") { |f| f.puts(line) } }
    handler = Class.new do
      # Numbered across callbacks: the client checks one sequence.
      define_method(:numbered) do |conn, big|
        @seq = (@seq || -1) + 1
        conn.write(format("%06d:", @seq) + (big ? "B" * 150_000 : "s"))
      end
      define_method(:on_message) do |conn, data|
        case data
        when /\Aburst (\d+) (\d+)\z/
          count = Integer($1)
          every = Integer($2)
          count.times { |i| numbered(conn, (i % every).zero?) }
          record.call("burst pending=#{conn.pending}")
        when /\Atrickle (\d+)\z/
          # Writes spread out while the client reads: some go straight
          # out, some while the task is still sending earlier ones.
          Integer($1).times do |i|
            numbered(conn, (i % 3).zero?)
            sleep 0.0005 if (i % 4).zero?
          end
        when "big"
          conn.write("b" * 8_000_000)
          record.call("big pending=#{conn.pending}")
          conn.write("after")
          record.call("after pending=#{conn.pending}")
        when /\Aclose-after (\d+)\z/
          Integer($1).times { |i| numbered(conn, i.odd?) }
          conn.close(4000)
          record.call("closed open=#{conn.open?} late=#{conn.write("late").inspect}")
        else conn.write(data)
        end
      end
      define_method(:on_drained) { |conn| record.call("drained #{conn.pending}") }
      define_method(:on_close) { |conn| record.call("close #{conn.open?}") }
    end
    run lambda { |env|
      env["rack.upgrade"] = handler.new if env["rack.upgrade?"]
      [200, {}, []]
    }
  RUBY

  def with_events(&block)
    with_event_log(APP, &block)
  end

  # Frames until the data frames number `count` (or a close frame, which is
  # included): [opcode, payload] each.
  def read_frames(client, count, timeout: 20)
    frames = []
    while frames.count { |op, _| op <= 2 } < count
      frame = client.read_frame(timeout: timeout)
      flunk "the connection ended after #{frames.size} frames" unless frame
      frames << frame
      break if frame[0] == 8
    end
    frames
  end

  def assert_in_sequence(messages, from: 0)
    messages.each_with_index do |payload, i|
      number = from + i
      assert_equal format("%06d", number), payload[0, 6], "message #{i} is out of order"
      body = payload[7..]
      assert body == "s" || body == "B" * 150_000, "message #{number} came whole (#{payload.bytesize} bytes)"
    end
  end

  def test_many_writes_mixed_with_pings_arrive_whole_and_in_order
    with_events do |server, log|
      client = Client.new(server.port)
      # Everything at once, without reading: the first bursts fill the
      # socket (a big message every 4th: ~11 MB in all), so later writes
      # and pongs queue behind what the socket has not taken.
      pings = Array.new(12) { |i| "ping-#{i}" }
      bursts = 6
      bursts.times do |b|
        client.text("burst 50 4")
        client.send_frame(0x9, pings[2 * b])
        client.send_frame(0x9, pings[(2 * b) + 1])
      end
      frames = read_frames(client, bursts * 50)
      messages = frames.select { |op, _| op == 1 }.map { |_, payload| payload }
      pongs = frames.select { |op, _| op == 0xA }.map { |_, payload| payload }
      assert_equal bursts * 50, messages.size
      assert_in_sequence(messages)
      # Every pong answers its ping, in the order sent; each was read as a
      # frame of its own between whole messages (read_frame would have
      # choked on one cut into a message).
      pongs += Array.new(pings.size - pongs.size) { client.read_frame(timeout: 10)&.last }
      assert_equal pings, pongs
      assert wait_until { events(log).count { |e| e.start_with?("burst") } == bursts }, events(log).inspect
      assert wait_until { events(log).last == "drained 0" }, "on_drained once everything went: #{events(log).inspect}"
    ensure
      client&.close
    end
  end

  def test_writes_while_the_task_is_sending_stay_in_order
    with_events do |server, _log|
      client = Client.new(server.port)
      # Each round gives the race a few hundred chances; several rounds
      # make a frame that jumped the task's write all but certain to show.
      8.times do |round|
        client.text("trickle 300")
        client.send_frame(0x9, "during-#{round}")
        frames = read_frames(client, 300)
        assert_in_sequence(frames.select { |op, _| op == 1 }.map { |_, payload| payload }, from: round * 300)
        pong = frames.find { |op, _| op == 0xA } || client.read_frame(timeout: 10)
        assert_equal [0xA, "during-#{round}"], pong
      end
    ensure
      client&.close
    end
  end

  def test_a_write_larger_than_the_socket_buffer_queues_and_keeps_back_pressure
    with_events do |server, log|
      client = Client.new(server.port)
      client.text("big")
      assert wait_until { events(log).any? { |e| e.start_with?("after") } }, events(log).inspect
      big = events(log).find { |e| e.start_with?("big") }[/\d+/].to_i
      after = events(log).find { |e| e.start_with?("after") }[/\d+/].to_i
      assert_operator big, :>, 0, "8 MB to a client that does not read cannot all be sent at once"
      assert_operator big, :<=, 8_000_000
      assert_equal big + 5, after, "the next write queues behind the rest instead of going out"
      refute events(log).any? { |e| e.start_with?("drained") }, "nothing drained while the client does not read"
      assert_equal "b" * 8_000_000, client.read_message(timeout: 20)
      assert_equal "after", client.read_message
      assert wait_until { events(log).include?("drained 0") }, events(log).inspect
      client.text("echo")
      assert_equal "echo", client.read_message, "then writes go out again"
    ensure
      client&.close
    end
  end

  def test_a_close_during_writes_comes_after_them_and_nothing_follows_it
    with_events do |server, log|
      client = Client.new(server.port)
      client.text("close-after 60")
      assert wait_until { events(log).any? { |e| e.start_with?("closed") } }, events(log).inspect
      assert_includes events(log), "closed open=false late=false", "no write is taken after close"
      frames = read_frames(client, 60)
      messages = frames.select { |op, _| op == 1 }.map { |_, payload| payload }
      assert_equal 60, messages.size
      assert_in_sequence(messages)
      client.close_frame(4000)
      assert_equal [8, [4000].pack("n")], client.read_frame(timeout: 10), "then the close frame"
      assert client.eof?, "and nothing after it"
      assert wait_until { events(log).last == "close false" }, events(log).inspect
    ensure
      client&.close
    end
  end

  def test_a_client_close_during_a_burst_is_answered_after_the_burst
    with_events do |server, log|
      client = Client.new(server.port)
      client.text("burst 40 2")
      client.close_frame(1000)
      client.text("burst 40 2")
      frames = read_frames(client, 40)
      messages = frames.select { |op, _| op == 1 }.map { |_, payload| payload }
      assert_equal 40, messages.size
      assert_in_sequence(messages)
      assert_equal [8, [1000].pack("n")], client.read_frame(timeout: 10), "the close echoed after the burst"
      assert client.eof?, "the message after the close was not handled, nothing follows the close"
      assert wait_until { events(log).last == "close false" }, events(log).inspect
      assert_equal 1, events(log).count { |e| e.start_with?("burst") }
    ensure
      client&.close
    end
  end
  # A publish sends to every idle subscriber from the publishing thread
  # (docs/WEBSOCKETS.md "Writes") with the GVL released: a Ruby thread that
  # computes without pause keeps running during the fan-out. Held, it
  # could not take a single step until the publish returned. The computing
  # thread runs only around the publishes (it would slow every handshake
  # before them to one per time slice).
  PUBLISH_APP = <<~'RUBY'
    handler = Class.new do
      define_method(:on_open) { |conn| conn.subscribe("all") }
    end
    run lambda { |env|
      if env["rack.upgrade?"]
        env["rack.upgrade"] = handler.new
        [200, {}, []]
      else
        spins = 0
        spinner = Thread.new { loop { spins += 1 } }
        sleep 0.01 until spins.positive?
        runs = Array.new(3) do |i|
          before = spins
          reached = Tsubame.publish("all", "message #{i}")
          "#{reached}:#{spins - before}"
        end
        spinner.kill
        [200, { "content-type" => "text/plain" }, [runs.join(" ")]]
      end
    }
  RUBY

  def test_a_publish_lets_other_ruby_threads_run_while_it_sends
    with_server(PUBLISH_APP) do |server|
      clients = Array.new(500) { Client.new(server.port) }
      assert clients.all?(&:accepted?)
      runs = server.get("/publish").body.split.map { |run| run.split(":").map(&:to_i) }
      assert_equal [500] * 3, runs.map(&:first), "each publish reached every client"
      assert_operator runs.map(&:last).max, :>, 0, "the computing thread ran during a fan-out to 500: #{runs.inspect}"
      clients.each do |client|
        assert_equal (0..2).map { |i| [1, "message #{i}"] }, Array.new(3) { client.read_frame(timeout: 10) }
      end
    ensure
      clients&.each(&:close)
    end
  end
end
