# frozen_string_literal: true

require "test_helper"

# Tsubame caps glibc's malloc arenas at 2 unless MALLOC_ARENA_MAX is set
# (docs/RELIABILITY.md). The app makes five pool threads allocate at once,
# then has glibc print its arenas (malloc_stats, to the server's stderr).
class MallocArenasTest < Minitest::Test
  include Tsubame::TestHelpers

  APP = <<~RUBY
    require "fiddle"
    stats = Fiddle::Function.new(Fiddle::Handle::DEFAULT["malloc_stats"], [], Fiddle::TYPE_VOID)
    run lambda { |env|
      if env["PATH_INFO"] == "/arenas"
        $stderr.flush
        stats.call
        return [200, {}, ["printed"]]
      end
      kept = Array.new(200) { "x" * 4096 }
      sleep 0.05
      [200, {}, [kept.size.to_s]]
    }
  RUBY

  def arenas_after_load(env)
    with_server(APP, args: %w[-t 5:5], env: env) do |server|
      Array.new(10) { Thread.new { server.get("/").code } }.each { |t| assert_equal "200", t.value }
      assert_equal "printed", server.get("/arenas").body
      Timeout.timeout(5) { sleep 0.05 until server.stderr.include?("Total (incl. mmap)") }
      server.stderr.scan(/^Arena \d+:/).size
    end
  end

  def test_arenas_are_capped_at_two_by_default
    assert_operator arenas_after_load("MALLOC_ARENA_MAX" => nil), :<=, 2
  end

  def test_an_operators_malloc_arena_max_is_left_alone
    assert_operator arenas_after_load("MALLOC_ARENA_MAX" => "8"), :>, 2
  end
end
