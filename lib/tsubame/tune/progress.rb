# frozen_string_literal: true

module Tsubame
  module Tune
    # The progress lines of `tsubame tune` on stderr. They are held back
    # until the first setting has booted and answered its first load:
    # until then a failure (an app that cannot boot, a bad targets file) is
    # a usage error, reported as one line with nothing before it.
    class Progress
      def initialize(io, quiet: false)
        @io = io
        @quiet = quiet
        @held = []
      end

      def line(text)
        return if @quiet

        if @held
          @held << text
        else
          @io.puts text
        end
      end

      # Prints what was held and everything from now on.
      def release
        held = @held
        @held = nil
        held&.each { |text| @io.puts text } unless @quiet
      end
    end
  end
end
