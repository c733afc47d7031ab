# frozen_string_literal: true

require "cluster/support"
require "socket"
require "yaml"

# A config/puma.rb as Rails generates it boots Tsubame with the workers,
# threads and binds Puma itself gets from it.
class ClusterConfigTest < Minitest::Test
  include Tsubame::ClusterHelpers

  PUMA_RB = <<~RUBY
    # As `rails new` writes it (Rails 7.0), plus state_path and Puma 5's
    # nakayoshi_fork.
    max_threads_count = ENV.fetch("RAILS_MAX_THREADS") { 5 }
    min_threads_count = ENV.fetch("RAILS_MIN_THREADS") { max_threads_count }
    threads min_threads_count, max_threads_count

    worker_timeout 3600 if ENV.fetch("RAILS_ENV", "development") == "development"

    port ENV.fetch("PORT") { 3000 }

    environment ENV.fetch("RAILS_ENV") { "development" }

    pidfile ENV.fetch("PIDFILE") { "tmp/pids/server.pid" }

    workers ENV.fetch("WEB_CONCURRENCY") { 2 }

    preload_app!

    plugin :tmp_restart

    state_path "tmp/pids/puma.state"

    nakayoshi_fork

    on_worker_boot do |index|
      File.write("tmp/worker-\#{index}", Process.pid.to_s)
    end
  RUBY

  ENV_VARS = { "RAILS_MAX_THREADS" => "3", "RAILS_ENV" => "production" }.freeze

  def app_dir(dir)
    write_file(dir, "config/puma.rb", PUMA_RB)
    write_file(dir, "config.ru", Tsubame::TestHelpers.linted(PID_APP))
    FileUtils.mkdir_p(File.join(dir, "tmp/pids"))
  end

  # Starts a command in dir and returns [pid, banner] once it listens and
  # its workers booted.
  def boot(dir, env, *command, booted:)
    log = File.join(dir, "boot.log")
    pid = Process.spawn(env, *command, chdir: dir, out: log, err: [:child, :out], in: File::NULL)
    Timeout.timeout(20) do
      sleep 0.05 until File.exist?(log) && File.read(log).scan(booted).size >= 2
    end
    [pid, File.read(log)]
  rescue Timeout::Error
    flunk "#{command.first} did not boot:\n#{File.read(log)}"
  end

  def stop(pid)
    Process.kill("TERM", pid)
    Timeout.timeout(20) { Process.wait2(pid).last }
  end

  # The settings both banners show, with pids and names taken out.
  def settings(banner)
    banner.lines.grep(/Min threads|Max threads|Environment|Workers:|Listening on/)
          .map { |line| line.sub(/\A\[\d+\] /, "").strip }
  end

  def test_a_rails_puma_rb_boots_with_pumas_workers_threads_and_binds
    skip "puma is not installed" unless system("puma", "--version", out: File::NULL, err: File::NULL)

    in_tmpdir do |dir|
      app_dir(dir)
      env = ENV_VARS.merge("PORT" => free_port.to_s)

      puma_pid, puma_banner = boot(dir, env, "puma", booted: /Worker \d \(PID: \d+\) booted/)
      stop(puma_pid) # Puma re-raises TERM, so its status is "killed by TERM"

      pid, banner = boot(dir, env, RbConfig.ruby, "-w", Tsubame::TestHelpers::EXE,
                         booted: /Worker \d \(PID: \d+\) booted/)
      begin
        expected = settings(puma_banner)
        assert_equal 5, expected.size, puma_banner
        assert_equal expected, settings(banner)
        assert_equal ["*  Min threads: 3", "*  Max threads: 3", "*  Environment: production", "*      Workers: 2",
                      "* Listening on http://0.0.0.0:#{env["PORT"]}"], settings(banner)
        assert_match(/Preloading application/, banner)

        # Every directive of it is implemented (nakayoshi_fork too): no warning.
        assert_empty banner.lines.grep(/warning/), banner

        assert_equal pid.to_s, File.read(File.join(dir, "tmp/pids/server.pid")).strip
        assert_equal pid, YAML.safe_load(File.read(File.join(dir, "tmp/pids/puma.state")))["pid"]
        workers = [0, 1].map { |index| File.read(File.join(dir, "tmp/worker-#{index}")).to_i }
        # Nine slow requests at once against 3 threads per worker: a worker
        # with no idle thread leaves new connections to the other
        # (wait_for_less_busy_worker), so both answer. (Twenty quick
        # requests one after another could all land on one worker.)
        slow = URI("http://127.0.0.1:#{env["PORT"]}/slow?1")
        served = Array.new(9) { Thread.new { Net::HTTP.get(slow).to_i } }.map(&:value).uniq.sort
        assert_equal workers.sort, served
      ensure
        status = stop(pid)
      end
      assert_equal 0, status.exitstatus
      refute File.exist?(File.join(dir, "tmp/pids/server.pid"))
    end
  end

  def test_tmp_restart_restarts_like_usr2
    in_tmpdir do |dir|
      app_dir(dir)
      env = ENV_VARS.merge("PORT" => free_port.to_s, "WEB_CONCURRENCY" => "1")
      pid, = boot(dir, env, RbConfig.ruby, "-w", Tsubame::TestHelpers::EXE,
                  booted: /Worker \d \(PID: \d+\) booted|Use Ctrl-C/)
      begin
        before = Net::HTTP.get(URI("http://127.0.0.1:#{env["PORT"]}/")).to_i
        sleep 1.1 # the file is looked at once a second; its mtime must change
        FileUtils.touch(File.join(dir, "tmp/restart.txt"))
        log = File.join(dir, "boot.log")
        Timeout.timeout(15) { sleep 0.05 until File.read(log).scan(/booted/).size >= 2 }
        Timeout.timeout(5) do
          sleep 0.05 until Net::HTTP.get(URI("http://127.0.0.1:#{env["PORT"]}/")).to_i != before
        end
        assert_match(/Hot restart: re-executing/, File.read(log))
      ensure
        stop(pid)
      end
    end
  end
end
