# frozen_string_literal: true

# Background threads that hold the GVL (as ActionCable's pools do while
# they transmit to a thousand clients), beside a plain route: the
# /hello-while-broadcasting gap of docs/BENCHMARKS.md without WebSockets.
# BURNERS=2 (threads), BURN_SLEEP=1 (each sleeps 1 ms between chunks).
#
#   exe/tsubame -e production -t 5:5 -b tcp://127.0.0.1:9292 benchmarks/apps/gvl_burners.ru
#   puma -e production -t 5:5 -b tcp://127.0.0.1:9292 benchmarks/apps/gvl_burners.ru
#   wrk -t1 -c10 -d5s --latency http://127.0.0.1:9292/
Integer(ENV.fetch("BURNERS", "2")).times do
  Thread.new do
    loop do
      x = 0
      200_000.times { |i| x += i }
      sleep 0.001 if ENV["BURN_SLEEP"]
    end
  end
end
run ->(_env) { [200, { "content-type" => "text/plain", "content-length" => "4" }, ["pong"]] }
