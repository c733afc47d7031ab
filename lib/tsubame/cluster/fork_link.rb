# frozen_string_literal: true

require "json"
require "socket"

module Tsubame
  # fork_worker: how the master asks worker 0 to fork workers. A
  # SOCK_SEQPACKET pair (one request per packet, never merged or split),
  # each request a batch: the indexes and phases as JSON, and for each new
  # worker the worker's end of its WorkerLink, passed as SCM_RIGHTS.
  #
  # The master makes each link itself, as for the workers it forks, so
  # nothing changes on its side once a worker runs: it holds the other end
  # before the fork happens, and sees it close if worker 0 never forks.
  class ForkLink
    MAX_PACKET = 65_536

    # [master's end, worker 0's end]
    def self.pair
      UNIXSocket.pair(:SEQPACKET).map { |io| new(io) }
    end

    attr_reader :io

    def initialize(io)
      @io = io
    end

    # batch: [[index, phase, worker_end_io], ...]. Returns false when
    # worker 0 is gone.
    def request(batch)
      data = JSON.generate(batch.map { |index, phase, _| { "index" => index, "phase" => phase } })
      rights = Socket::AncillaryData.unix_rights(*batch.map(&:last))
      @io.sendmsg(data, 0, nil, rights)
      true
    rescue IOError, SystemCallError
      false
    end

    # In worker 0: the next batch, [[index, phase, IO], ...], or
    # nil once the master's end is closed.
    def receive
      data, _, _, *controls = @io.recvmsg(MAX_PACKET, 0, nil, scm_rights: true)
      return nil if data.nil? || data.empty?

      ios = controls.flat_map { |control| control.unix_rights || [] }
      JSON.parse(data).zip(ios).map do |entry, io|
        [entry["index"], entry["phase"], io]
      end
    rescue IOError, SystemCallError, JSON::ParserError
      nil
    end

    def close
      @io.close unless @io.closed?
    end

    def closed?
      @io.closed?
    end
  end
end
