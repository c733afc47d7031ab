# frozen_string_literal: true

# The Rails app of rails_json.ru, timed: the CPU time its calls take on
# their thread (Rails, and the garbage collections that run inside them)
# is summed, and GET /app-cpu answers "<microseconds per call> <calls>"
# and starts the sums again (benchmarks/app_share.sh).
require_relative "rails_app"

class AppCpu
  def initialize(app)
    @app = app
    @lock = Mutex.new
    @seconds = 0.0
    @calls = 0
  end

  def call(env)
    return report if env["PATH_INFO"] == "/app-cpu"

    started = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    response = @app.call(env)
    spent = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - started
    @lock.synchronize do
      @seconds += spent
      @calls += 1
    end
    response
  end

  private

  def report
    text = @lock.synchronize do
      per_call = @calls.zero? ? 0.0 : @seconds * 1_000_000 / @calls
      line = format("%.1f %d\n", per_call, @calls)
      @seconds = 0.0
      @calls = 0
      line
    end
    [200, { "content-type" => "text/plain" }, [text]]
  end
end

run AppCpu.new(BenchApp)
