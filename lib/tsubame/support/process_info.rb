# frozen_string_literal: true

require "etc"

module Tsubame
  # What Tsubame reads about processes from /proc (Linux): the master about
  # its workers, `tsubame tune` about the servers it measures.
  module ProcessInfo
    module_function

    # Resident set size in MiB, or nil when /proc does not say (the process
    # is gone, or this is not Linux).
    def rss_mb(pid)
      File.foreach("/proc/#{pid}/status") do |line|
        return (line[/\d+/].to_i / 1024.0).round(1) if line.start_with?("VmRSS:")
      end
      nil
    rescue SystemCallError
      nil
    end

    # Resident set size in bytes, or nil (as rss_mb).
    def rss_bytes(pid)
      File.foreach("/proc/#{pid}/status") do |line|
        return line[/\d+/].to_i * 1024 if line.start_with?("VmRSS:")
      end
      nil
    rescue SystemCallError
      nil
    end

    # The fields of /proc/PID/stat after the command name, which is in
    # parentheses and may itself contain spaces and parentheses: [state,
    # ppid, ...]; nil when the process is gone.
    def stat_fields(pid)
      text = File.read("/proc/#{pid}/stat")
      text[(text.rindex(")") + 2)..].split
    rescue SystemCallError, NoMethodError
      nil
    end

    # CPU time (user + system) the process has used, in seconds.
    def cpu_seconds(pid)
      fields = stat_fields(pid)
      return nil unless fields

      # utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
      (fields[11].to_i + fields[12].to_i) / clock_ticks.to_f
    end

    def clock_ticks
      @clock_ticks ||= Etc.sysconf(Etc::SC_CLK_TCK) || 100
    end

    # Pids of the live processes whose parent is pid.
    def children(pid)
      Dir.children("/proc").filter_map do |entry|
        next unless entry.match?(/\A\d+\z/)

        fields = stat_fields(entry)
        entry.to_i if fields && fields[1].to_i == pid && fields[0] != "Z"
      end
    rescue SystemCallError
      []
    end
  end
end
