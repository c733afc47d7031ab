# frozen_string_literal: true

require "rack"
require "tsubame/serve/file_handoff"

module Tsubame
  # X-Accel-Redirect (--x-accel-redirect URI=DIR, docs/FILES.md), nginx's
  # variation: the app answers with an `x-accel-redirect: /URI/rest` header,
  # a URL rather than a path, and FileHandoff sends DIR/rest. The env
  # carries the mappings in X-Accel-Mapping's format, so Rack::Sendfile can
  # turn a file body's path into that URL.
  class XAccelRedirect
    # Rack 2.2 compares this name case-sensitively; Rack 3 in any case and
    # writes the header in lower case.
    TYPE = "X-Accel-Redirect"

    # mappings: [URI, DIR] pairs as Options keeps them (URI ending in "/",
    # DIR absolute).
    def initialize(mappings, log_line)
      @handoff = FileHandoff.new(TYPE, log_line)
      # Longest URI first, so a prefix inside another ("/f/" and "/f/big/")
      # sends from the more specific directory.
      @by_uri = mappings.sort_by { |uri, _| -uri.bytesize }
                        .map { |uri, dir| [uri.b, FileHandoff.real_dirs([dir])] }.freeze
      # Rack::Sendfile takes the first DIR that starts the file's path, so
      # the longest goes first here too. Both sides end in "/", so /srv/f
      # does not claim /srv/files/... and the URL keeps one slash.
      @mapping = mappings.sort_by { |_, dir| -dir.bytesize }
                         .map { |uri, dir| "#{dir.end_with?("/") ? dir : "#{dir}/"}=#{uri}" }.join(",").freeze
      @prefixes = mappings.map(&:first).join(", ").freeze
    end

    # `sendfile.type` (Rack 2.2 and 3) and HTTP_X_SENDFILE_TYPE (older
    # Racks) name the variation; HTTP_X_ACCEL_MAPPING is read only by a
    # Rack::Sendfile given the variation explicitly and no mappings of its
    # own. All set after the request's own headers, so a client cannot
    # choose another variation or map URLs to other directories.
    def prepare(env)
      env["sendfile.type"] = TYPE
      env["HTTP_X_SENDFILE_TYPE"] = TYPE
      env["HTTP_X_ACCEL_MAPPING"] = @mapping
    end

    # The response to hand to the engine (see FileHandoff#apply).
    def apply(status, headers, body)
      @handoff.apply(status, headers, body) { |url| resolve(url) }
    end

    private

    # The real path for a URL, or a 404/500 status. Checked on the decoded
    # URL, so %2e%2e or %5c cannot slip past; bytes (.b) because a decoded
    # name need not be valid UTF-8.
    def resolve(url)
      # A raw "?" starts arguments, as nginx reads it (Rack::Sendfile writes
      # a "?" in a file name as %3F).
      path = Rack::Utils.unescape_path(url.b[/\A[^?]*/]).b
      return @handoff.refuse(url, "contains a NUL byte") if path.include?("\0")
      return @handoff.refuse(url, "contains a backslash") if path.include?("\\")
      return @handoff.refuse(url, "has a '..' segment") if path.split("/").include?("..")

      uri, roots = @by_uri.find { |prefix, _| path.start_with?(prefix) }
      return @handoff.refuse(url, "is under no X-Accel-Redirect prefix (#{@prefixes})") unless uri

      # roots has one directory: a URL reaches only the directory of its
      # own prefix.
      @handoff.resolve(File.join(roots.first.b, path.byteslice(uri.bytesize..)), roots, shown: url)
    end
  end
end
