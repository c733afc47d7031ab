# frozen_string_literal: true

module Tsubame
  # Master and worker log lines, prefixed with the pid as Puma's cluster
  # mode does, so interleaved lines from several processes can be told
  # apart. The pid is read per line: the same object is used after fork.
  class Log
    def initialize(stdout, stderr)
      @stdout = stdout
      @stderr = stderr
    end

    def info(message)
      write(@stdout, message)
    end

    def error(message)
      write(@stderr, message)
    end

    private

    def write(io, message)
      # A log_formatter (FormattedOutput) makes the whole line itself.
      prefix = io.respond_to?(:formatted?) ? "" : "[#{Process.pid}] "
      io.write(message.to_s.lines.map { |line| "#{prefix}#{line.chomp}\n" }.join)
    rescue IOError, SystemCallError
      # A closed or broken log must not take the server down with it.
      nil
    end
  end
end
