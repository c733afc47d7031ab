# frozen_string_literal: true

require "test_helper"
require "json"
require "cluster/support"

# Tsubame.subscribe: Ruby blocks that hear Tsubame.publish (what
# ActionCable's tsubame adapter is built on; docs/WEBSOCKETS.md).
class UpgradeSubscribeTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::ClusterHelpers

  # Two listeners on "news", the first raising on "boom"; /heard answers
  # what the second heard (binary messages in hex), with encodings and the
  # thread that called it.
  APP = <<~'RUBY'
    require "json"
    heard = []
    lock = Mutex.new
    Tsubame.subscribe("news") { |message| raise "listener failure" if message == "boom" }
    slow = []
    Tsubame.subscribe("slow") { |message| sleep 1; lock.synchronize { slow << message } }
    listener = Tsubame.subscribe("news") do |message|
      shown = message.encoding == Encoding::BINARY ? message.unpack1("H*") : message
      lock.synchronize { heard << [shown, message.encoding.to_s, Thread.current.name] }
    end
    text = ->(body) { [200, { "content-type" => "text/plain", "content-length" => body.bytesize.to_s }, [body]] }
    run lambda { |env|
      params = Rack::Utils.parse_query(env["QUERY_STRING"])
      case env["PATH_INFO"]
      when "/publish"
        message = params.fetch("message")
        message = message.b if params["binary"]
        text.call(Tsubame.publish(params.fetch("channel"), message).to_s)
      when "/unsubscribe" then text.call(Tsubame.unsubscribe("news", listener).to_s)
      when "/listeners" then text.call(JSON.generate(Tsubame::PublishListeners.process.stats))
      when "/heard"
        text.call(JSON.generate("pid" => Process.pid, "heard" => lock.synchronize { heard.dup },
                                "slow" => lock.synchronize { slow.dup }))
      else text.call("?")
      end
    }
  RUBY

  def heard(server)
    JSON.parse(server.get("/heard").body)
  end

  def test_single_mode_listeners_hear_every_publish_on_their_own_thread
    with_server(APP) do |server|
      %w[one boom two].each { |m| assert_equal "0", server.get("/publish?channel=news&message=#{m}").body }
      server.get("/publish?channel=other&message=not-this")
      server.get("/publish?channel=news&message=%00%FF&binary=1")
      expected = [["one", "UTF-8", "tsubame-publish"], ["boom", "UTF-8", "tsubame-publish"],
                  ["two", "UTF-8", "tsubame-publish"], ["00ff", "ASCII-8BIT", "tsubame-publish"]]
      assert wait_until { heard(server)["heard"].size == 4 }, heard(server).inspect
      assert_equal expected, heard(server)["heard"], "in order, the raising listener's failure stopping nothing"
      assert wait_until { server.stderr.include?('Tsubame.subscribe listener on "news" raised: RuntimeError') },
             server.stderr

      assert_equal "true", server.get("/unsubscribe").body
      server.get("/publish?channel=news&message=after")
      sleep 0.3
      assert_equal 4, heard(server)["heard"].size, "an unsubscribed block hears nothing more"
    end
  end

  # In a cluster, every worker's listeners hear every worker's publishes,
  # in one same order (from when the master knows the worker has booted:
  # with_cluster waits for both).
  def test_cluster_listeners_in_every_worker_hear_every_publish_in_one_order
    with_cluster(APP, workers: 2) do |server|
      messages = (1..30).map { |i| "m#{i}" }
      messages.each { |m| server.get("/publish?channel=news&message=#{m}") }
      lists = {}
      assert wait_until(timeout: 15) {
        answer = heard(server)
        lists[answer["pid"]] = answer["heard"].map(&:first)
        lists.size == 2 && lists.values.all? { |list| list.size == 30 }
      }, lists.inspect
      first, second = lists.values
      assert_equal messages.sort, first.sort
      assert_equal first, second, "one order in both workers"
    end
  end

  # What waits for the listeners' thread is bounded by publish_buffer:
  # with 100 bytes and a listener that takes 1 s a message, once it is
  # busy with a first 60-byte message, of four more published at once the
  # first waits and the other three are dropped and counted.
  def test_a_slow_listener_drops_past_publish_buffer_and_counts_them
    Dir.mktmpdir do |dir|
      config = File.join(dir, "tsubame.rb")
      File.write(config, "publish_buffer 100\n")
      with_server(APP, args: ["-C", config]) do |server|
        messages = (1..5).map { |i| format("%060d", i) }
        server.get("/publish?channel=slow&message=#{messages.first}")
        listeners = -> { JSON.parse(server.get("/listeners").body) }
        assert wait_until { listeners.call["queued"].zero? }, "the listener took the first"
        messages.drop(1).each { |m| server.get("/publish?channel=slow&message=#{m}") }
        assert wait_until(timeout: 10) { heard(server)["slow"].size == 2 }, heard(server).inspect
        sleep 1.2
        assert_equal messages.first(2), heard(server)["slow"]
        stats = listeners.call
        assert_equal 3, stats["dropped"], stats.inspect
        assert_equal 2, stats["delivered"], stats.inspect
        assert_equal 0, stats["queued"], stats.inspect
      end
    end
  end
end
