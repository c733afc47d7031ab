# frozen_string_literal: true

require "deploy/support"
require "tsubame/support/systemd_notify"

# systemd Type=notify (docs/SYSTEMD.md): exe/tsubame started with
# $NOTIFY_SOCKET pointing at a test listener, as systemd would.
class SystemdNotifyTest < Minitest::Test
  include Tsubame::DeployHelpers

  # --- the variables, without a server ----------------------------------

  def test_variables_are_taken_out_of_the_environment
    env = { "NOTIFY_SOCKET" => "@abc", "WATCHDOG_USEC" => "4000000", "WATCHDOG_PID" => Process.pid.to_s }
    notify = Tsubame::SystemdNotify.from_env(env)
    assert_empty env
    assert notify.enabled?
    assert_in_delta 2.0, notify.watchdog_interval
    assert_equal({ "NOTIFY_SOCKET" => "@abc", "WATCHDOG_USEC" => "4000000", "WATCHDOG_PID" => Process.pid.to_s },
                 notify.exec_env)
  end

  def test_watchdog_for_another_pid_is_not_ours
    notify = Tsubame::SystemdNotify.from_env("NOTIFY_SOCKET" => "/x", "WATCHDOG_USEC" => "1000",
                                             "WATCHDOG_PID" => (Process.pid + 1).to_s)
    assert notify.enabled?
    assert_nil notify.watchdog_interval
  end

  def test_without_notify_socket_nothing_is_sent
    notify = Tsubame::SystemdNotify.from_env({})
    refute notify.enabled?
    refute notify.ready("x")
    assert_nil notify.start_ticker(healthy: -> { true }) { "x" }
    assert_empty notify.exec_env
  end

  # --- single mode --------------------------------------------------------

  def test_single_mode_ready_status_stopping
    with_listener do |listener|
      with_server(ENV_APP, env: listener.env) do |server|
        index, ready = listener.wait_for(/READY=1/)
        fields = ready.fields
        assert_match(/\AServing: threads 0:5, /, fields["STATUS"])
        assert_equal server.pid.to_s, fields["MAINPID"]
        # Unset for the app, as sd_notify(unset_environment) does.
        assert_equal "seen=", server.get("/").body[/seen=.*/]
        assert_equal 0, server.stop.exitstatus
        stop_index, = listener.wait_for(/STOPPING=1/, after: index)
        assert_operator stop_index, :>, index
        assert_equal 1, listener.messages.count { |m| m.text.include?("READY=1") }
      end
    end
  end

  def test_abstract_notify_socket
    with_listener(abstract: true) do |listener|
      assert listener.env_value.start_with?("@")
      with_server(ENV_APP, env: listener.env) do |server|
        listener.wait_for(/READY=1\nSTATUS=Serving/)
        server.stop
        listener.wait_for(/STOPPING=1/)
      end
    end
  end

  # "It is recommended that a daemon sends a keep-alive notification
  # message to the service manager every half of the time returned here."
  def test_watchdog_pings_every_half_of_watchdog_usec
    with_listener do |listener|
      with_server(ENV_APP, env: listener.env.merge("WATCHDOG_USEC" => "1000000")) do |server|
        listener.wait_for(/READY=1/)
        index, = listener.wait_for(/WATCHDOG=1/)
        listener.wait_for(/WATCHDOG=1/, after: index + 3, timeout: 10)
        pings = listener.messages.select { |m| m.text == "WATCHDOG=1" }.map(&:at)
        gaps = pings.each_cons(2).map { |a, b| b - a }
        gaps.each { |gap| assert_in_delta 0.5, gap, 0.2, "gaps: #{gaps.inspect}" }
        assert_equal "seen=", server.get("/").body[/seen=.*/]
      end
    end
  end

  def test_watchdog_pid_of_another_process_means_no_pings
    with_listener do |listener|
      env = listener.env.merge("WATCHDOG_USEC" => "400000", "WATCHDOG_PID" => "1")
      with_server(ENV_APP, env: env) do |_server|
        listener.wait_for(/READY=1/)
        sleep 1.0
        assert_empty(listener.messages.select { |m| m.text.include?("WATCHDOG") })
      end
    end
  end

  def test_single_mode_hot_restart_reloads_then_ready_with_the_same_pid
    with_listener do |listener|
      with_server(ENV_APP, env: listener.env) do |server|
        index, = listener.wait_for(/READY=1/)
        server.signal("USR2")
        reload_index, reload = listener.wait_for(/RELOADING=1/, after: index)
        assert_match(/MONOTONIC_USEC=\d+/, reload.text)
        _, ready = listener.wait_for(/READY=1/, after: reload_index, timeout: 30)
        # exec kept the pid: the service's main process did not change.
        assert_equal server.pid.to_s, ready.fields["MAINPID"]
        assert_equal "seen=", server.get("/").body[/seen=.*/]
      end
    end
  end

  # --- cluster mode -------------------------------------------------------

  # Each worker leaves a file once its app is loaded (before it reports
  # booted), so the files present when READY=1 arrives are the booted ones.
  def booting_app(dir)
    <<~RUBY
      sleep 0.3
      File.write(File.join(#{dir.inspect}, "loaded-\#{Process.pid}"), "")
      #{ENV_APP}
    RUBY
  end

  def test_cluster_ready_only_once_every_worker_booted
    in_tmpdir do |dir|
      loaded = ->(text) { text.include?("READY=1") ? Dir[File.join(dir, "loaded-*")].size : nil }
      with_listener(snapshot: loaded) do |listener|
        with_cluster(booting_app(dir), workers: 2, env: listener.env) do |server|
          _, ready = listener.wait_for(/READY=1/)
          assert_equal 2, ready.snapshot, "workers loaded when READY=1 came"
          assert_match(%r{Workers: 2/2 booted, phase 0}, ready.fields["STATUS"])
          assert_equal server.pid.to_s, ready.fields["MAINPID"]
          assert_equal "seen=", server.get("/").body[/seen=.*/]
          assert_equal 0, server.stop.exitstatus
          listener.wait_for(/STOPPING=1/)
        end
      end
    end
  end

  def test_cluster_phased_restart_reloads_then_ready
    with_listener do |listener|
      with_cluster(PID_APP, workers: 2, env: listener.env) do |server|
        index, = listener.wait_for(/READY=1/)
        server.signal("USR1")
        reload_index, reload = listener.wait_for(/RELOADING=1/, after: index)
        assert_match(/STATUS=Phased restart to phase 1/, reload.text)
        _, ready = listener.wait_for(/READY=1/, after: reload_index)
        assert_match(%r{Workers: 2/2 booted, phase 1}, ready.fields["STATUS"])
        assert_includes server.stdout, "Phased restart done"
      end
    end
  end

  def test_cluster_hot_restart_reloads_then_ready_from_the_same_pid
    with_listener do |listener|
      with_cluster(ENV_APP, workers: 2, env: listener.env) do |server|
        index, = listener.wait_for(/READY=1/)
        server.signal("USR2")
        reload_index, = listener.wait_for(/RELOADING=1/, after: index)
        _, ready = listener.wait_for(/READY=1/, after: reload_index, timeout: 40)
        assert_equal server.pid.to_s, ready.fields["MAINPID"]
        assert_match(%r{Workers: 2/2 booted}, ready.fields["STATUS"])
        # The re-executed master got $NOTIFY_SOCKET back, its workers not.
        assert_equal "seen=", server.get("/").body[/seen=.*/]
      end
    end
  end

  def test_cluster_status_is_sent_periodically
    with_listener do |listener|
      with_cluster(PID_APP, workers: 1, env: listener.env) do |_server|
        index, = listener.wait_for(/READY=1/)
        _, status = listener.wait_for(/\ASTATUS=Workers: 1\/1 booted/, after: index,
                                      timeout: Tsubame::SystemdNotify::STATUS_INTERVAL + 3)
        assert_match(/threads 0:5 each, \d+ busy, \d+ queued, \d+ requests/, status.text)
      end
    end
  end
end
