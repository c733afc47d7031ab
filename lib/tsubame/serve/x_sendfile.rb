# frozen_string_literal: true

require "tsubame/serve/file_handoff"

module Tsubame
  # X-Sendfile (--x-sendfile ROOT, docs/FILES.md): the env tells
  # Rack::Sendfile to answer with an `x-sendfile: PATH` header and an empty
  # body; FileHandoff then hands the file at PATH to the engine, if it lies
  # inside one of the allowed roots.
  class XSendfile
    # Rack 2.2 compares this name case-sensitively; Rack 3 in any case and
    # writes the header in lower case.
    TYPE = "X-Sendfile"

    # roots: directories; symlinks in them are resolved once, here.
    def initialize(roots, log_line)
      @roots = FileHandoff.real_dirs(roots)
      @handoff = FileHandoff.new(TYPE, log_line)
    end

    # Both names Rack has read: `sendfile.type` (Rack 2.2 and 3, which ignore
    # the request header now) and HTTP_X_SENDFILE_TYPE (older Racks). Set
    # after the request's own headers, so a client cannot choose another.
    def prepare(env)
      env["sendfile.type"] = TYPE
      env["HTTP_X_SENDFILE_TYPE"] = TYPE
    end

    # The response to hand to the engine (see FileHandoff#apply): the
    # header's value is the file's path itself.
    def apply(status, headers, body)
      @handoff.apply(status, headers, body) { |path| @handoff.resolve(path, @roots) }
    end
  end
end
