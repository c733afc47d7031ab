# frozen_string_literal: true

require "etc"

module Tsubame
  module Tune
    # What `tsubame tune` sizes its grid from: the cores this process may
    # run on and the memory available to it (the smaller of MemAvailable
    # and a cgroup v2 limit), read on Linux from /proc and /sys.
    module Machine
      CGROUP_MEMORY_MAX = "/sys/fs/cgroup/memory.max"
      CGROUP_MEMORY_CURRENT = "/sys/fs/cgroup/memory.current"

      module_function

      # Etc.nprocessors honours the CPU affinity mask (taskset, cpusets).
      def cores
        [Etc.nprocessors, 1].max
      end

      # The load averages over 1, 5 and 15 minutes, or nil.
      def load_average
        File.read("/proc/loadavg").split.first(3).map(&:to_f)
      rescue SystemCallError
        nil
      end

      # MiB, or nil when neither /proc nor the cgroup says.
      def memory_mb
        [mem_available_mb, cgroup_free_mb].compact.min
      end

      def mem_available_mb
        File.foreach("/proc/meminfo") do |line|
          return line[/\d+/].to_i / 1024 if line.start_with?("MemAvailable:")
        end
        nil
      rescue SystemCallError
        nil
      end

      def cgroup_free_mb
        max = File.read(CGROUP_MEMORY_MAX).strip
        return nil if max == "max"

        current = File.read(CGROUP_MEMORY_CURRENT).to_i
        (max.to_i - current) / (1024 * 1024)
      rescue SystemCallError
        nil
      end
    end
  end
end
