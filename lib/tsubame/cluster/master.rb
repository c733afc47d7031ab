# frozen_string_literal: true

require "json"
require "time"
require "tsubame/version"
require "tsubame/errors"
require "tsubame/config/bind_uri"
require "tsubame/serve/server"
require "tsubame/serve/listeners"
require "tsubame/restart/hot_restart"
require "tsubame/restart/check"
require "tsubame/config/hooks"
require "tsubame/support/log"
require "tsubame/support/log_redirect"
require "tsubame/config/app_loader"
require "tsubame/cluster/worker"
require "tsubame/cluster/worker_handle"
require "tsubame/cluster/worker_link"
require "tsubame/cluster/fork_link"
require "tsubame/cluster/reforking"
require "tsubame/cluster/worker_events"
require "tsubame/cluster/websocket_handoff"
require "tsubame/control/run_files"
require "tsubame/control/process_sample"
require "tsubame/support/process_info"
require "tsubame/restart/restart_file"
require "tsubame/support/clock"
require "tsubame/support/systemd_notify"
require "tsubame/serve/socket_activation"
require "tsubame/serve/idle_timeout"
require "tsubame/config/puma_constant"

module Tsubame
  # Cluster mode's master process. It binds the listeners, forks `workers`
  # processes that serve them, and from then on only supervises: it never
  # runs the app, and never starts an engine (tokio threads must not exist
  # in a process that forks). Everything happens on one loop in the main
  # thread, woken by signals (through a self-pipe), by messages from the
  # workers, and by a short tick for timeouts.
  class Cluster
    include Clock
    include Reforking

    SIGNALS = %w[TERM INT USR1 USR2 TTIN TTOU HUP CHLD URG].freeze

    # The loop's longest sleep: bounds how late a timeout is noticed. Deaths
    # and signals wake it at once.
    TICK = 0.2

    # This many workers in a row dying before they boot is a boot loop:
    # with no worker serving, the master gives up (exit status 1); with some
    # serving, it keeps them and retries at a slowing pace.
    BOOT_FAILURE_LIMIT = 5
    MAX_RESPAWN_DELAY = 30.0

    # A halted worker that ignores QUIT this long is killed.
    HALT_GRACE = 2.0

    # Stopped workers get drain_timeout, plus this for the app threads and
    # hooks, before they are killed (unless worker_shutdown_timeout says).
    SHUTDOWN_MARGIN = 5.0

    attr_reader :phase

    # systemd: the SystemdNotify to report to (the Launcher's).
    def initialize(options, app: nil, stdout: $stdout, stderr: $stderr, systemd: SystemdNotify.take)
      @options = options
      @systemd = systemd
      @app = app
      @stdout = stdout
      @stderr = stderr
      @log = Log.new(stdout, stderr)
      @commands = Thread::Queue.new
      @workers = []
      @lock = Mutex.new
      @replies = {}
      @request_id = 0
      @phase = 0
      @wanted = options[:workers]
      @stopping = nil
      @exit_status = 0
      @boot_failures = 0
      # Serving workers that died unexpectedly, and workers the master
      # killed (hung, stuck, not booting, not stopping), for the stats.
      @worker_deaths = 0
      @worker_kills = 0
      @events = WorkerEvents.new
      # Tsubame.publish relayed between workers: messages handed to a
      # worker's link, and dropped because that worker was not reading.
      @publish_relayed = 0
      @publish_dropped = 0
      @respawn_at = 0.0
      @phased_restart = false
      @all_booted = false
      @started_at = Time.now
      @control = nil
      # A hot restart's pre-flight check under way (HotRestartCheck).
      @restart_check = nil
      @idle = IdleTimeout.new(options[:idle_timeout]) if options[:idle_timeout]
      # websocket_workers: the hand-off socket (made in #run) and whether
      # the HTTP workers were last told to use it.
      @handoff = nil
      @handoff_on = false
    end

    # Returns the exit status once every worker has stopped.
    def run
      @master_pid = Process.pid
      print_header
      preload
      @listeners = Listeners.bind(SelfSigned.binds(@options), @options[:backlog],
                                  activated_binds: @options[:bind_to_activated_sockets])
      # Before any fork: workers inherit one session-ticket secret, so a
      # client resumes its TLS session on whichever worker it reaches.
      Native.seed_tls_tickets
      @handoff = WebsocketHandoff.new if @options[:websocket_workers].positive?
      @listeners.notes.each { |note| @log.info(note) }
      @listeners.addresses.each { |address| @log.info("* Listening on #{BindURI.display(address)}") }
      @wakeup_r, @wakeup_w = IO.pipe
      previous = trap_signals
      PumaConstant.stats_source = self
      begin
        boot_master
        supervise
      ensure
        previous.each { |signal, handler| trap(signal, handler) }
        shut_down
      end
      Hooks.run_logged(@options[:after_stopped], "after_stopped", @log)
      @log.info("- Goodbye!")
      @exit_status
    end

    # Asks the master's loop to do something (from a trap handler or the
    # control app's thread): :stop, :halt, :phased_restart, :hot_restart,
    # :worker_count_up, :worker_count_down, :reopen_logs, :refork.
    def command(name)
      @commands << name
      @wakeup_w&.write_nonblock(".", exception: false)
    rescue IOError
      # Closed: a freshly forked worker before it installed its own traps.
      nil
    end

    # The control app's /stats: Puma's fields, then Tsubame's.
    def stats
      all = @lock.synchronize { @workers.dup }
      # Puma's fields count the HTTP workers; the WebSocket workers have a
      # field of their own.
      websocket, workers = all.partition(&:websocket?)
      active = workers.select(&:active?)
      statuses = workers.reject(&:adopted?).sort_by { |w| [w.index, w.started_at] }.map(&:to_status)
      websocket_statuses = websocket.sort_by { |w| [-w.index, w.started_at] }.map(&:to_status)
      # Read now, not at the last check-in: what an operator (or a
      # benchmark) asks about is the memory at this moment.
      (statuses + websocket_statuses).each do |status|
        status["memory"] = status["pid"] && ProcessInfo.memory(status["pid"])
      end
      {
        "started_at" => @started_at.utc.iso8601,
        "workers" => active.size,
        "phase" => @phase,
        "booted_workers" => active.count(&:booted?),
        "old_workers" => workers.count { |w| w.adopted? || w.phase < @phase },
        "worker_status" => statuses,
        "mode" => "cluster",
        "master_pid" => @master_pid,
        "workers_wanted" => @wanted,
        "worker_deaths" => @worker_deaths,
        "worker_kills" => @worker_kills,
        "fork_worker" => @options[:fork_worker],
        "master_memory" => ProcessInfo.memory(Process.pid),
        "workers_memory" => memory_total(statuses + websocket_statuses),
        "websocket_workers" => websocket_statuses,
        "worker_events" => @events.to_h,
        "publish" => { "relayed" => @publish_relayed, "dropped" => @publish_dropped,
                       "buffered_bytes" => all.sum { |w| w.link ? w.link.pending_bytes : 0 } },
        "versions" => { "tsubame" => VERSION, "ruby" => RUBY_DESCRIPTION }
      }
    end

    def cluster?
      true
    end

    # The sums over the workers' memory: total pss is what they take
    # together.
    def memory_total(statuses)
      known = statuses.filter_map { |status| status["memory"] }
      %w[rss_mb pss_mb uss_mb].to_h { |key| [key, known.sum { |m| m[key] }.round(1)] }
    end

    # For /metrics and the status page: the master's own sample, then one
    # per worker index (during a phased restart, the newer of two).
    def metric_samples
      newest = {}
      ask_workers("metrics", timeout: 2.0).each do |reply|
        data = reply["data"]
        next unless data.is_a?(Hash) && data["stats"]

        known = newest[data["index"]]
        newest[data["index"]] = data if known.nil? || data["started"].to_f > known["started"].to_f
      end
      [[ProcessSample.take(nil)] + newest.values.sort_by { |data| data["index"].to_i }, stats]
    end

    # Whether workers fork from an app loaded in the master (preload_app!,
    # or an app handed over by the Rack handler): then a phased restart
    # could not load new code.
    def preloaded?
      !@app.nil?
    end

    def fork_worker?
      !@options[:fork_worker].nil?
    end

    # Whether a TERM began the stop (raise_exception_on_sigterm).
    def sigterm?
      @sigterm ? true : false
    end

    # Sends a request ("gc", "backtraces") to every serving worker and
    # collects their replies for up to `timeout` seconds.
    def ask_workers(type, timeout: 3.0)
      queue = Thread::Queue.new
      id, workers = @lock.synchronize do
        @request_id += 1
        @replies[@request_id] = queue
        [@request_id, @workers.select { |w| w.booted? && w.link && !w.link.closed? }]
      end
      asked = workers.count { |w| w.link.post("type" => type, "id" => id) }
      # What a socket did not take is the loop's to flush.
      @wakeup_w&.write_nonblock(".", exception: false) if workers.any? { |w| w.link.pending? }
      collect(queue, asked, timeout)
    ensure
      @lock.synchronize { @replies.delete(id) }
    end

    private

    # --- boot -----------------------------------------------------------

    def print_header
      @log.info("Tsubame starting in cluster mode...")
      @log.info("* Tsubame version: #{VERSION} (ruby #{RUBY_VERSION}-p#{RUBY_PATCHLEVEL})")
      @log.info("*  Min threads: #{@options[:threads_min]}")
      @log.info("*  Max threads: #{@options[:threads_max]}")
      @log.info("*  Environment: #{@options[:environment]}")
      @log.info("*   Master PID: #{Process.pid}")
      @log.info("*      Workers: #{@wanted}")
      phased = @options[:preload_app] || @app ? "no (preload_app!)" : "yes"
      refork = fork_worker? ? "yes" : "no"
      @log.info("*     Restarts: hot (USR2) yes, phased (USR1) #{phased}, refork (URG) #{refork}")
    end

    def preload
      return if @app || !@options[:preload_app]

      @log.info("* Preloading application")
      @app = AppLoader.load_app(@options)
    end

    def boot_master
      start_control
      start_metrics_server
      RunFiles.write(@options, @control)
      @log.info("Use Ctrl-C to stop")
      LogRedirect.apply(@options)
      @restart_file = RestartFile.new if @options[:tmp_restart]
      adopt_old_workers
      Hooks.run(@options[:before_fork])
    end

    def start_control
      return unless @options[:control_url]

      require "tsubame/control/server"
      @control = ControlServer.new(@options[:control_url], @options[:control_token], ControlApp.new(self), @log)
      @control.start
    end

    # metrics_url: /metrics alone, no token (docs/OBSERVABILITY.md).
    def start_metrics_server
      return unless @options[:metrics_url]

      require "tsubame/control/server"
      @metrics_server = ControlServer.new(@options[:metrics_url], ControlToken::NONE, MetricsApp.new(self), @log,
                                          name: "Metrics").start
    end

    # After a hot restart the previous master's workers are still our
    # children (exec kept the pid). They serve until ours have booted.
    def adopt_old_workers
      pids = HotRestart.inherited_workers
      return if pids.empty?

      @log.info("* Hot restart: #{pids.size} old worker(s) serve until the new ones boot")
      pids.each do |pid|
        @workers << WorkerHandle.new(pid: pid, index: nil, phase: -1, link: nil, adopted: true)
      end
    end

    def trap_signals
      SIGNALS.to_h do |signal|
        [signal, trap(signal) do
          @sigterm = true if signal == "TERM"
          command(signal_command(signal))
        end]
      end
    end

    def signal_command(signal)
      {
        "TERM" => :stop, "INT" => :stop, "USR1" => :phased_restart, "USR2" => :hot_restart,
        "TTIN" => :worker_count_up, "TTOU" => :worker_count_down, "HUP" => :hangup, "CHLD" => :reap,
        "URG" => :refork
      }.fetch(signal)
    end

    # --- the loop -------------------------------------------------------

    def supervise
      until finished?
        wait_for_events
        tick_systemd
        process_commands
        reap
        begin_stop(:graceful) if @leave_at && !@stopping && monotonic >= @leave_at
        check_idle
        advance_hot_restart
        # While the cluster stops, worker_shutdown_timeout still holds.
        next kill_late_stoppers if @stopping

        check_workers
        advance_phased_restart
        spawn_missing
        retire_old_workers
        check_restart_file
      end
    end

    # Watchdog pings come from this loop, so they stop if it does: the
    # master is what nothing else watches (it kills and replaces hung
    # workers itself). Also the periodic STATUS=.
    def tick_systemd
      @systemd.tick { systemd_status }
    end

    # What `systemctl status` shows: the workers and what they do, from
    # their last check-ins.
    def systemd_status
      active = @workers.select(&:active?)
      statuses = active.map(&:last_status)
      busy = statuses.sum { |s| s["requests_in_flight"].to_i }
      queued = statuses.sum { |s| s["backlog"].to_i }
      requests = statuses.sum { |s| s["requests_count"].to_i }
      "Workers: #{active.count(&:booted?)}/#{@wanted} booted, phase #{@phase}; " \
        "threads #{@options[:threads_min]}:#{@options[:threads_max]} each, #{busy} busy, #{queued} queued, " \
        "#{requests} requests"
    end

    def finished?
      @stopping && @workers.empty?
    end

    # idle_timeout: no request in any worker (by their check-ins) for that
    # long stops the cluster. Only once all booted: booting is not idling.
    def check_idle
      return unless @idle && !@stopping && all_booted?

      statuses = @workers.select(&:active?).map(&:last_status)
      count = statuses.sum { |s| s["requests_count"].to_i }
      busy = statuses.any? { |s| s["requests_in_flight"].to_i.positive? }
      return unless @idle.idle?(count, busy)

      @log.info("- Idle timeout reached (#{@idle.seconds}s without a request in any worker); stopping")
      begin_stop(:graceful)
    end

    def wait_for_events
      links = @workers.filter_map { |w| w.link if w.link && !w.link.closed? }
      ready, writable, = IO.select([@wakeup_r, *links.map(&:io)], links.select(&:pending?).map(&:io), nil, TICK)
      Array(writable).each { |io| links.find { |link| link.io == io }&.flush }
      Array(ready).each do |io|
        if io == @wakeup_r
          @wakeup_r.read_nonblock(4096, exception: false)
        else
          read_link(@workers.find { |w| w.link&.io == io })
        end
      end
    end

    def read_link(worker)
      return unless worker

      messages = worker.link.read_available
      # Closed: the worker is exiting; reap will tell how.
      return worker.link.close if messages.nil?

      messages.each { |message| receive(worker, message) }
    end

    def receive(worker, message)
      case message["type"]
      when "boot" then booted(worker)
      when "forked" then forked(worker, message)
      when "ping"
        worker.checked_in!(message["status"])
        worker.sample_rss
        check_auto_refork(worker)
      when "reply"
        queue = @lock.synchronize { @replies[message["id"]] }
        queue&.push(message)
      when "publish" then relay_publish(worker, message)
      end
    end

    # Tsubame.publish in one worker reaches the subscribers of the others
    # (docs/WEBSOCKETS.md): the master passes the message on as it came,
    # to every booted worker, and back to the one that sent it when it has
    # Ruby listeners for the channel ("echo"): every worker then sees the
    # messages in the order the master did. A worker whose outbox is full
    # (stopped, or far behind) misses it; the others do not wait.
    def relay_publish(from, message)
      line = "#{JSON.generate(message)}\n"
      echo = message["echo"] == true
      targets = @lock.synchronize do
        @workers.select { |w| (echo || w != from) && w.booted? && w.link && !w.link.closed? }
      end
      targets.each do |worker|
        if worker.link.post_line(line, droppable: true)
          @publish_relayed += 1
        else
          @publish_dropped += 1
        end
      end
    end

    def booted(worker)
      # Before it counts as booted: stats read meanwhile (the control app's
      # thread) never show a booted worker without its RSS.
      worker.sample_rss
      worker.booted!
      @events.booted(worker.index, worker.pid)
      # Booted during a shutdown delay (a replacement): it leaves too.
      tell_lame_duck(worker) if @leave_at
      @boot_failures = 0
      @log.info("- #{worker.describe} booted in #{worker.boot_seconds.round(2)}s, phase: #{worker.phase}")
      if (old = worker.replaces)
        worker.replaces = nil
        old.replacement = nil
        old.replaced!
        stop_worker(old, "replaced by PID #{worker.pid}")
      end
      worker.websocket? ? update_handoff : tell_handoff([worker])
      return if @all_booted || !all_booted?

      @all_booted = true
      # Every worker serves: systemd's start (or a hot restart's new master)
      # is over.
      @systemd.ready(systemd_status)
      Hooks.run_logged(@options[:on_booted], "on_booted", @log)
    end

    def all_booted?
      (0...@wanted).all? { |index| @workers.any? { |w| w.index == index && w.active? && w.booted? } }
    end

    def process_commands
      until @commands.empty?
        name = @commands.pop
        case name
        when :stop then begin_leaving
        when :halt then begin_stop(:halt)
        when :hangup then hangup
        when :reopen_logs then reopen_logs
        when :phased_restart then start_phased_restart
        when :hot_restart then hot_restart
        when :worker_count_up then change_worker_count(+1)
        when :worker_count_down then change_worker_count(-1)
        when :refork then start_refork("refork requested")
        end
      end
    end

    # --- deaths and timeouts --------------------------------------------

    # Workers and the hot restart's check are waited for by pid: while a
    # Process.detach thread waits for a child (a before_fork hook that
    # detached one, as Puma's test config does), Ruby's wait(-1) does not
    # report the others, and a stop would wait for that child to exit.
    # Workers are reaped by pid first: while a Process.detach thread waits
    # on some other child (a before_fork hook that detached one, as in
    # Puma's process_detach_before_fork.rb), Ruby's wait(-1) does not
    # report the exited worker, and a stop would wait for that child.
    def reap
      @workers.dup.each do |worker|
        # Workers worker 0 forked are not this process's children (and may
        # not have told their pid yet): Reforking#reap_others watches them.
        next unless worker.pid && worker.child?

        pid, status = wait_for(worker.pid)
        exited(worker, status) if pid
      end
      if @restart_check && (pid, status = wait_for(@restart_check.pid)) && pid
        @restart_check.exited(status)
      end
      reap_strays
      # Workers that are not this process's children (Reforking).
      reap_others
    end

    def wait_for(pid)
      Process.wait2(pid, Process::WNOHANG)
    rescue Errno::ECHILD
      nil
    end

    # Any other child (one the app forked and left) is reaped too.
    def reap_strays
      loop do
        pid, status = Process.wait2(-1, Process::WNOHANG)
        break unless pid

        worker = @workers.find { |w| w.pid == pid }
        exited(worker, status) if worker
        @restart_check.exited(status) if @restart_check&.pid == pid
      end
    rescue Errno::ECHILD
      nil
    end

    def exited(worker, status)
      @lock.synchronize { @workers.delete(worker) }
      worker.link&.close
      worker.fork_link&.close
      how = describe_status(status)
      if worker.stopping?
        @log.info("- #{worker.describe} stopped (#{worker.stop_reason}): #{how}")
      elsif worker.booted?
        @worker_deaths += 1
        @events.died(worker.index, worker.pid, how)
        @log.error("! #{worker.describe} died: #{how}#{"; starting a replacement" unless @stopping}")
      else
        boot_failed(worker, how)
      end
      forget_replacement(worker)
      update_handoff
      worker.process_status = status
      Hooks.run_logged(@options[:after_worker_shutdown], "after_worker_shutdown", @log, worker)
    end

    def boot_failed(worker, how)
      @boot_failures += 1
      @log.error("! #{worker.describe} died while booting: #{how} " \
                 "(#{@boot_failures} boot failure#{"s" if @boot_failures > 1} in a row)")
      return if @stopping || @boot_failures < BOOT_FAILURE_LIMIT

      # The previous master's workers (hot restart) count as serving: a
      # deploy whose app cannot boot leaves them in place.
      if @workers.none? { |w| (w.booted? || w.adopted?) && !w.stopping? }
        @log.error("! boot loop: the last #{@boot_failures} workers all died while booting " \
                   "(last: #{how}), and none is serving; giving up. Fix the error above and start again.")
        @exit_status = 1
        begin_stop(:graceful)
      else
        delay = [2.0**(@boot_failures - BOOT_FAILURE_LIMIT), MAX_RESPAWN_DELAY].min
        @respawn_at = monotonic + delay
        @log.error("! workers keep failing to boot; retrying in #{delay.round(1)}s")
      end
    end

    # A replacement that died unbooted leaves the old worker serving; a
    # phased restart whose new code cannot boot stops there. One the master
    # stopped while it booted (the cluster stopping) did not fail.
    def forget_replacement(worker)
      if (old = worker.replaces)
        old.replacement = nil
        if @phased_restart && !worker.booted? && !worker.stopping?
          @phased_restart = false
          @log.error("! phased restart stopped: a new worker failed to boot; the old workers keep serving")
          @systemd.ready("Phased restart stopped: a new worker failed to boot; #{systemd_status}")
        end
      end
      worker.replacement&.replaces = nil
    end

    def describe_status(status)
      if status.nil?
        "exited (not the master's child: no exit status)"
      elsif status.signaled?
        "killed by SIG#{Signal.signame(status.termsig)}"
      elsif status.exited?
        "exit status #{status.exitstatus}"
      else
        status.inspect
      end
    end

    def check_workers
      @workers.each do |worker|
        # Already sent SIGKILL: it dies and is reaped within a moment, and
        # must not be killed (and logged, and counted) again meanwhile.
        next if worker.adopted? || worker.killed?

        if worker.stopping?
          kill(worker, "did not stop in time", "stop_timeout") if monotonic > worker.stop_deadline
        elsif !worker.booted?
          kill(worker, "did not boot within #{boot_timeout}s", "boot_timeout") if worker.silent_for > boot_timeout
        elsif worker.silent_for > @options[:worker_timeout]
          kill(worker, "has not checked in for #{worker.silent_for.round(1)}s " \
                       "(worker_timeout #{@options[:worker_timeout]}); hung", "hung")
        else
          recycle_if_due(worker)
        end
      end
      @workers.each do |w|
        kill(w, "did not stop in time", "stop_timeout") if w.adopted? && !w.killed? && w.stopping? && monotonic > w.stop_deadline
      end
    end

    def boot_timeout
      @options[:worker_boot_timeout] || @options[:worker_timeout]
    end

    def kill_late_stoppers
      @workers.each do |worker|
        kill(worker, "did not stop in time", "stop_timeout") if worker.stopping? && !worker.killed? && monotonic > worker.stop_deadline
      end
    end

    def kill(worker, why, reason)
      # Never forked by worker 0: nothing to kill; closing its link makes
      # it a failed boot (#reap_others).
      return worker.link&.close if worker.pid.nil?

      @worker_kills += 1
      @events.killed(worker.index, worker.pid, reason)
      @log.error("! #{worker.describe} #{why}; killing it")
      signal(worker, "KILL")
      worker.killed!
      # Not stopping!: a killed worker that was serving is replaced, one
      # that never booted counts as a failed boot.
    end

    # --- recycling and restarts -----------------------------------------

    def recycle_if_due(worker)
      return if worker.replacement || replacing?

      reason, key = recycle_reason(worker)
      replace(worker, reason, key) if reason
    end

    def recycle_reason(worker)
      max_requests = @options[:worker_max_requests]
      max_memory = @options[:worker_max_memory]
      if worker.stuck_threads.positive?
        ["has #{worker.stuck_threads} thread(s) stuck past request_timeout_grace", "stuck_threads"]
      elsif max_requests && worker.requests_count >= max_requests
        ["served #{worker.requests_count} requests (worker_max_requests #{max_requests})", "max_requests"]
      elsif max_memory && worker.rss_mb && worker.rss_mb > max_memory
        ["uses #{worker.rss_mb} MB (worker_max_memory #{max_memory})", "max_memory"]
      end
    end

    # One replacement at a time, so recycling or a phased restart never
    # takes more than one worker's memory extra: until the replacement has
    # booted and the worker it replaced has drained and exited.
    def replacing?
      @workers.any? { |w| w.replaces || (w.stopping? && w.replaced?) }
    end

    # The replacement starts first; the old worker is stopped, and drains,
    # only once the new one has booted (see #booted).
    def replace(old, reason, key)
      @log.info("- #{old.describe} #{reason}; starting its replacement")
      @events.replaced(old.index, old.pid, key)
      new_worker = spawn(old.index) or return
      new_worker.replaces = old
      old.replacement = new_worker
    end

    def start_phased_restart
      return if @stopping

      if preloaded?
        @log.error("! phased restart (USR1) is not available with preload_app!: new workers would fork " \
                   "from the master's already loaded code. Use a hot restart (USR2) instead.")
        return
      end
      @phase += 1
      @phased_restart = true
      @log.info("- Starting phased worker restart, phase: #{@phase}")
      change_directory
      @systemd.reloading("Phased restart to phase #{@phase}")
    end

    def advance_phased_restart
      return if !@phased_restart || advance_fork_worker_restart || replacing?

      old = @workers.find { |w| w.active? && w.booted? && w.phase < @phase }
      if old
        replace(old, "is from phase #{old.phase}", "phased_restart")
      elsif @workers.none? { |w| w.active? && w.phase < @phase }
        finish_phased_restart
      end
    end

    def finish_phased_restart
      what = @phased_restart == :refork ? "Refork" : "Phased restart"
      @phased_restart = false
      @log.info("- #{what} done, phase: #{@phase}")
      @systemd.ready(systemd_status)
    end

    # USR2, `ctl restart`, tmp/restart.txt. The exec'd master is all that
    # would supervise the old workers: if it could not start, they would
    # stop with it. So the new config (and app, if the master loads it) is
    # loaded first in a check child (see HotRestartCheck), polled from the
    # loop (#advance_hot_restart) so that supervision goes on meanwhile.
    def hot_restart
      # A stop under way, or its shutdown delay, wins: re-executing would
      # forget it.
      return @log.info("* Hot restart not done: the server is stopping") if @stopping || @leave_at
      # Another request while checking is the same restart.
      return @log.info("* Hot restart already under way (check PID #{@restart_check.pid})") if @restart_check

      @restart_check = HotRestartCheck.start(restart_check_timeout)
      @systemd.reloading("Hot restart: checking the new configuration")
      @log.info("* Hot restart: checking that the new configuration loads (check PID #{@restart_check.pid}); " \
                "the workers serve meanwhile")
    rescue SystemCallError => e
      @log.error("! hot restart not done: cannot start the check of the new configuration: #{e.message}; " \
                 "the old workers keep serving")
    end

    def restart_check_timeout
      @options[:worker_boot_timeout] || HotRestartCheck::DEFAULT_TIMEOUT
    end

    # On every turn of the loop: once the check is over, re-execute if the
    # new code loaded, otherwise say why and go on serving.
    def advance_hot_restart
      check = @restart_check
      return unless check

      if @stopping || @leave_at
        @restart_check = nil
        check.abandon
        return @log.info("* Hot restart not done: the server is stopping")
      end
      return unless check.finished?

      @restart_check = nil
      if (failure = check.failure)
        # The check's own error output is on stderr just above.
        @systemd.ready("Hot restart not done: the new configuration/app #{failure}; #{systemd_status}")
        return @log.error("! hot restart not done: the new configuration/app #{failure}; the old workers keep serving")
      end

      re_execute
    end

    def re_execute
      @log.info("* Hot restart: re-executing #{HotRestart.command&.join(" ")}; the listeners stay open " \
                "and the workers serve until the new master's workers boot")
      Hooks.run_logged(@options[:on_restart], "on_restart", @log)
      @control&.stop
      @stdout.flush
      error = HotRestart.exec(@listeners, workers: @workers.filter_map(&:pid), env: @systemd.exec_env)
      @log.error("! hot restart failed: #{error.message}; carrying on")
      @systemd.ready("Hot restart failed: #{error.message}; #{systemd_status}")
      @control&.start
    end

    # --- worker count ---------------------------------------------------

    def change_worker_count(delta)
      return if @stopping

      wanted = [@wanted + delta, 1].max
      return @log.info("- Worker count stays at 1 (TTOU)") if wanted == @wanted

      @wanted = wanted
      @log.info("- Worker count #{delta.positive? ? "raised" : "lowered"} to #{@wanted}")
      cull_workers if delta.negative?
    end

    # worker_culling_strategy: the youngest workers (Puma's default) or
    # the oldest stop; a kept worker whose index is now past the count
    # takes a freed index, so indexes stay 0...count. Worker 0 stays under
    # fork_worker: the others are forked from it.
    def cull_workers
      serving = @workers.select { |w| w.active? && !w.websocket? }
      active = serving.sort_by(&:started_at)
      active.reject! { |w| w.index == 0 } if fork_worker?
      excess = serving.size - @wanted
      return unless excess.positive?

      culled = @options[:worker_culling_strategy] == :oldest ? active.first(excess) : active.last(excess)
      culled.each { |w| stop_worker(w, "worker count lowered (#{@options[:worker_culling_strategy]} culled)") }
      kept = @workers.select { |w| w.active? && !w.websocket? }
      free = (0...@wanted).reject { |index| kept.any? { |w| w.index == index } }
      kept.select { |w| w.index >= @wanted }.zip(free).each do |worker, index|
        @log.info("- #{worker.describe} now serves as worker #{index}")
        worker.index = index
      end
    end

    # `directory`, again before a phased restart's workers load the app: a
    # symlink to the release is followed to the new one.
    def change_directory
      dir = @options[:directory] or return
      Dir.chdir(dir)
      @log.info("+ Changing to #{dir}")
    rescue SystemCallError => e
      @log.error("! cannot change to #{dir}: #{e.message}")
    end

    def spawn_missing
      return if monotonic < @respawn_at

      vacant = ->(index) { @workers.none? { |w| w.index == index && w.active? } }
      missing = (0...@wanted).select(&vacant)
      missing += WebsocketHandoff.indexes(@options[:websocket_workers]).select(&vacant) if @handoff
      return missing.each { |index| spawn(index) } unless fork_worker?

      spawn(0) if missing.delete(0)
      # From the master, as worker 0 is: they are not worker 0's forks.
      missing.select(&:negative?).each { |index| spawn(missing.delete(index)) }
      fork_missing(missing)
    end

    # Once every index has a booted worker of this master, the previous
    # master's workers (hot restart) can drain and go.
    def retire_old_workers
      old = @workers.select { |w| w.adopted? && !w.stopping? }
      return if old.empty? || !all_booted?

      old.each { |w| stop_worker(w, "replaced by hot restart") }
    end

    def spawn(index)
      # Forked by worker 0 (nil until it serves).
      return fork_missing([index])&.first if fork_worker? && index.positive?

      master_end, worker_end = WorkerLink.pair
      fork_master, fork_worker_end = fork_worker? && index.zero? ? ForkLink.pair : [nil, nil]
      Hooks.run_logged(@options[:before_worker_fork], "before_worker_fork", @log, index)
      compact_before_fork if @options[:nakayoshi_fork] && @app
      pid = begin
        fork do
          master_end.close
          fork_master&.close
          exit(child(index, worker_end, fork_worker_end))
        end
      rescue SystemCallError => e
        [master_end, worker_end, fork_master, fork_worker_end].compact.each(&:close)
        @log.error("! cannot fork worker #{index}: #{e.message}; retrying in 1s")
        @respawn_at = monotonic + 1
        return nil
      end
      worker_end.close
      fork_worker_end&.close
      master_end.limit = @options[:publish_buffer]
      worker = WorkerHandle.new(pid: pid, index: index, phase: @phase, link: master_end)
      worker.fork_link = fork_master
      @lock.synchronize { @workers << worker }
      Hooks.run_logged(@options[:after_worker_fork], "after_worker_fork", @log, index)
      worker
    end

    # In the forked child: let go of what belongs to the master, then serve.
    def child(index, link, fork_link)
      [@wakeup_r, @wakeup_w].each(&:close)
      @workers.each do |w|
        w.link&.close
        w.fork_link&.close
      end
      @control&.close_in_child
      @metrics_server&.close_in_child
      @restart_file = nil
      tag = @options[:tag] ? " [#{@options[:tag]}]" : ""
      websocket = WebsocketHandoff.index?(index)
      Process.setproctitle("tsubame: cluster #{WebsocketHandoff.name_of(index).downcase}: #{@master_pid}#{tag}")
      listeners = @listeners.for_worker
      if websocket
        # It accepts nothing: its connections are handed to it.
        listeners.close
        listeners = Listeners.new([], owner: false)
      end
      Worker.new(index: index, phase: @phase, master_pid: @master_pid, options: @options,
                 listeners: listeners, link: link, app: @app, log: @log, fork_link: fork_link,
                 handoff: @handoff&.native_options(index)).run
    rescue Exception => e # rubocop:disable Lint/RescueException
      raise if e.is_a?(SystemExit)

      @log.error("! worker #{index} failed to boot: #{e.class}: #{e.message}\n" \
                 "#{Array(e.backtrace).first(20).join("\n")}")
      1
    end

    # --- stopping -------------------------------------------------------

    # TERM/INT with shutdown_delay: every worker's readiness fails at once
    # while they go on serving; the drain begins when the delay is over (or
    # at a second TERM/INT).
    def begin_leaving
      delay = @options[:shutdown_delay]
      return begin_stop(:graceful) if delay.zero? || @leave_at

      @leave_at = monotonic + delay
      @systemd.stopping("Stopping: shutdown delay of #{delay}s, then the drain")
      @log.info("- Shutdown delay: readiness fails now; serving #{delay}s more before the drain")
      @workers.each { |w| tell_lame_duck(w) }
    end

    def tell_lame_duck(worker)
      worker.link.post("type" => "lame_duck") if worker.link && !worker.link.closed?
    end

    def begin_stop(mode)
      return if @stopping == mode || @stopping == :halt

      @stopping = mode
      @systemd.stopping(mode == :halt ? "Halting" : "Stopping: draining the workers")
      @log.info(mode == :halt ? "- Halting: workers stop now" : "- Gracefully stopping, waiting for requests to finish")
      # New clients are refused from here on; the ones already accepted
      # are served by the workers as they drain.
      @listeners.close
      @workers.each { |w| mode == :halt ? halt_worker(w) : stop_worker(w, "shutting down") }
    end

    def stop_worker(worker, reason)
      return if worker.stopping?

      worker.stopping!(reason, shutdown_timeout)
      update_handoff
      signal(worker, "TERM")
    end

    # websocket_workers: the HTTP workers hand upgrade requests over only
    # while a WebSocket worker has booted and is not stopping (a datagram
    # sent to none would wait in the socket for the next one's boot).
    # Told to every HTTP worker when that changes, and to each as it boots.
    def update_handoff
      return unless @handoff

      on = @workers.any? { |w| w.websocket? && w.active? && w.booted? }
      return if on == @handoff_on

      @handoff_on = on
      @log.info("- WebSocket connections #{on ? "go to the WebSocket workers" : "are served by every worker until one is back"}")
      tell_handoff(@workers)
    end

    def tell_handoff(workers)
      return unless @handoff

      workers.each do |w|
        next if w.websocket? || !w.booted? || w.link.nil? || w.link.closed?

        w.link.post("type" => "handoff", "on" => @handoff_on)
      end
    end

    def halt_worker(worker)
      worker.stopping!("halt", HALT_GRACE)
      signal(worker, "QUIT")
    end

    def shutdown_timeout
      @options[:worker_shutdown_timeout] || (@options[:drain_timeout] + SHUTDOWN_MARGIN)
    end

    def signal(worker, name)
      # Not forked yet by worker 0: told when it says it was (#forked).
      return unless worker.pid

      Process.kill(name, worker.pid)
    rescue Errno::ESRCH
      nil
    end

    # HUP: reopen the stdout_redirect files, in every process; without
    # them, stop (Puma's behaviour: a hangup with nowhere to log).
    # With TLS binds the workers also reload their certificates on HUP.
    def hangup
      tls = @options[:binds].any? { |uri| BindURI.tls?(uri) }
      return begin_stop(:graceful) unless LogRedirect.configured?(@options) || tls || @options[:access_log_file]

      reopen_logs
    end

    def reopen_logs
      LogRedirect.reopen(@options) if LogRedirect.configured?(@options)
      # The workers reopen their access logs on the HUP below.
      @workers.each { |w| signal(w, "HUP") }
      @log.info("- Log files reopened") if LogRedirect.configured?(@options)
    end

    # After the loop, or when it raised: nothing may outlive the master
    # unsupervised, and its files go.
    def shut_down
      @restart_check&.abandon
      @workers.each { |w| signal(w, "TERM") }
      @listeners&.close
      @handoff&.close
      @control&.stop
      @metrics_server&.stop
      RunFiles.remove(@options)
    end

    # nakayoshi_fork: with the app preloaded, a full collection and a
    # compaction before each fork, so the workers share the master's
    # long-lived objects on pages nobody writes to.
    def compact_before_fork
      4.times { GC.start }
      GC.compact if GC.respond_to?(:compact)
    rescue NotImplementedError
      nil
    end

    def check_restart_file
      hot_restart if @restart_file&.touched?
    end

    # Ruby 3.1's Queue#pop has no timeout, hence the polling; it runs on the
    # control app's thread, for a request an operator made.
    def collect(queue, count, timeout)
      deadline = monotonic + timeout
      replies = []
      while replies.size < count && monotonic < deadline
        queue.empty? ? sleep(0.01) : replies << queue.pop
      end
      replies
    end
  end
end
