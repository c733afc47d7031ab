# frozen_string_literal: true

require_relative "lib/tsubame/version"

# Two gems from this one spec:
# - the source gem (`make gem`, platform "ruby"): builds the extension with
#   cargo when it is installed (ext/tsubame_native/extconf.rb);
# - with TSUBAME_NATIVE_GEM=1, the platform gem (`make native-gem`): the
#   already-built lib/tsubame/tsubame_native.so and lib/tsubame/tsubame-bench
#   inside, for this machine's platform (Gem::Platform.local) and this
#   Ruby's minor version only, with no extension to build, so installing it
#   needs no Rust toolchain and compiles nothing.
native = ENV["TSUBAME_NATIVE_GEM"] == "1"
binaries = %w[lib/tsubame/tsubame_native.so lib/tsubame/tsubame-bench]

Gem::Specification.new do |spec|
  spec.name = "tsubame"
  spec.version = Tsubame::VERSION
  spec.authors = ["Tsubame authors"]
  spec.summary = "A Rack server with an HTTP engine written in Rust, a drop-in replacement for Puma"
  spec.description = "Tsubame runs Rack applications on a Rust HTTP engine with a pool of Ruby threads. " \
                     "It takes Puma's command-line flags and config files."
  spec.license = "MIT"

  root = __dir__
  # The source gem ships everything cargo needs to build the extension at
  # install time; the platform gem only the Ruby side and the binaries.
  shipped = if native
              %r{\A(?:lib/|exe/|docs/|README\.md\z)}
            else
              %r{\A(?:lib/|exe/|ext/|crates/|docs/|Cargo\.toml\z|Cargo\.lock\z|README\.md\z)}
            end
  listed = if File.exist?(File.join(root, ".git"))
             # --others: files not yet committed (or staged) still belong in a
             # gem built from a working tree; ignored files (target/, *.so)
             # stay out.
             Dir.chdir(root) { `git ls-files -z --cached --others --exclude-standard`.split("\x0") }
           else
             Dir.glob("{lib,exe,ext,crates,docs}/**/*", base: root) + %w[Cargo.toml Cargo.lock README.md]
           end
  spec.files = listed.grep(shipped).uniq.sort.select do |path|
    File.file?(File.join(root, path)) && !path.end_with?(".so") && !binaries.include?(path)
  end

  spec.bindir = "exe"
  spec.executables = ["tsubame"]
  spec.require_paths = ["lib"]

  if native
    missing = binaries.reject { |path| File.file?(File.join(root, path)) }
    raise "tsubame.gemspec: #{missing.join(", ")} missing; `make build` builds them" unless missing.empty?

    spec.files += binaries
    spec.platform = Gem::Platform.local
    # The extension is built against this Ruby's headers and ABI, which
    # change between minor versions.
    major, minor = RUBY_VERSION.split(".").map(&:to_i)
    spec.required_ruby_version = [">= #{major}.#{minor}", "< #{major}.#{minor + 1}"]
  else
    spec.required_ruby_version = ">= 3.1"
    spec.extensions = ["ext/tsubame_native/extconf.rb"]
  end

  spec.add_runtime_dependency "rack", ">= 2.2", "< 4"
end
