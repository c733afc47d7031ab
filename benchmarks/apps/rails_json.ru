# frozen_string_literal: true

# Benchmark app: a single-file Rails 6.1 app (Debian's ruby-railties and
# ruby-actionpack) with one JSON action, GET /items (rails_app.rb).
require_relative "rails_app"

run BenchApp
