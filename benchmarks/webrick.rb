# frozen_string_literal: true

# Serves a rackup file with WEBrick (Debian's ruby-webrick) through Rack's
# WEBrick handler, as `rackup -s webrick` does but without the middleware
# rackup adds in development (Lint, ShowExceptions, CommonLogger) and
# without WEBrick's access log, so WEBrick runs the same bare app as the
# other servers in benchmarks/compare.sh. WEBrick has no thread pool to
# size (one thread per connection) and listens on TCP only.
#
#   ruby benchmarks/webrick.rb APP.ru HOST PORT
require "rack"
require "webrick"
begin
  require "rack/handler/webrick"
rescue LoadError
  require "rackup/handler/webrick" # Rack 3 moved the handlers to the rackup gem
end

rackup, host, port = ARGV
unless ARGV.size == 3 && Integer(port, 10, exception: false)
  abort "usage: ruby #{$PROGRAM_NAME} APP.ru HOST PORT"
end

app = Rack::Builder.parse_file(rackup)
app = app.first if app.is_a?(Array) # Rack 2 returns [app, options]
handler = defined?(Rackup::Handler::WEBrick) ? Rackup::Handler::WEBrick : Rack::Handler::WEBrick

%w[INT TERM].each { |signal| trap(signal) { handler.shutdown } }
handler.run(app, Host: host, Port: Integer(port, 10), AccessLog: [],
                 Logger: WEBrick::Log.new($stderr, WEBrick::Log::WARN))
