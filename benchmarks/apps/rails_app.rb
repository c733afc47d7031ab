# frozen_string_literal: true

# The Rails 6.1 app of benchmarks/apps/rails_json.ru (Debian's
# ruby-railties and ruby-actionpack): one JSON action, in production mode
# with the middleware a default API app has.
require "action_controller/railtie"

class BenchApp < Rails::Application
  config.load_defaults 6.1
  config.api_only = true
  config.eager_load = true
  config.cache_classes = true
  config.consider_all_requests_local = false
  config.logger = Logger.new(nil)
  config.log_level = :fatal
  config.secret_key_base = "x" * 64
  config.hosts.clear
end

class ItemsController < ActionController::API
  ITEMS = Array.new(10) { |i| { id: i, name: "item #{i}", price: i * 1.5, tags: %w[a b c] } }.freeze

  def index
    render json: { items: ITEMS, count: ITEMS.size }
  end
end

BenchApp.initialize!
# Drawn after initialize!: the routes reloader would replace routes drawn
# before it.
BenchApp.routes.draw { get "/items", to: "items#index" }
