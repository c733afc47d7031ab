# frozen_string_literal: true

# Sends every corpus case to Puma (the `puma` on PATH; Debian's is 5.6.5)
# running the same recording app, and prints, as a Markdown table, the
# cases Tsubame refuses but Puma answers 2xx or passes to the application.
# A comparison for docs/RELIABILITY.md, not a test:
#
#   ruby test/adversarial/compare_puma.rb
require "json"
require "socket"
require "tmpdir"
require_relative "corpus"

# One Puma process on an ephemeral port, with the corpus's recording app.
class PumaUnderTest
  attr_reader :port, :log

  def initialize(dir)
    @log = File.join(dir, "app.log")
    File.write(@log, "")
    @port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
    app = File.join(__dir__, "recording_app.ru")
    @pid = Process.spawn({ "ADV_LOG" => @log }, "puma", "-q", "-t", "2:2", "-b", "tcp://127.0.0.1:#{@port}", app,
                         out: File::NULL, err: File.join(dir, "puma.err"))
    wait_listening
  end

  def wait_listening
    deadline = Time.now + 15
    begin
      TCPSocket.new("127.0.0.1", @port).close
    rescue Errno::ECONNREFUSED
      raise "puma did not start" if Time.now > deadline

      sleep 0.05
      retry
    end
  end

  def stop
    Process.kill("KILL", @pid)
    Process.wait(@pid)
  end

  # [first status or "no answer", number of requests the app ran]
  def try(c)
    before = File.size(@log)
    sock = TCPSocket.new("127.0.0.1", @port)
    begin
      sock.write(c.bytes)
      sock.close_write if c.close_write
    rescue Errno::EPIPE, Errno::ECONNRESET
      nil
    end
    answer = read_answer(sock)
    sleep 0.05 # the app logs before it answers; this covers requests run after the first answer
    [answer, File.read(@log).byteslice(before..).lines.size]
  ensure
    sock&.close
  end

  def read_answer(sock)
    data = +""
    deadline = Time.now + 1
    while (left = deadline - Time.now).positive? && sock.wait_readable(left)
      chunk = sock.read_nonblock(65_536, exception: false)
      break if chunk.nil?

      data << chunk unless chunk == :wait_readable
      break if data.include?("\r\n")
    end
    data[%r{\AHTTP/1\.[01] (\d{3})}, 1] || (data.empty? ? "no answer" : "garbage")
  rescue Errno::ECONNRESET
    "reset"
  end
end

def tsubame_outcome(c)
  c.statuses.empty? ? "closed" : c.statuses.last.to_s
end

def refused?(c)
  c.statuses.empty? || c.statuses.last >= 400
end

Dir.mktmpdir("tsubame-adv-puma") do |dir|
  puma = PumaUnderTest.new(dir)
  rows = []
  cases = AdversarialCorpus.cases
  cases.each do |c|
    answer, ran = puma.try(c)
    next unless refused?(c)

    expected_ran = c.app_saw.size
    first_refused = c.statuses.empty? || c.statuses.first >= 400
    next unless (first_refused && answer.start_with?("2")) || ran > expected_ran

    rows << "| #{c.category}/#{c.name} | #{tsubame_outcome(c)} | #{answer} | #{ran - expected_ran} |"
  end
  puma.stop
  puts "#{rows.size} of #{cases.count { |c| refused?(c) }} cases Tsubame refuses are accepted by Puma " \
       "(#{`puma --version`.strip}):"
  puts
  puts "| case | Tsubame | Puma | requests Puma's app ran that Tsubame's did not |"
  puts "|---|---|---|---|"
  puts rows
end
