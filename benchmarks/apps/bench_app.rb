# frozen_string_literal: true

require "fileutils"
require "tmpdir"

# The logic shared by the benchmark rackups in this directory (string.ru,
# array.ru, chunked.ru, file.ru). Every response has 25 headers
# (content-type and 24 x-bench-NN). The body is made of 1 KiB pieces:
#
#   X-Body-KiB: N   request header: N KiB for this request (0 allowed)
#   BODY_KIB=N      environment: the size when the header is absent (default 1)
#   X-Delay-Ms: N   request header: sleep N ms before answering
#
# A bad value gets a 400. The body shapes are the ones a Rack server has
# to handle differently: one String, an Array of pieces, an `each` body
# without content-length (sent chunked), and a `to_path` file body.
module BenchApp
  KIB = 1024
  MAX_KIB = 100 * 1024
  MAX_DELAY_MS = 60_000
  # One KiB: 1023 letters and a newline.
  PIECE = "#{"x" * 1023}\n".freeze
  HEADERS = { "content-type" => "text/plain" }.merge(
    (1..24).to_h { |i| [format("x-bench-%02d", i), "value #{i} of the 24 extra benchmark headers"] }
  ).freeze
  DEFAULT_KIB = Integer(ENV.fetch("BODY_KIB", "1"), 10)
  raise ArgumentError, "BODY_KIB must be 0..#{MAX_KIB} (got #{DEFAULT_KIB})" unless DEFAULT_KIB.between?(0, MAX_KIB)

  # Raised for a bad request header; answered with 400.
  class BadRequest < StandardError; end

  module_function

  def int_header(env, name, max, default)
    raw = env["HTTP_#{name.upcase.tr("-", "_")}"]
    return default if raw.nil?

    value = Integer(raw, 10, exception: false)
    return value if value&.between?(0, max)

    raise BadRequest, "#{name} must be an integer from 0 to #{max} (got #{raw.inspect})"
  end

  # Yields the body size in KiB after the optional delay; turns a bad
  # header into a 400.
  def respond(env)
    kib = int_header(env, "X-Body-KiB", MAX_KIB, DEFAULT_KIB)
    delay = int_header(env, "X-Delay-Ms", MAX_DELAY_MS, 0)
    sleep(delay / 1000.0) if delay.positive?
    yield kib
  rescue BadRequest => e
    [400, { "content-type" => "text/plain" }, ["#{e.message}\n"]]
  end

  STRINGS = Hash.new { |cache, kib| cache[kib] = (PIECE * kib).freeze }
  STRINGS_LOCK = Mutex.new

  def string_of(kib)
    STRINGS_LOCK.synchronize { STRINGS[kib] }
  end

  # [String]: the whole body in one String.
  def string
    lambda do |env|
      respond(env) { |kib| [200, HEADERS.dup, [string_of(kib)]] }
    end
  end

  # An Array of 1 KiB Strings.
  def array
    lambda do |env|
      respond(env) { |kib| [200, HEADERS.dup, Array.new(kib, PIECE)] }
    end
  end

  # An `each` body with no content-length: the server streams it (chunked
  # on HTTP/1.1).
  class Pieces
    def initialize(count)
      @count = count
    end

    def each
      @count.times { yield PIECE }
    end
  end

  def chunked
    lambda do |env|
      respond(env) { |kib| [200, HEADERS.dup, Pieces.new(kib)] }
    end
  end

  # A body the server reads from a file (`to_path`); `each` for servers
  # that do not use to_path.
  class FileBody
    attr_reader :to_path

    def initialize(path)
      @to_path = path
    end

    def each
      File.open(@to_path, "rb") do |f|
        while (chunk = f.read(64 * KIB))
          yield chunk
        end
      end
    end
  end

  FILES = {}
  FILES_LOCK = Mutex.new

  # The path of a file of `kib` KiB, written once into a directory that
  # the process that made it removes at exit.
  def file_of(kib)
    FILES_LOCK.synchronize do
      FILES[kib] ||= File.join(files_dir, "#{kib}k.txt").tap { |path| File.binwrite(path, PIECE * kib) }
    end
  end

  def files_dir
    FILES[:dir] ||= Dir.mktmpdir("tsubame-bench-files").tap do |dir|
      owner = Process.pid
      at_exit { FileUtils.remove_entry(dir) if Process.pid == owner && File.directory?(dir) }
    end
  end

  def file
    lambda do |env|
      respond(env) { |kib| [200, HEADERS.dup, FileBody.new(file_of(kib))] }
    end
  end
end
