# frozen_string_literal: true

module Tsubame
  # What the master reads about its workers from /proc (Linux).
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
  end
end
