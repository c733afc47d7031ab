# frozen_string_literal: true

require "minitest/autorun"
require "fileutils"
require "tmpdir"
require_relative "../script/import_graph"

# No import circles between files: in each Rust crate (engine, bench,
# native binding) and in lib/. The rules for what counts as an import,
# and why edges to a facade (lib.rs, mod.rs) do not close circles, are at
# the top of script/import_graph.rb; `ruby script/import_graph.rb --edges`
# prints the graphs. Plain text parsing: needs no build.
class LayoutTest < Minitest::Test
  ROOT = File.expand_path("..", __dir__)

  # --- the checker, on small trees ----------------------------------------

  def tree(files)
    Dir.mktmpdir("layout") do |dir|
      files.each do |path, text|
        full = File.join(dir, path)
        FileUtils.mkdir_p(File.dirname(full))
        File.write(full, text)
      end
      yield dir
    end
  end

  def rust(files)
    tree(files) { |dir| return ImportGraph.rust(dir, "t") }
  end

  def ruby(files)
    tree(files) { |dir| return ImportGraph.ruby(dir, "t") }
  end

  def edges(graph)
    graph.edges.flat_map { |from, tos| tos.map { |to| "#{from} -> #{to}" } }.sort
  end

  def test_rust_two_file_circle
    g = rust("lib.rs" => "mod a;\nmod b;\n",
             "a.rs" => "use crate::b::B;\npub struct A(B);\n",
             "b.rs" => "use crate::a::A;\npub struct B;\nfn f(_: A) {}\n")
    assert_equal ["a.rs -> b.rs -> a.rs"], g.circle_lines
  end

  def test_rust_three_file_circle_through_code_paths
    g = rust("lib.rs" => "pub mod a;\npub mod b;\npub mod c;\n",
             "a.rs" => "pub fn a() { crate::b::b() }\n",
             "b.rs" => "pub fn b() { let _ = crate::c::C::new(); }\n",
             "c.rs" => "pub struct C;\nimpl C { pub fn new() -> C { crate::a::a(); C } }\n")
    assert_equal ["a.rs -> b.rs -> c.rs -> a.rs"], g.circle_lines
  end

  def test_rust_acyclic_tree_has_no_circle
    g = rust("main.rs" => "mod a;\nmod b;\nmod c;\nfn main() { a::run(); }\n",
             "a.rs" => "use crate::b::B;\nuse crate::c;\npub fn run() { c::go(B) }\n",
             "b.rs" => "use crate::c::C;\npub struct B(C);\n",
             "c.rs" => "use std::collections::HashMap;\npub struct C;\npub fn go<T>(_: T) {}\n")
    assert_empty g.circle_lines
    assert_equal ["a.rs -> b.rs", "a.rs -> c.rs", "b.rs -> c.rs", "main.rs -> a.rs"], edges(g)
  end

  def test_rust_grouped_use_trees
    g = rust("lib.rs" => "mod a;\nmod c;\nmod d;\nmod e;\nmod x;\n",
             "a.rs" => "pub struct B;\n", "c.rs" => "", "d.rs" => "pub struct D;\n", "e.rs" => "",
             "x.rs" => "use crate::{a::B, c};\nuse crate::{\n    d::{self, D as Dee},\n    e::*,\n};\n")
    assert_equal ["x.rs -> a.rs", "x.rs -> c.rs", "x.rs -> d.rs", "x.rs -> e.rs"], edges(g)
  end

  def test_rust_super_and_self_and_most_specific_file
    g = rust("lib.rs" => "mod net;\nmod top;\n",
             "top.rs" => "pub fn f() {}\n",
             "net/mod.rs" => "mod tcp;\nmod udp;\nmod dispatch;\npub struct Shared;\n",
             "net/tcp.rs" => "use super::udp::Udp;\nfn g() { super::super::top::f(); }\n",
             "net/udp.rs" => "pub struct Udp;\n",
             "net/dispatch.rs" => "mod queue;\npub struct Plain;\nfn h() { self::queue::q(); }\n",
             "net/dispatch/queue.rs" => "pub fn q() {}\n",
             "user.rs" => "",
             "x.rs" => "use crate::net::dispatch::queue::JobQueue;\nuse crate::net::dispatch::Plain;\n" \
                       "use crate::net::Shared;\n")
    assert_equal ["net/dispatch.rs -> net/dispatch/queue.rs", "net/tcp.rs -> net/udp.rs",
                  "net/tcp.rs -> top.rs", "x.rs -> net/dispatch.rs", "x.rs -> net/dispatch/queue.rs",
                  "x.rs -> net/mod.rs"], edges(g)
  end

  def test_rust_comments_strings_and_test_modules_are_not_imports
    g = rust("lib.rs" => "mod a;\nmod b;\n",
             "b.rs" => "pub struct B;\n",
             "a.rs" => <<~RUST)
               // crate::b::B is mentioned here only
               /* use crate::b::B; /* nested */ crate::b::x() */
               /// see [`crate::b::B`]
               pub const S: &str = "crate::b::B";
               pub const R: &str = r#"use crate::b::B; "quoted""#;
               pub const C: char = '"';
               pub fn f<'a>(s: &'a str) -> &'a str { s }

               #[cfg(test)]
               mod tests {
                   use super::*;
                   use crate::b::B;
                   #[test]
                   fn t() { let _ = crate::b::B; }
               }

               #[cfg(test)]
               #[allow(dead_code)]
               fn helper() { crate::b::helper() }
             RUST
    assert_empty edges(g)
  end

  def test_rust_facade_reexports_are_followed_and_do_not_close_circles
    g = rust("lib.rs" => "mod a;\nmod b;\npub use a::A;\npub use b::{B as Bee};\npub fn helper() {}\n",
             "a.rs" => "pub struct A;\npub fn f() { crate::helper() }\n",
             "b.rs" => "use crate::A;\npub struct B;\n")
    # crate::A is a.rs (followed through lib.rs); crate::helper is lib.rs
    # itself, upward from a child, so lib.rs's `pub use a::A` closes nothing
    assert_equal ["b.rs -> a.rs"], edges(g)
    assert_equal({ "a.rs" => ["lib.rs"] }, g.upward.reject { |_, v| v.empty? })
    assert_empty g.circle_lines
  end

  def test_rust_reexport_circle_is_still_found_between_siblings
    g = rust("lib.rs" => "mod a;\nmod b;\npub use a::A;\npub use b::B;\n",
             "a.rs" => "use crate::B;\npub struct A;\n",
             "b.rs" => "use super::A;\npub struct B;\n")
    assert_equal ["a.rs -> b.rs -> a.rs"], g.circle_lines
  end

  def test_ruby_two_and_three_file_circles
    g = ruby("x.rb" => "require \"y\"\n", "y.rb" => "require_relative \"x\"\n",
             "t/a.rb" => "require \"t/b\"\n", "t/b.rb" => "require_relative \"c\"\n",
             "t/c.rb" => "def go\n  require_relative \"../t/a\"\nend\n")
    assert_equal ["t/a.rb -> t/b.rb -> t/c.rb -> t/a.rb", "x.rb -> y.rb -> x.rb"], g.circle_lines
  end

  def test_ruby_comments_heredocs_and_outside_requires_are_not_imports
    g = ruby("a.rb" => <<~RUBY, "b.rb" => "require \"a\"\n")
      require "json"
      require "rack" # a gem, not in lib
      # require "b"
      =begin
      require "b"
      =end
      TEXT = <<~DOC
        require "b"
      DOC
    RUBY
    assert_empty g.circle_lines
    assert_equal ["b.rb -> a.rb"], edges(g)
  end

  def test_ruby_acyclic_tree_has_no_circle
    g = ruby("a.rb" => "require \"lib/b\"\nrequire \"lib/c\"\n",
             "lib/b.rb" => "require_relative \"c\"\n", "lib/c.rb" => "")
    assert_empty g.circle_lines
    assert_equal ["a.rb -> lib/b.rb", "a.rb -> lib/c.rb", "lib/b.rb -> lib/c.rb"], edges(g)
  end

  def test_folder_circle_without_a_file_circle
    g = ruby("t/a/x.rb" => "require \"t/b/y\"\n", "t/b/y.rb" => "",
             "t/b/z.rb" => "require \"t/a/w\"\n", "t/a/w.rb" => "", "t/top.rb" => "require \"t/a/x\"\n")
    assert_empty g.circle_lines
    folders = g.folders("t/")
    assert_equal ["t/a/ -> t/b/ -> t/a/"], folders.circle_lines
    assert_equal ["t/a/ -> t/b/", "t/b/ -> t/a/", "t/top.rb -> t/a/"], edges(folders)
  end

  def test_top_level_files_are_nodes_of_their_own_between_folders
    g = rust("lib.rs" => "mod a;\nmod b;\nmod shared;\n", "a/mod.rs" => "mod q;\n", "b/mod.rs" => "mod r;\n",
             "a/q.rs" => "use crate::shared::S;\npub struct Q;\n",
             "b/r.rs" => "use crate::a::q::Q;\npub struct R;\n",
             "shared.rs" => "pub struct S;\n")
    assert_empty g.folders.circle_lines
    assert_equal ["a/ -> shared.rs", "b/ -> a/"], edges(g.folders)
  end

  # --- the real tree --------------------------------------------------------

  # Files first, then the folders they make up (top-level files stay
  # nodes of their own): dependencies between folders run one way too.
  def assert_no_circles(graph, base = "")
    [graph, graph.folders(base)].each do |g|
      circles = g.circle_lines
      assert circles.empty?, "import circles in #{g.name} (#{g.root}):\n  " + circles.join("\n  ")
    end
  end

  def test_engine_crate_has_no_import_circles
    assert_no_circles ImportGraph.rust(File.join(ROOT, "crates/tsubame-engine/src"), "tsubame-engine")
  end

  def test_bench_crate_has_no_import_circles
    assert_no_circles ImportGraph.rust(File.join(ROOT, "crates/tsubame-bench/src"), "tsubame-bench")
  end

  def test_native_binding_has_no_import_circles
    assert_no_circles ImportGraph.rust(File.join(ROOT, "ext/tsubame_native/src"), "tsubame_native")
  end

  def test_lib_has_no_require_circles
    assert_no_circles ImportGraph.ruby(File.join(ROOT, "lib"), "lib"), "tsubame/"
  end
end
