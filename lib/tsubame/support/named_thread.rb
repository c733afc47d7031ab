# frozen_string_literal: true

module Tsubame
  # The server's own threads: named (as `ps -T`, top and thread dumps show
  # them) and quiet about an exception that ends them, which their owner
  # handles or logs itself.
  module NamedThread
    def self.start(name, &body)
      Thread.new do
        Thread.current.name = name
        Thread.current.report_on_exception = false
        body.call
      end
    end
  end
end
