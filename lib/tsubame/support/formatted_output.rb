# frozen_string_literal: true

require "delegate"

module Tsubame
  # log_formatter: the stream Tsubame logs to, with each line passed
  # through the config's block first (Puma's LogWriter formatter). Only
  # Tsubame's own lines go through it; the app writes to $stdout itself.
  class FormattedOutput < SimpleDelegator
    def self.wrap(io, formatter)
      formatter ? new(io, formatter) : io
    end

    def initialize(io, formatter)
      super(io)
      @formatter = formatter
    end

    # Log leaves out its "[pid] " prefix for a formatted stream: the
    # formatter decides what a line says.
    def formatted?
      true
    end

    def puts(*lines)
      lines = [""] if lines.empty?
      write(lines.flatten.map { |line| line.to_s.end_with?("\n") ? line.to_s : "#{line}\n" }.join)
      nil
    end

    def write(*texts)
      text = texts.join
      __getobj__.write(text.lines.map { |line| "#{@formatter.call(line.chomp)}\n" }.join)
    end

    def print(*texts)
      write(*texts)
      nil
    end

    def <<(text)
      write(text)
      self
    end
  end
end
