# frozen_string_literal: true

# Benchmark app for reforking (benchmarks/refork_memory.sh): a single-file
# Rails 6.1 app (Debian's ruby-railties) whose heap looks like a large
# app's once warm: a few thousand classes with methods (code, constants,
# method caches), ~50 MB of objects cached at boot, and more built lazily
# by the first requests (what view caches, route and i18n lookups and
# memoized queries do in a real app). Each worker that loads it or warms
# up on its own pays for all of it; workers forked from a warm process
# share those pages until they write to them.
require "action_controller/railtie"

class WarmHeapApp < Rails::Application
  config.load_defaults 6.1
  config.eager_load = true
  config.cache_classes = true
  config.consider_all_requests_local = false
  config.logger = Logger.new(nil)
  config.log_level = :fatal
  config.secret_key_base = "x" * 64
  config.hosts.clear
end

# 3,000 model-like classes, each with a few methods and constants, defined
# from source so each one has its own instruction sequences.
module Catalog
  3000.times do |i|
    module_eval(<<~RUBY, "catalog/model_#{i}.rb", 1)
      class Model#{i}
        FIELDS = %w[id name price_#{i} created_at updated_at].freeze
        SCOPE = "model_#{i}s"
        def self.table_name = SCOPE
        def initialize(attrs = {}) = @attrs = attrs
        def name = @attrs.fetch(:name, "model #{i}")
        def price = @attrs.fetch(:price, #{i}) * 1.2
        def to_h = FIELDS.to_h { |f| [f, @attrs[f.to_sym]] }
        def valid? = !name.empty? && price >= 0
      end
    RUBY
  end
end

# ~50 MB at boot: what a large app's caches, configuration and
# reference data hold.
BOOT_CACHE = Array.new(25_000) do |i|
  { id: i, key: "record-#{i}-#{"k" * 40}", tags: Array.new(8) { |t| "tag-#{t}-#{i}-padding-to-heap" },
    body: "b" * (i % 512 + 512) }
end.freeze

class PagesController < ActionController::Base
  # Built by the requests: ~30 MB per process, one chunk per request for
  # the first 100 requests a process serves.
  LAZY = {} # rubocop:disable Style/MutableConstant
  LAZY_CHUNKS = 100

  def show
    n = LAZY.size
    LAZY[n] = Array.new(3000) { |j| "lazy-entry-#{n}-#{j}-#{"v" * 40}" } if n < LAZY_CHUNKS
    model = Catalog.const_get("Model#{params[:id].to_i % 3000}").new(name: "x")
    # Fixed width, so that ab sees every response the same length.
    render plain: format("%-12s %10.1f %4d %6d\n", model.name, model.price, LAZY.size, BOOT_CACHE.size)
  end
end

WarmHeapApp.initialize!
WarmHeapApp.routes.draw { get "/pages/:id", to: "pages#show" }

run WarmHeapApp
