# frozen_string_literal: true

require "tsubame/support/clock"

module Tsubame
  # `plugin :tmp_restart`: touching tmp/restart.txt (as `rails restart`
  # does) restarts the server the way USR2 does.
  class RestartFile
    include Clock

    PATH = "tmp/restart.txt"

    # Looked at no more often than this: the check is a stat on every tick.
    INTERVAL = 1.0

    def initialize(path = File.expand_path(PATH))
      @path = path
      @mtime = mtime
      @checked_at = monotonic
    end

    def touched?
      return false if monotonic - @checked_at < INTERVAL

      @checked_at = monotonic
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
  end
end
