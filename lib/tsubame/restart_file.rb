# frozen_string_literal: true

module Tsubame
  # `plugin :tmp_restart`: touching tmp/restart.txt (as `rails restart`
  # does) restarts the server the way USR2 does.
  class RestartFile
    PATH = "tmp/restart.txt"

    # Looked at no more often than this: the check is a stat on every tick.
    INTERVAL = 1.0

    def initialize(path = File.expand_path(PATH))
      @path = path
      @mtime = mtime
      @checked_at = now
    end

    def touched?
      return false if now - @checked_at < INTERVAL

      @checked_at = now
      current = mtime
      changed = current && current != @mtime
      @mtime = current
      changed ? true : false
    end

    private

    def mtime
      File.mtime(@path)
    rescue SystemCallError
      nil
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end
  end
end
