# frozen_string_literal: true

require "files/support"
require "yaml"

# The hostile paths of test/adversarial/public/paths.yml against one server
# with a public folder, a fresh connection per case. Each case checks the
# status, that the secret outside the root never appears, whether the app
# answered, and that the server still serves the folder afterwards.
class PublicPathsCorpusTest < Minitest::Test
  include Tsubame::TestHelpers
  include Tsubame::HttpSupport
  include Tsubame::PublicSupport

  CASES = YAML.safe_load(File.read(File.join(__dir__, "public", "paths.yml")))

  # The one server every case runs against.
  module Shared
    extend Tsubame::PublicSupport

    def self.server
      @server ||= begin
        dir = Dir.mktmpdir("tsubame-public-adv")
        root = build_public(dir)
        server = Tsubame::TestServer.new(Tsubame::PublicSupport::APP, args: ["--public", root, "--public-index"])
        Minitest.after_run do
          server.kill
          FileUtils.rm_rf(dir)
        end
        server
      end
    end
  end

  def test_the_corpus_is_large_and_every_name_is_unique
    names = CASES.map { |c| c["name"] }
    assert_operator names.size, :>=, 40
    assert_equal names.size, names.uniq.size
  end

  CASES.each do |c|
    define_method("test_#{c["name"]}") { run_case(c) }
  end

  def run_case(c)
    server = Shared.server
    method = c.fetch("method", "GET")
    label = "#{c["name"]} #{c["path"].inspect} (#{c["why"]})"
    client = conn(server, timeout: 5)
    client.write("#{method} #{c["path"]} HTTP/1.1\r\nHost: a\r\n\r\n")
    response = client.read_response(head: method == "HEAD")
    refute_includes response.body, SECRET, label
    case c["expect"]
    when "app"
      assert_equal 200, response.status, label
      assert_match(/\Aapp GET /, response.body, "#{label}: the app answers")
    else
      assert_equal c["expect"], response.status, label
      refute_match(/\Aapp /, response.body, "#{label}: the folder answered, not the app")
    end
    assert_equal "hello public\n", server.get("/a.txt").body, "#{label}: the server goes on"
  ensure
    client&.close
  end
end
