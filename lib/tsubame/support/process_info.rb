# frozen_string_literal: true

require "etc"

module Tsubame
  # What Tsubame reads about processes from /proc (Linux): the master about
  # its workers, `tsubame tune` about the servers it measures.
  module ProcessInfo
    module_function

    # Whether a process with this pid exists (EPERM: it does, another
    # user's). For processes that are not this one's children, which
    # wait() cannot watch.
    def alive?(pid)
      Process.kill(0, pid)
      true
    rescue Errno::ESRCH
      false
    rescue Errno::EPERM
      true
    end

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

    # What the process's memory costs, as /proc/PID/smaps_rollup (Linux
    # 4.14+) counts it, in MiB: rss (resident), pss (proportional: each
    # shared page divided among the processes sharing it, so the pss of
    # all workers adds up to what they take together) and uss (unique:
    # pages only this process has, what stopping it would give back).
    # nil when the file cannot be read (gone, not Linux, another user's).
    def memory(pid)
      kb = Hash.new(0)
      File.foreach("/proc/#{pid}/smaps_rollup") do |line|
        name, value = line.split(":", 2)
        kb[name] = value.to_i if value && %w[Rss Pss Private_Clean Private_Dirty].include?(name)
      end
      return nil if kb.empty?

      { "rss_mb" => mib(kb["Rss"]), "pss_mb" => mib(kb["Pss"]),
        "uss_mb" => mib(kb["Private_Clean"] + kb["Private_Dirty"]) }
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

    def mib(kilobytes)
      (kilobytes / 1024.0).round(1)
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

    # CPU time (user + system) of this process's children that it has
    # waited for (cutime and cstime of /proc/self/stat), in seconds: the
    # difference across one child's run and wait is that child's CPU use,
    # all of it, which polling its own stat before the wait would miss.
    def waited_children_cpu_seconds
      fields = stat_fields("self")
      return nil unless fields

      (fields[13].to_i + fields[14].to_i) / clock_ticks.to_f
    end

    # The CPUs the process may run on (Cpus_allowed_list of
    # /proc/PID/status, "0-3,6"), as an array of numbers, or nil.
    def cpus_allowed(pid)
      File.foreach("/proc/#{pid}/status") do |line|
        next unless line.start_with?("Cpus_allowed_list:")

        return line.split(":", 2).last.strip.split(",").flat_map do |part|
          first, last = part.split("-").map(&:to_i)
          (first..(last || first)).to_a
        end
      end
      nil
    rescue SystemCallError
      nil
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
