# frozen_string_literal: true

# An endpoint of a chosen shape, for benchmarks/tune_replay.rb: each
# request waits SHAPE_SLEEP_MS (standing in for I/O), then burns
# SHAPE_CPU_MS of this thread's CPU time (Ruby work; measured on the
# thread's own clock, so a busy machine makes it slower, not cheaper);
# SHAPE_TAIL_PERCENT of the requests wait SHAPE_TAIL_MS instead (a slow
# query). Seed 001's shape is SHAPE_SLEEP_MS=36 SHAPE_CPU_MS=4.
sleep_s = Float(ENV.fetch("SHAPE_SLEEP_MS", "36")) / 1000
cpu_s = Float(ENV.fetch("SHAPE_CPU_MS", "4")) / 1000
tail_share = Float(ENV.fetch("SHAPE_TAIL_PERCENT", "0")) / 100
tail_s = Float(ENV.fetch("SHAPE_TAIL_MS", "0")) / 1000

run lambda { |_env|
  sleep(tail_share.positive? && rand < tail_share ? tail_s : sleep_s)
  if cpu_s.positive?
    until_cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) + cpu_s
    x = 0
    x += 1 while Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) < until_cpu
  end
  [200, { "content-type" => "text/plain" }, ["shaped\n"]]
}
