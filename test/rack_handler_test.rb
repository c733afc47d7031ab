# frozen_string_literal: true

require "test_helper"

# How Rack handler options become Tsubame options (running is covered by the
# launcher tests).
class RackHandlerTest < Minitest::Test
  include Tsubame::TestHelpers

  def handler
    require "rack"
    skip "Rack 2 handler only" unless Rack.release.start_with?("2.")
    require "rack/handler"
    Rack::Handler.get("tsubame")
  end

  def configure(**options)
    handler.configure(config_files: "-", **options).first
  end

  def test_registered
    assert_equal "Rack::Handler::Tsubame", handler.name
    assert_includes handler.valid_options.keys, "Threads=MIN:MAX"
  end

  def test_maps_options
    options = configure(Host: "127.0.0.1", Port: 8080, Threads: "2:9", environment: "test", Verbose: true)
    assert_equal ["tcp://127.0.0.1:8080"], options[:binds]
    assert_equal [2, 9], [options[:threads_min], options[:threads_max]]
    assert_equal "test", options[:environment]
    assert_equal true, options[:log_requests]
  end

  def test_host_forms
    assert_equal ["tcp://[::1]:9292"], configure(Host: "::1")[:binds]
    assert_equal ["unix:///tmp/app.sock"], configure(Host: "/tmp/app.sock")[:binds]
    assert_equal ["tcp://0.0.0.0:3000"], configure(Port: 3000)[:binds]
  end

  def test_config_file_beats_defaults_the_launcher_did_not_get_from_the_user
    in_tmpdir do |dir|
      path = write_file(dir, "tsubame.rb", "port 4000\n")
      options, = handler.configure(Host: "localhost", Port: 3000, config_files: [path],
                                   user_supplied_options: [:config_files])
      assert_equal ["tcp://0.0.0.0:4000"], options[:binds]
      options, = handler.configure(Host: "localhost", Port: 3000, config_files: [path],
                                   user_supplied_options: %i[Port config_files])
      assert_equal ["tcp://localhost:3000"], options[:binds]
    end
  end
end
