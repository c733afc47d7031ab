# frozen_string_literal: true

require "test_helper"
require "minitest/mock"

# The test helper's free_port (test/free_ports.rb): ports the kernel never
# hands out on its own, that no two processes of the suite share, and that
# nothing listened on.
class FreePortsTest < Minitest::Test
  include Tsubame::TestHelpers

  def ephemeral_low
    File.read("/proc/sys/net/ipv4/ip_local_port_range").split.first.to_i
  end

  def test_ports_are_distinct_and_below_the_ephemeral_range
    ports = Array.new(20) { free_port }
    assert_equal 20, ports.uniq.size
    ports.each { |port| assert_operator port, :<, ephemeral_low }
    # Usable: the server the test starts can bind it.
    TCPServer.new("127.0.0.1", ports.first).close
  end

  # Another process of the suite (the Rack 2 and Rack 3 runs go at once)
  # is never given a port this one holds: offered only those, it has none.
  def test_another_process_is_not_given_the_ports_this_one_holds
    held = [free_port, free_port].sort
    script = <<~RUBY
      require "free_ports"
      Tsubame::FreePorts.define_singleton_method(:pool) { #{held.inspect} }
      begin
        puts "took \#{Tsubame::FreePorts.take}"
      rescue RuntimeError => e
        puts e.message
      end
    RUBY
    out, status = Open3.capture2e(RbConfig.ruby, "-I#{__dir__}", "-e", script)
    assert status.success?, out
    assert_equal "FreePorts: every port in #{held.first}..#{held.last} is reserved or in use\n", out
  end

  def test_a_port_something_listens_on_is_passed_over
    busy = TCPServer.new("127.0.0.1", 0)
    port = busy.addr[1]
    Tsubame::FreePorts.stub(:pool, [port]) do
      error = assert_raises(RuntimeError) { Tsubame::FreePorts.take }
      assert_includes error.message, "every port in #{port}..#{port} is reserved or in use"
    end
  ensure
    busy&.close
  end
end
