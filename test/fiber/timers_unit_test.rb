# frozen_string_literal: true

require "test_helper"
require "tsubame/fiber/timers"

# The fiber scheduler's timer list on its own: order, cancellation, and
# the wait it reports to the loop.
class FiberTimersUnitTest < Minitest::Test
  def setup
    @timers = Tsubame::FiberTimers.new
  end

  def fired(now)
    out = []
    @timers.fire(now) { |target, value| out << [target, value] }
    out
  end

  def test_deadlines_out_of_order_fire_soonest_first_and_cancelled_never
    random = Random.new(7)
    armed = Array.new(500) { |i| @timers.after(random.rand, i, i * 2) }
    armed.each_with_index { |timer, i| timer.cancel if (i % 5).zero? }
    expected = armed.reject(&:cancelled).sort_by(&:at).map { |t| [t.target, t.value] }
    assert_equal expected, fired(Tsubame::FiberTimers.now + 2)
    assert @timers.empty?
  end

  def test_equal_delays_fire_in_the_order_armed
    now = Tsubame::FiberTimers.now
    10.times { |i| @timers.after(0.5, i) }
    assert_empty fired(now + 0.1)
    assert_equal (0..9).to_a, fired(now + 1).map(&:first)
  end

  def test_only_due_timers_fire
    now = Tsubame::FiberTimers.now
    @timers.after(0.2, :late)
    @timers.after(0.05, :soon)
    assert_equal [[:soon, nil]], fired(now + 0.1)
    refute @timers.empty?
  end

  def test_wait_interval_skips_cancelled_and_is_nil_when_none
    assert_nil @timers.wait_interval
    first = @timers.after(0.1, :a)
    @timers.after(5, :b)
    first.cancel
    wait = @timers.wait_interval
    assert_operator wait, :>, 4.5
    assert_operator wait, :<=, 5
    assert_equal 0, @timers.wait_interval(Tsubame::FiberTimers.now + 10)
  end
end
