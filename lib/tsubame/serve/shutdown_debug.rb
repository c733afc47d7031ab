# frozen_string_literal: true

module Tsubame
  # shutdown_debug: every thread's backtrace at a stop (or, with on_force,
  # when the drain timed out), to show what a slow stop waits for.
  module ShutdownDebug
    module_function

    def dump(io)
      io.write("- Shutdown debug: thread backtraces of PID #{Process.pid}\n")
      Thread.list.each do |thread|
        io.write("  Thread #{thread.name || thread.inspect}\n")
        Array(thread.backtrace).each { |line| io.write("    #{line}\n") }
      end
      io.flush
    rescue IOError, SystemCallError
      nil
    end
  end
end
