# frozen_string_literal: true

require "tmpdir"
require "fileutils"

module Tsubame
  # --tls-self-signed: a certificate for localhost, 127.0.0.1 and ::1 made
  # at boot (by the engine's rcgen) for every ssl:// bind that names no
  # certificate. For development only: browsers and clients will not trust
  # it unless told to.
  #
  # The files live in a directory named after the process id, which a hot
  # restart (exec) keeps, so the bind URIs stay the same and the inherited
  # sockets are matched to them again. A hot restart's stand-in (another
  # pid) passes its parent's pid as owner for the same reason, and uses the
  # files already there.
  module SelfSigned
    WARNING = "! --tls-self-signed: serving a generated certificate for localhost; for development only"

    module_function

    def binds(options, log: $stderr, owner: Process.pid)
      binds = options[:binds]
      return binds unless options[:tls_self_signed]

      # A bind that names a certificate some other way (cert_pem, several
      # certificates by SNI, sni_dir) is not missing one.
      named = /[?&](?:cert|cert_pem|sni_dir)(?:\.\d+)?=/
      missing = binds.select { |uri| uri.start_with?("ssl://") && !uri.match?(named) }
      return binds if missing.empty?

      cert, key = write_files(owner)
      log.puts WARNING
      binds.map { |uri| missing.include?(uri) ? "#{uri}#{uri.include?("?") ? "&" : "?"}cert=#{cert}&key=#{key}" : uri }
    end

    def write_files(owner = Process.pid)
      dir = File.join(Dir.tmpdir, "tsubame-self-signed-#{Process.uid}-#{owner}")
      FileUtils.mkdir_p(dir, mode: 0o700)
      cert = File.join(dir, "cert.pem")
      key = File.join(dir, "key.pem")
      # Only the owner makes (and later removes) them; a stand-in must not
      # swap the certificate under its parent.
      return [cert, key] if owner != Process.pid && File.exist?(cert) && File.exist?(key)

      Native.write_self_signed(cert, key)
      at_exit { FileUtils.rm_rf(dir) if Process.pid == owner }
      [cert, key]
    end
  end
end
