# frozen_string_literal: true

# The slow upstream for benchmarks/io_bound.sh: answers after DELAY seconds
# (default 0.5). Served by Tsubame in fiber mode so that a thousand waiting
# requests cost it nothing; the same upstream serves every server measured.
delay = Float(ENV.fetch("DELAY", "0.5"))
run lambda { |_env|
  sleep delay
  [200, { "content-type" => "text/plain" }, ["upstream\n"]]
}
