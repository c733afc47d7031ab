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
      config = write_file(spool, "config.rb", "spool_threshold 1024\nupload_memory 0\nupload_dir #{spool.inspect}\n")
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

  # upload_memory: bodies past spool_threshold stay in memory while they fit
  # the budget, and go to disk past it. The app counts, while it holds the
  # request, the temp files its own process has open in the upload dir.
  def test_uploads_within_upload_memory_stay_off_disk_and_the_rest_spool
    app = <<~RUBY
      run lambda { |env|
        size = env["rack.input"].read.bytesize
        files = Dir.glob("/proc/self/fd/*").count do |fd|
          File.readlink(fd).start_with?(ENV["SPOOL"]) rescue false
        end
        [200, { "content-type" => "text/plain" }, ["\#{size} \#{files}"]]
      }
    RUBY
    in_tmpdir do |spool|
      body = "x" * 1_048_576
      { nil => "1048576 0", "upload_memory 0" => "1048576 1", "upload_memory 500_000" => "1048576 1" }
        .each do |directive, expected|
        config = write_file(spool, "config.rb", "upload_dir #{spool.inspect}\n#{directive}\n")
        with_server(app, args: ["-C", config], env: { "SPOOL" => spool }) do |s|
          response = s.http.post("/", body, "content-type" => "application/octet-stream")
          assert_equal expected, response.body, "with #{directive || "the default 64 MiB budget"}"
        end
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
