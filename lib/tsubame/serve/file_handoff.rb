# frozen_string_literal: true

module Tsubame
  # What X-Sendfile and X-Accel-Redirect (docs/FILES.md) have in common: a
  # response header names a file, and the response goes to the engine with
  # that file as a body with `to_path` (sendfile(2) on plain sockets), so
  # the app's thread is free. Only a regular file inside an allowed
  # directory is sent; anything else becomes a 404 or 500 with a log line.
  # The variations differ only in how the header's value becomes a path,
  # which each does in the block given to #apply.
  class FileHandoff
    # The file the engine sends; closing it closes the app's own body
    # (Rack::Sendfile's proxy, which closes the original file body).
    FileBody = Struct.new(:to_path, :original) do
      def each
        File.open(to_path, "rb") { |file| while (part = file.read(65_536)) do yield part end }
      end

      def close
        original.close if original.respond_to?(:close)
      end
    end

    # Directories as real paths, so the symlinks in them are resolved once,
    # at boot, and a check compares like with like.
    def self.real_dirs(dirs)
      dirs.map { |dir| File.realpath(dir) }.freeze
    end

    # header: the response header (matched in any case); in lower case it
    # also starts every log line, so a line says which variation refused.
    def initialize(header, log_line)
      @header = header
      @name = header.downcase
      @log_line = log_line
    end

    # The response to hand to the engine: unchanged without the header;
    # else the block turns the header's value into a real path (usually by
    # #resolve) or a 404/500 status, and the file goes out with the app's
    # status and other headers and its own size as content-length.
    def apply(status, headers, body)
      key = headers.keys.find { |name| name.is_a?(String) && name.casecmp?(@header) }
      return [status, headers, body] unless key

      real = yield headers[key].to_s
      unless real.is_a?(String)
        body.close if body.respond_to?(:close)
        return refusal(real)
      end

      rest = headers.reject { |name, _| name.casecmp?(@header) || name.casecmp?("content-length") }
      rest["content-length"] = File.size(real).to_s
      [status, rest, FileBody.new(real, body)]
    end

    # The real path of `path` if it is a regular file inside one of `roots`
    # (real paths, see .real_dirs); else 404 when nothing is there, 500
    # otherwise, logged with `shown` (what the app wrote in the header).
    def resolve(path, roots, shown: path)
      return refuse(shown, "contains a NUL byte") if path.include?("\0")

      real = File.realpath(path)
      # As bytes: a decoded URL need not be valid UTF-8, and a binary path
      # cannot be compared with a UTF-8 root that holds other than ASCII.
      bytes = real.b
      unless roots.any? { |root| bytes == root.b || bytes.start_with?(root == "/" ? "/" : "#{root}/".b) }
        return refuse(shown, "is outside the allowed roots (#{roots.join(", ")})")
      end
      return real if File.file?(real)

      refuse(shown, "is not a regular file")
    rescue SystemCallError => e
      @log_line.call("#{@name} file not found: #{shown.inspect} (#{e.class.name.split("::").last})")
      404
    end

    # A 500 with the reason logged: the app asked for something that must
    # not be sent, which is the app's error, not the client's.
    def refuse(shown, reason)
      @log_line.call("#{@name} refused: #{shown.inspect} #{reason}")
      500
    end

    private

    def refusal(status)
      text = status == 404 ? "404 Not Found\n" : "500 Internal Server Error\n"
      [status, { "content-type" => "text/plain; charset=utf-8", "content-length" => text.bytesize.to_s }, [text]]
    end
  end
end
