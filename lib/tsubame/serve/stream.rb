# frozen_string_literal: true

module Tsubame
  module Native
    # The IO-like interface Rack 3 gives streaming bodies and partial
    # hijack callbacks. Writing is native (see ext/tsubame_native/src/stream.rs);
    # the request body was read whole before the app ran, so the read side
    # is always at its end.
    class Stream
      def <<(chunk)
        write(chunk)
        self
      end

      def write_nonblock(chunk, *)
        write(chunk)
      end

      def flush
        self
      end

      def read(_length = nil, _buffer = nil)
        nil
      end

      def read_partial(*)
        raise EOFError, "end of stream"
      end
      alias read_nonblock read_partial

      def close_read; end

      def close_write
        close
      end
    end
  end
end
