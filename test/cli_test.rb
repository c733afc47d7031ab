# frozen_string_literal: true

require "test_helper"

# exe/tsubame as a user runs it. Every case here exits before the native
# extension would be loaded, so these pass before it is built.
class CLITest < Minitest::Test
  include Tsubame::TestHelpers

  FLAGS = %w[
    --bind --port --threads --environment --config --quiet --log-requests
    --pidfile --version --help --backlog --io-threads --max-body-size --drain-timeout
    --x-sendfile --x-accel-redirect --proxy-protocol --remote-address-header --trusted-proxies
  ].freeze

  def assert_one_line_failure(stderr, status, pattern)
    assert_equal 1, status.exitstatus, stderr
    assert_equal 1, stderr.lines.size, "expected one line, got: #{stderr.inspect}"
    assert_match(/\Atsubame: /, stderr)
    assert_match pattern, stderr
  end

  def test_help_lists_every_flag
    stdout, stderr, status = run_tsubame("--help")
    assert_equal 0, status.exitstatus
    assert_empty stderr, "no warnings under ruby -w"
    FLAGS.each { |flag| assert_includes stdout, flag }
    %w[-b -p -t -e -C -q -v -V -h].each { |flag| assert_match(/^\s+#{flag}, --/, stdout) }
  end

  def test_help_lists_the_subcommands
    stdout, stderr, status = run_tsubame("--help")
    assert_equal 0, status.exitstatus
    assert_empty stderr
    block = stdout[/^Subcommands:\n((?:    \S.*\n)+)/, 1]
    refute_nil block, "no Subcommands: block in:\n#{stdout}"
    assert_equal %w[bench tune ctl], block.lines.map { |line| line.split.first }
    assert_match(/^Usage: tsubame .*\n\s+tsubame bench\|tune\|ctl /, stdout)
  end

  # Each subcommand listed there exists and has its own help.
  def test_subcommand_help
    { "bench" => /\AUsage: tsubame bench /, "tune" => /\AUsage: tsubame tune /,
      "ctl" => /\AUsage: tsubame ctl / }.each do |name, usage|
      stdout, stderr, status = run_tsubame(name, "--help")
      assert_equal 0, status.exitstatus, "tsubame #{name} --help: #{stderr}"
      assert_empty stderr, "tsubame #{name} --help"
      assert_match usage, stdout
    end
  end

  def test_short_help
    stdout, _, status = run_tsubame("-h")
    assert_equal 0, status.exitstatus
    assert_match(/\AUsage: tsubame /, stdout)
  end

  def test_version
    %w[-V --version].each do |flag|
      stdout, stderr, status = run_tsubame(flag)
      assert_equal 0, status.exitstatus
      assert_empty stderr
      assert_equal "tsubame #{Tsubame::VERSION}\n", stdout
    end
  end

  def test_bad_flag
    stdout, stderr, status = run_tsubame("--frobnicate")
    assert_one_line_failure(stderr, status, /invalid option: --frobnicate/)
    assert_empty stdout
  end

  def test_missing_flag_argument
    _, stderr, status = run_tsubame("--port")
    assert_one_line_failure(stderr, status, /missing argument: --port/)
  end

  def test_bad_threads
    _, stderr, status = run_tsubame("--threads", "x")
    assert_one_line_failure(stderr, status, /invalid threads "x"/)
  end

  def test_bad_thread_range
    _, stderr, status = run_tsubame("-t", "8:2")
    assert_one_line_failure(stderr, status, /min threads \(8\) must not be greater than max threads \(2\)/)
  end

  def test_bad_values
    [
      [%w[-b http://0.0.0.0:80], /invalid bind "http:/],
      [%w[-p 99999], /invalid port "99999"/],
      [%w[--backlog -3], /backlog must be a positive integer/],
      [%w[--max-body-size lots], /max_body_size must be/],
      [%w[--drain-timeout soon], /drain_timeout must be a non-negative number of seconds/],
      [%w[--proxy-protocol v9], /proxy_protocol must be v1 or v2/],
      [%w[--remote-address-header X:Y], /remote_address_header must be a header name/],
      [%w[--trusted-proxies 10.0.0.0/8,nope], /trusted_proxies: "nope" is not an address or CIDR range/]
    ].each do |args, pattern|
      _, stderr, status = run_tsubame(*args)
      assert_one_line_failure(stderr, status, pattern)
    end
  end

  def test_bad_x_accel_redirect
    in_tmpdir do |dir|
      [
        [["files=#{dir}"], /x_accel_mappings: URI must start with '\/' and hold no/],
        [["/_files/=#{dir}/missing"], /x_accel_mappings must be an existing directory \(got ".*missing"\)/],
        [["/_files/"], /x_accel_mappings entries must be URI=DIR/]
      ].each do |values, pattern|
        _, stderr, status = run_tsubame(*values.flat_map { |value| ["--x-accel-redirect", value] }, "-C", "-", chdir: dir)
        assert_one_line_failure(stderr, status, pattern)
      end
      _, stderr, status = run_tsubame("--x-accel-redirect", "/_files/=#{dir}", "--x-sendfile", dir, "-C", "-", chdir: dir)
      assert_one_line_failure(stderr, status, /x_sendfile and x_accel_redirect cannot both be set/)
    end
  end

  def test_missing_default_rackup
    in_tmpdir do |dir|
      _, stderr, status = run_tsubame(chdir: dir)
      assert_one_line_failure(stderr, status, /rackup file not found: config\.ru/)
    end
  end

  def test_missing_named_rackup
    in_tmpdir do |dir|
      _, stderr, status = run_tsubame("-C", "-", "nope.ru", chdir: dir)
      assert_one_line_failure(stderr, status, /rackup file not found: nope\.ru/)
    end
  end

  def test_too_many_arguments
    _, stderr, status = run_tsubame("a.ru", "b.ru")
    assert_one_line_failure(stderr, status, /too many arguments/)
  end

  def test_config_file_error_names_file_and_line
    in_tmpdir do |dir|
      write_file(dir, "config/tsubame.rb", "threads 1, 2\nfrobnicate\n")
      _, stderr, status = run_tsubame(chdir: dir)
      assert_one_line_failure(stderr, status, %r{config/tsubame\.rb:2: unknown directive 'frobnicate'})
    end
  end

  def test_missing_config_file
    in_tmpdir do |dir|
      _, stderr, status = run_tsubame("-C", "nope.rb", chdir: dir)
      assert_one_line_failure(stderr, status, /config file not found: nope\.rb/)
    end
  end

  def test_bad_environment_variable
    in_tmpdir do |dir|
      _, stderr, status = run_tsubame(chdir: dir, env: { "RAILS_MAX_THREADS" => "lots" })
      assert_one_line_failure(stderr, status, /RAILS_MAX_THREADS: threads_max must be a positive integer/)
    end
  end

  def test_config_file_rackup_is_looked_for
    in_tmpdir do |dir|
      write_file(dir, "config/puma.rb", %(rackup "app.ru"\n))
      _, stderr, status = run_tsubame(chdir: dir)
      assert_one_line_failure(stderr, status, /rackup file not found: app\.ru/)
    end
  end
end
