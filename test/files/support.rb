# frozen_string_literal: true

require "http1/support"

module Tsubame
  # A public folder to serve in the files tests, with a secret beside it
  # that no request may reach, and an app that says it answered.
  module PublicSupport
    SECRET = "TOPSECRET-outside-the-root"

    # Says which path reached it, so a test knows the app answered.
    APP = <<~'RUBY'
      run lambda { |env|
        body = "app #{env["REQUEST_METHOD"]} #{env["PATH_INFO"]}"
        [200, { "content-type" => "text/plain", "content-length" => body.bytesize.to_s }, [body]]
      }
    RUBY

    # Builds dir/outside (the secret) and dir/public (the root), returns
    # the root. Links out of the root, a FIFO and dotfiles sit inside it.
    def build_public(dir)
      outside = File.join(dir, "outside")
      root = File.join(dir, "public")
      FileUtils.mkdir_p([outside, File.join(root, "sub"), File.join(root, "docs"), File.join(root, ".git")])
      File.write(File.join(outside, "secret.txt"), SECRET)
      File.write(File.join(root, "a.txt"), "hello public\n")
      File.write(File.join(root, "sub", "b.txt"), "b\n")
      File.write(File.join(root, "docs", "index.html"), "<h1>docs</h1>\n")
      File.write(File.join(root, "index.html"), "<h1>home</h1>\n")
      File.write(File.join(root, ".env"), SECRET)
      File.write(File.join(root, ".git", "config"), SECRET)
      File.write(File.join(root, "sub", ".hidden"), SECRET)
      File.symlink(File.join(outside, "secret.txt"), File.join(root, "link_out"))
      File.symlink(outside, File.join(root, "link_dir_out"))
      File.symlink("/dev/null", File.join(root, "dev_null"))
      File.symlink("a.txt", File.join(root, "link_in"))
      system("mkfifo", File.join(root, "fifo"), exception: true)
      root
    end
  end
end

require "tsubame/support/process_info"

module Tsubame
  # What the files tests measure of a running server, from /proc (Linux).
  module FilesMeasureSupport
    # Resident set size in bytes (VmRSS is given in KiB).
    def rss_bytes(pid)
      File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i * 1024
    end

    # CPU time the whole process has used (all threads, also those gone),
    # in seconds, at the kernel's clock-tick resolution (10 ms).
    def process_cpu(pid)
      ProcessInfo.cpu_seconds(pid)
    end

    # CPU time one thread (task) of a process has used, in seconds, with
    # nanosecond resolution: the first field of its schedstat.
    def thread_cpu(pid, tid)
      File.read("/proc/#{pid}/task/#{tid}/schedstat").split.first.to_i / 1e9
    end
  end
end
