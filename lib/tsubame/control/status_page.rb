# frozen_string_literal: true

require "cgi"
require "uri"

module Tsubame
  # The live status page's three files (lib/tsubame/control/status_page/),
  # read once. The page loads only these, from the control app itself, so
  # it works offline and under a Content-Security-Policy that allows
  # nothing but its own origin.
  module StatusPage
    DIR = File.join(__dir__, "status_page")
    FILES = {
      "status" => ["text/html; charset=utf-8", "index.html"],
      "status.js" => ["text/javascript; charset=utf-8", "status.js"],
      "status.css" => ["text/css; charset=utf-8", "status.css"]
    }.freeze
    CONTENTS = FILES.transform_values { |(_, name)| File.read(File.join(DIR, name)).freeze }.freeze
    CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " \
          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

    module_function

    def file?(name)
      FILES.key?(name)
    end

    # [content type, text]; the page's links carry the token it was
    # opened with, so the script and the event stream are allowed too.
    def file(name, token)
      type, = FILES.fetch(name)
      text = CONTENTS.fetch(name)
      text = text.gsub("{{TOKEN}}", CGI.escapeHTML(URI.encode_www_form_component(token.to_s))) if name == "status"
      [type, text]
    end
  end
end
