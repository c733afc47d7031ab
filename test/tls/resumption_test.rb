# frozen_string_literal: true

require "tls/support"
require "cluster/support"

# TLS session resumption in a cluster: the session tickets (TLS 1.2
# tickets and TLS 1.3 resumption tickets) are sealed with keys every worker
# shares (crates/tsubame-engine/src/net/tls_tickets.rs), so a client that
# saved its session resumes whichever worker accepts its next connection.
class TlsResumptionTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::TlsSupport
  include Tsubame::ClusterHelpers

  APP = <<~'RUBY'
    run ->(env) { [200, { "content-type" => "text/plain", "content-length" => Process.pid.to_s.bytesize.to_s }, [Process.pid.to_s]] }
  RUBY

  CLIENTS = 200

  def context(version)
    context = OpenSSL::SSL::SSLContext.new
    context.ca_file = certs.path("ca.pem")
    context.verify_mode = OpenSSL::SSL::VERIFY_PEER
    context.min_version = version
    context.max_version = version
    context
  end

  # One connection, one request; returns [pid that answered, reused?, session].
  def visit(port, context, session = nil)
    socket = TCPSocket.new("127.0.0.1", port)
    ssl = OpenSSL::SSL::SSLSocket.new(socket, context)
    ssl.hostname = "localhost"
    ssl.sync_close = true
    ssl.session = session if session
    ssl.connect
    ssl.write("GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    # Reading to the end also reads the TLS 1.3 NewSessionTicket messages,
    # which arrive after the handshake.
    response = ssl.read
    assert_match(%r{\AHTTP/1\.1 200}, response)
    [response.split("\r\n\r\n", 2).last.to_i, ssl.session_reused?, ssl.session]
  ensure
    ssl&.close
  end

  def test_clients_with_a_saved_session_resume_on_any_of_four_workers
    with_cluster(APP, workers: 4, args: ["-b", ssl_bind]) do |server|
      port = ssl_port(server)
      pids = server.booted_workers.values
      assert_equal 4, pids.size
      { "TLS 1.2" => OpenSSL::SSL::TLS1_2_VERSION, "TLS 1.3" => OpenSSL::SSL::TLS1_3_VERSION }.each do |name, version|
        ctx = context(version)
        first = Array.new(CLIENTS) { visit(port, ctx) }
        refute first.any? { |_pid, reused, _session| reused }, "#{name}: a first connection cannot resume"
        again = first.map { |_pid, _reused, session| visit(port, ctx, session) }
        resumed = again.count { |_pid, reused, _session| reused }
        across = first.zip(again).count { |(pid1, _, _), (pid2, reused, _)| reused && pid1 != pid2 }
        assert_operator resumed, :>=, (CLIENTS * 0.99).ceil,
                        "#{name}: #{resumed} of #{CLIENTS} clients resumed their session"
        assert_empty (first + again).map(&:first).uniq - pids, "#{name}: answered by the workers"
        # With four workers taking turns at the socket, many clients come
        # back to another worker than the one that issued their ticket;
        # those resumed too, or the count above could not reach 99%.
        assert_operator across, :>, 0, "#{name}: no client came back to another worker"
        puts "\n#{name}: #{resumed}/#{CLIENTS} resumed, #{across} of them on another worker" if ENV["VERBOSE"]
      end
    end
  end

  def test_session_cache_off_still_resumes_by_ticket_and_tampered_tickets_are_refused
    # reuse=0 turns the session-ID cache off: TLS 1.2 resumption is then by
    # ticket alone.
    with_server(APP, args: ["-b", "#{ssl_bind}&reuse=0"], lint: false) do |server|
      port = ssl_port(server)
      ctx = context(OpenSSL::SSL::TLS1_2_VERSION)
      _pid, _reused, session = visit(port, ctx)
      assert visit(port, ctx, session)[1], "a TLS 1.2 ticket resumes with the session cache off"

      # The same session with its ticket bytes flipped is not resumed: the
      # server falls back to a full handshake (and the request still works).
      der = session.to_der
      ticket_at = der.index(session_ticket_bytes(session)) or flunk("ticket not found in the session")
      der.setbyte(ticket_at + 40, der.getbyte(ticket_at + 40) ^ 0xff)
      refute visit(port, ctx, OpenSSL::SSL::Session.new(der))[1], "a tampered ticket must not resume"
    end
  end

  # The ticket the server sent, as stored in the client's session (ASN.1
  # tag [10] of OpenSSL's SSL_SESSION encoding).
  def session_ticket_bytes(session)
    asn = OpenSSL::ASN1.decode(session.to_der)
    field = asn.value.find { |v| v.tag_class == :CONTEXT_SPECIFIC && v.tag == 10 } or flunk("no ticket in session")
    field.value.first.value
  end
end
