# frozen_string_literal: true

module Tsubame
  # X-Sendfile (--x-sendfile ROOT, docs/FILES.md): the env tells
  # Rack::Sendfile to answer with an `x-sendfile: PATH` header and an empty
  # body; the response then goes to the engine as a body with `to_path`, so
  # the engine sends the file (sendfile(2) on plain sockets) and the app's
  # thread is free. Only files inside the allowed roots are sent.
  class XSendfile
    # Rack 2.2 compares this name case-sensitively; Rack 3 in any case and
    # writes the header in lower case.
    TYPE = "X-Sendfile"

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

    # roots: directories; symlinks in them are resolved once, here.
    def initialize(roots, log_line)
      @roots = roots.map { |root| File.realpath(root) }.freeze
      @log_line = log_line
    end

    # Both names Rack has read: `sendfile.type` (Rack 2.2 and 3, which ignore
    # the request header now) and HTTP_X_SENDFILE_TYPE (older Racks). Set
    # after the request's own headers, so a client cannot choose another.
    def prepare(env)
      env["sendfile.type"] = TYPE
      env["HTTP_X_SENDFILE_TYPE"] = TYPE
    end

    # The response to hand to the engine: unchanged without an x-sendfile
    # header; else the named file as a to_path body, or a 404/500 when it
    # cannot be sent (logged).
    def apply(status, headers, body)
      key = headers.keys.find { |name| name.is_a?(String) && name.casecmp?(TYPE) }
      return [status, headers, body] unless key

      path = headers[key].to_s
      real = allowed(path)
      unless real.is_a?(String)
        body.close if body.respond_to?(:close)
        return refusal(real)
      end

      rest = headers.reject { |name, _| name.casecmp?(TYPE) || name.casecmp?("content-length") }
      rest["content-length"] = File.size(real).to_s
      [status, rest, FileBody.new(real, body)]
    end

    private

    # The real path, or 404/500 with the reason logged.
    def allowed(path)
      real = File.realpath(path)
      unless @roots.any? { |root| real == root || real.start_with?(root == "/" ? root : "#{root}/") }
        @log_line.call("x-sendfile refused: #{path.inspect} is outside the allowed roots (#{@roots.join(", ")})")
        return 500
      end
      return real if File.file?(real)

      @log_line.call("x-sendfile refused: #{path.inspect} is not a regular file")
      500
    rescue SystemCallError => e
      @log_line.call("x-sendfile file not found: #{path.inspect} (#{e.class.name.split("::").last})")
      404
    end

    def refusal(status)
      text = status == 404 ? "404 Not Found\n" : "500 Internal Server Error\n"
      [status, { "content-type" => "text/plain; charset=utf-8", "content-length" => text.bytesize.to_s }, [text]]
    end
  end
end
