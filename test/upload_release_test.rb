# frozen_string_literal: true

require "test_helper"

# A body spooled to a temp file holds disk space and a descriptor; the
# server lets go of it when the request is over, not when the GC happens
# to collect rack.input.
class UploadReleaseTest < Minitest::Test
  include Tsubame::TestHelpers

  APP = <<~RUBY
    run lambda { |env|
      [200, { "content-type" => "text/plain" }, [env["rack.input"].read.bytesize.to_s]]
    }
  RUBY

  def test_a_spooled_upload_is_closed_when_its_request_ends
    in_tmpdir do |spool|
      config = write_file(spool, "config.rb", "spool_threshold 1024\nupload_dir #{spool.inspect}\n")
      with_server(APP, args: ["-C", config]) do |s|
        3.times do
          response = s.http.post("/", "x" * 100_000, "content-type" => "application/octet-stream")
          assert_equal "100000", response.body
        end
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 3
        held = nil
        loop do
          held = spooled_files(s.pid, spool)
          break if held.empty? || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

          sleep 0.05
        end
        assert_empty held, "temp files still open after their requests ended"
      end
    end
  end

  private

  # Descriptors of `pid` open on (deleted) files in `dir`.
  def spooled_files(pid, dir)
    Dir.glob("/proc/#{pid}/fd/*").filter_map do |fd|
      target = File.readlink(fd)
      target if target.start_with?(dir) && target.end_with?("(deleted)")
    rescue Errno::ENOENT
      nil
    end
  end
end
