# frozen_string_literal: true

require_relative "lib/tsubame/version"

Gem::Specification.new do |spec|
  spec.name = "tsubame"
  spec.version = Tsubame::VERSION
  spec.authors = ["Tsubame authors"]
  spec.summary = "A Rack server with an HTTP engine written in Rust, a drop-in replacement for Puma"
  spec.description = "Tsubame runs Rack applications on a Rust HTTP engine with a pool of Ruby threads. " \
                     "It takes Puma's command-line flags and config files."
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.1"

  # Everything cargo needs to build the extension at install time ships too.
  shipped = %r{\A(?:lib/|exe/|ext/|crates/|docs/|Cargo\.toml\z|Cargo\.lock\z|README\.md\z)}
  root = __dir__
  listed = if File.exist?(File.join(root, ".git"))
             # --others: files not yet committed (or staged) still belong in a
             # gem built from a working tree; ignored files (target/, *.so)
             # stay out.
             Dir.chdir(root) { `git ls-files -z --cached --others --exclude-standard`.split("\x0") }
           else
             Dir.glob("{lib,exe,ext,crates,docs}/**/*", base: root) + %w[Cargo.toml Cargo.lock README.md]
           end
  spec.files = listed.grep(shipped).uniq.sort.select do |path|
    File.file?(File.join(root, path)) && !path.end_with?(".so")
  end

  spec.bindir = "exe"
  spec.executables = ["tsubame"]
  spec.require_paths = ["lib"]
  spec.extensions = ["ext/tsubame_native/extconf.rb"]

  spec.add_runtime_dependency "rack", ">= 2.2", "< 4"
end
