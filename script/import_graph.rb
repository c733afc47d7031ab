# frozen_string_literal: true

# The file-level import graph of Tsubame's Rust crates and of lib/, and the
# circles in it. Used by test/layout_test.rb; run it directly to print the
# graphs and their circles:
#
#   ruby script/import_graph.rb            # circles only
#   ruby script/import_graph.rb --edges    # every edge too
#
# Exits 1 when any circle exists. Plain text parsing, no compiler: it needs
# neither cargo nor the built server.
#
# Rust rules (one crate's src/ directory at a time):
#
# * Module paths come from file names: lib.rs (or main.rs when there is no
#   lib.rs) is the crate root, a.rs and a/mod.rs are `a`, a/b.rs is `a::b`.
#   `#[path]` attributes are not followed. When a crate has both lib.rs and
#   main.rs, main.rs is a separate binary crate that can only use the
#   library, never be used by it, so it cannot be on a circle and is left
#   out.
# * An import is a `use` tree (grouped trees such as `use crate::{a::B, c}`
#   are expanded) or a path in code (`crate::a::f()`, `super::x::Y`,
#   `self::x`, or `x::Y` where `x` is a child module of the current one).
#   Paths into other crates and std are ignored.
# * A path resolves to the most specific module that has a file:
#   `crate::dispatch::queue::JobQueue` is dispatch/queue.rs (or
#   dispatch/queue/mod.rs); `crate::dispatch::JobQueue` is dispatch.rs (or
#   dispatch/mod.rs); `crate::Foo` is the crate root.
# * `mod x;` declarations are not edges: declaring a child is not depending
#   on it.
# * Comments and the contents of string and char literals are blanked
#   before anything is read. Items under `#[cfg(test)]` (the `mod tests`
#   blocks, and any other test-only item) are dropped: their `use
#   super::*` is not layering.
#
# Facades. A facade is a file that declares child modules: the crate root,
# a mod.rs, or an a.rs next to an a/ directory. It usually re-exports its
# children (`pub use queue::JobQueue`), and children reach items through it
# (`crate::JobQueue`, `super::Thing`). Taken literally this makes a trivial
# circle between every facade and every child that names anything through
# it. The rule here, in three parts:
#
# 1. A path that lands on a facade and names an item the facade re-exports
#    by name (`pub use`, `pub(crate) use`, with `as` renames) is followed to
#    where the re-export points, so `crate::JobQueue` is an edge to
#    queue.rs, not to lib.rs: the dependency is on the file that defines
#    the item. (Glob re-exports, `pub use x::*`, are not followed.)
# 2. A facade's `pub use` of something inside its own subtree is part of
#    declaring its face, like `mod x;`, and is not an edge.
# 3. What is left pointing at a facade from inside its subtree (a child
#    using an item the facade itself defines, or a glob re-export) is an
#    "upward" edge: it is kept and printed, but it cannot close a circle.
#    A parent declares its children; a child looking a name up in its
#    parent is scope, not layering (the same reason `use super::*` in
#    tests is ignored).
#
# Ruby rules (lib/): `require "x/y"` is an edge to lib/x/y.rb when that file
# exists (anything else, gems and stdlib, is ignored); `require_relative
# "y"` resolves against the requiring file's directory. Lines are read
# outside comments, =begin/=end blocks and heredoc bodies.
#
# Circles: every strongly connected component of more than one file is
# reported as a set of simple circles that together cover every edge inside
# it (for each edge u -> v not yet covered, u -> v and then the shortest way
# back from v to u inside the component).

require "strscan"

module ImportGraph
  # `edges` and `upward` map a file (relative to `root`) to the sorted files
  # it imports; only `edges` take part in circles.
  class Graph
    attr_reader :name, :root, :files, :edges, :upward

    def initialize(name, root, files)
      @name = name
      @root = root
      @files = files.sort
      @edges = Hash.new { |h, k| h[k] = [] }
      @upward = Hash.new { |h, k| h[k] = [] }
    end

    def add(from, to, upward: false)
      return if from == to

      list = upward ? @upward[from] : @edges[from]
      list << to unless list.include?(to)
    end

    # Each circle is an Array of files, first file repeated at the end.
    def circles
      components.flat_map { |component| circles_in(component) }
    end

    def circle_lines
      circles.map { |c| c.join(" -> ") }
    end

    # The same graph one level up: every file below `base` in a subfolder
    # stands for that subfolder ("base/dir/"), files directly in `base` and
    # outside it stay themselves. A circle here is two folders that import
    # each other, even when no two files do.
    def folders(base = "")
      node = lambda do |file|
        rest = file.delete_prefix(base)
        next file if rest == file && !base.empty?

        dir, sep, = rest.partition("/")
        sep.empty? ? file : "#{base}#{dir}/"
      end
      graph = Graph.new("#{@name} folders", @root, @files.map(&node).uniq)
      @edges.each { |from, tos| tos.each { |to| graph.add(node.call(from), node.call(to)) } }
      graph
    end

    def edge_lines
      lines = []
      @files.each do |f|
        @edges[f].sort.each { |t| lines << "#{f} -> #{t}" }
        @upward[f].sort.each { |t| lines << "#{f} -> #{t} (upward, not counted)" }
      end
      lines
    end

    private

    # Tarjan's strongly connected components, iterative, in file order.
    def components
      index = {}
      low = {}
      on_stack = {}
      stack = []
      counter = 0
      found = []
      @files.each do |start|
        next if index.key?(start)

        work = [[start, 0]]
        index[start] = low[start] = counter
        counter += 1
        stack << start
        on_stack[start] = true
        until work.empty?
          node, i = work.last
          succ = @edges[node].sort
          if i < succ.length
            work.last[1] += 1
            nxt = succ[i]
            if !index.key?(nxt)
              index[nxt] = low[nxt] = counter
              counter += 1
              stack << nxt
              on_stack[nxt] = true
              work << [nxt, 0]
            elsif on_stack[nxt]
              low[node] = [low[node], index[nxt]].min
            end
          else
            work.pop
            low[work.last[0]] = [low[work.last[0]], low[node]].min unless work.empty?
            next unless low[node] == index[node]

            component = []
            loop do
              member = stack.pop
              on_stack.delete(member)
              component << member
              break if member == node
            end
            found << component.sort if component.length > 1
          end
        end
      end
      found.sort
    end

    def circles_in(component)
      inside = component.to_h { |f| [f, true] }
      covered = {}
      result = []
      component.each do |from|
        @edges[from].sort.each do |to|
          next unless inside[to]
          next if covered[[from, to]]

          back = shortest_path(to, from, inside)
          circle = [from] + back
          circle.each_cons(2) { |a, b| covered[[a, b]] = true }
          result << circle
        end
      end
      result
    end

    # Breadth-first, neighbours in sorted order, so the answer is stable.
    def shortest_path(from, to, inside)
      previous = { from => nil }
      queue = [from]
      until queue.empty?
        node = queue.shift
        break if node == to

        @edges[node].sort.each do |nxt|
          next unless inside[nxt]
          next if previous.key?(nxt)

          previous[nxt] = node
          queue << nxt
        end
      end
      path = [to]
      path.unshift(previous[path.first]) while previous[path.first]
      path
    end
  end

  # Replaces every character but newlines, so line numbers survive.
  def self.blank(text)
    text.gsub(/[^\n]/, " ")
  end

  # --- Rust -----------------------------------------------------------------

  module Rust
    # Rust source with comments removed and string/char literal contents
    # blanked (the quotes stay, so the code around still reads the same).
    def self.strip(src)
      ss = StringScanner.new(src)
      out = +""
      until ss.eos?
        if (t = ss.scan(%r{//[^\n]*}))
          out << ImportGraph.blank(t)
        elsif ss.check(%r{/\*})
          out << ImportGraph.blank(block_comment(ss))
        elsif (t = ss.scan(/b?r(#*)"/))
          body = ss.scan_until(/"#{ss[1]}/) || ss.rest.tap { ss.terminate }
          out << "\"" << ImportGraph.blank(t + body)[2..] << "\""
        elsif (t = ss.scan(/b?"(?:[^"\\]|\\.)*"?/m))
          out << "\"" << ImportGraph.blank(t)[2..] << "\""
        elsif (t = ss.scan(/b?'(?:[^'\\\n]|\\(?:x\h\h|u\{\h+\}|.))'/))
          out << "' '" << (" " * (t.length - 3))
        elsif (t = ss.scan(/\w+/))
          out << t
        else
          out << ss.getch
        end
      end
      out
    end

    def self.block_comment(ss)
      start = ss.pos
      ss.pos += 2
      depth = 1
      while depth.positive? && !ss.eos?
        if ss.scan(%r{/\*})
          depth += 1
        elsif ss.scan(%r{\*/})
          depth -= 1
        else
          ss.getch
        end
      end
      ss.string[start...ss.pos]
    end

    # Index just past the `}` matching the `{` at `open`, or the end.
    def self.match_brace(text, open)
      depth = 0
      i = open
      while i < text.length
        case text[i]
        when "{" then depth += 1
        when "}"
          depth -= 1
          return i + 1 if depth.zero?
        end
        i += 1
      end
      text.length
    end

    # Blanks every item under `#[cfg(test)]` (with any attributes between):
    # up to its `;` or through its braced body, whichever comes first.
    def self.drop_test_items(text)
      text = text.dup
      pos = 0
      while (m = /#\[cfg\(test\)\]/.match(text, pos))
        i = m.end(0)
        stop = nil
        while i < text.length
          case text[i]
          when ";"
            stop = i + 1
          when "{"
            stop = match_brace(text, i)
          when "#"
            # another attribute: skip its brackets so `[` `]` do not confuse
            close = text.index("]", i)
            i = close ? close + 1 : text.length
            next
          end
          break if stop

          i += 1
        end
        stop ||= text.length
        text[m.begin(0)...stop] = ImportGraph.blank(text[m.begin(0)...stop])
        pos = stop
      end
      text
    end

    # Expands a use tree (the text between `use` and `;`) into
    # [segments, name] pairs; name is the alias or the last segment.
    # `a::{self, b::C as D, *}` gives [a], [a b C] named D, and [a] for the
    # glob (named "*").
    def self.expand_use(tree)
      s = tree.gsub(/\s+as\s+(\w+)/, '@\1').gsub(/\s+/, "").delete_prefix("::")
      out = []
      parse_tree(s, 0, [], out, false)
      out
    end

    def self.parse_tree(s, i, prefix, out, in_group)
      segs = []
      loop do
        if s[i] == "{"
          i += 1
          until s[i].nil? || s[i] == "}"
            i = parse_tree(s, i, prefix + segs, out, true)
            i += 1 if s[i] == ","
          end
          return i + 1
        elsif s[i] == "*"
          out << [prefix + segs, "*"]
          return i + 1
        end
        ident = s[i..][/\A\w+/]
        return i if ident.nil?

        i += ident.length
        if ident == "self" && segs.empty? && in_group
          out << [prefix, prefix.last]
        else
          segs << ident
          if s[i, 2] == "::"
            i += 2
            next
          end
          name = ident
          if s[i] == "@"
            name = s[(i + 1)..][/\A\w+/]
            i += 1 + name.length
          end
          out << [prefix + segs, name]
        end
        return i
      end
    end

    USE = /\b(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);/
    INLINE_MOD = /\b(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+(\w+)\s*\{/
    CODE_PATH = /(?<![\w:])(\w+(?:::\w+)+)/

    # One source file, read: its `use` trees and code paths, each with the
    # module path it was written in (inline `mod x { }` blocks add a level).
    Import = Struct.new(:segs, :name, :modpath, :pub_use)

    def self.imports(text, modpath)
      found = []
      text = drop_test_items(text)
      # inline modules first, each read with its own module path
      while (m = INLINE_MOD.match(text))
        open = m.end(0) - 1
        stop = match_brace(text, open)
        found.concat(imports(text[(open + 1)...(stop - 1)] || "", modpath + [m[1]]))
        text = text[0...m.begin(0)] + ImportGraph.blank(text[m.begin(0)...stop]) + text[stop..]
      end
      text = text.gsub(USE) do
        pub_use = !Regexp.last_match(1).nil?
        expand_use(Regexp.last_match(2)).each do |segs, name|
          found << Import.new(segs, name, modpath, pub_use)
        end
        ImportGraph.blank(Regexp.last_match(0))
      end
      text.scan(CODE_PATH) do |(path)|
        segs = path.split("::")
        found << Import.new(segs, segs.last, modpath, false)
      end
      found
    end

    # The graph of one crate; `src` is its src/ directory.
    class Crate
      attr_reader :graph

      def initialize(src, name = File.basename(File.dirname(src)))
        @src = src
        @modules = {}  # module path (Array) => file
        @modpath = {}  # file => module path
        all = Dir.glob("**/*.rs", base: src).sort
        root = all.include?("lib.rs") ? "lib.rs" : "main.rs"
        files = all.reject { |f| %w[lib.rs main.rs].include?(f) && f != root }
        files.each do |f|
          path = f == root ? [] : f.delete_suffix(".rs").split("/")
          path.pop if path.last == "mod"
          next if @modules.key?(path) # a.rs and a/mod.rs both: rustc refuses

          @modules[path] = f
          @modpath[f] = path
        end
        @graph = Graph.new(name, src, @modules.values)
        @imports = @modpath.to_h do |f, path|
          [f, Rust.imports(Rust.strip(File.read(File.join(src, f))), path)]
        end
        @reexports = build_reexports
        build_edges
      end

      private

      # file => { name => Import } for named `pub use` items.
      def build_reexports
        @imports.to_h do |f, list|
          [f, list.select(&:pub_use).reject { |imp| imp.name == "*" }.to_h { |imp| [imp.name, imp] }]
        end
      end

      def build_edges
        @imports.each do |file, list|
          own = @modpath[file]
          list.each do |imp|
            target = resolve(imp.segs, imp.modpath)
            next if target.nil? || target == file

            tpath = @modpath[target]
            below = tpath.length > own.length && tpath[0, own.length] == own
            next if imp.pub_use && below # rule 2: a facade's face

            above = tpath.length < own.length && own[0, tpath.length] == tpath
            @graph.add(file, target, upward: above) # rule 3
          end
        end
      end

      # The file a path points into, or nil when it leaves the crate.
      def resolve(segs, modpath, depth = 0)
        full = absolute(segs, modpath)
        return nil if full.nil?

        k = full.length
        k -= 1 until @modules.key?(full[0, k])
        file = @modules[full[0, k]]
        rest = full[k..]
        # rule 1: follow a named re-export out of the file
        if !rest.empty? && depth < 8 && (re = @reexports[file][rest.first])
          through = resolve(re.segs + rest[1..], re.modpath, depth + 1)
          return through if through
        end
        file
      end

      def absolute(segs, modpath)
        case segs.first
        when "crate"
          segs[1..]
        when "self"
          modpath + segs[1..]
        when "super"
          base = modpath.dup
          rest = segs.dup
          while rest.first == "super"
            return nil if base.empty?

            base.pop
            rest.shift
          end
          base + rest
        else
          # a bare path naming a child module of the current one
          @modules.key?(modpath + [segs.first]) ? modpath + segs : nil
        end
      end
    end
  end

  def self.rust(src, name = nil)
    name ? Rust::Crate.new(src, name).graph : Rust::Crate.new(src).graph
  end

  # --- Ruby -----------------------------------------------------------------

  module Ruby
    REQUIRE = /\A\s*(require|require_relative)\b\s*\(?\s*(["'])([^"'#]+)\2/
    HEREDOC = /<<[~-]?(["'`]?)([A-Za-z_]\w*)\1/

    # [kind, path] for each require line outside comments, =begin blocks
    # and heredoc bodies.
    def self.requires(src)
      found = []
      in_doc = false
      heredocs = []
      src.each_line do |line|
        if in_doc
          in_doc = false if line.start_with?("=end")
          next
        end
        unless heredocs.empty?
          heredocs.shift if line.strip == heredocs.first
          next
        end
        if line.start_with?("=begin")
          in_doc = true
          next
        end
        code = line.sub(/\s#.*\z/m, "") # a trailing comment (rough: a # in a string ends it too)
        next if code.lstrip.start_with?("#")

        if (m = REQUIRE.match(code))
          found << [m[1], m[3]]
        end
        code.scan(HEREDOC) { |(_, id)| heredocs << id }
      end
      found
    end

    def self.graph(lib, name = "lib")
      files = Dir.glob("**/*.rb", base: lib).sort
      known = files.to_h { |f| [f, true] }
      graph = Graph.new(name, lib, files)
      files.each do |f|
        requires(File.read(File.join(lib, f))).each do |kind, path|
          path += ".rb" unless path.end_with?(".rb")
          target = if kind == "require_relative"
                     File.expand_path(path, File.join(lib, File.dirname(f)))
                         .delete_prefix(File.expand_path(lib) + "/")
                   else
                     path
                   end
          graph.add(f, target) if known[target]
        end
      end
      graph
    end
  end

  def self.ruby(lib, name = "lib")
    Ruby.graph(lib, name)
  end

  # The four graphs of the Tsubame tree at `root`.
  def self.project(root)
    [
      rust(File.join(root, "crates/tsubame-engine/src"), "tsubame-engine"),
      rust(File.join(root, "crates/tsubame-bench/src"), "tsubame-bench"),
      rust(File.join(root, "ext/tsubame_native/src"), "tsubame_native"),
      ruby(File.join(root, "lib"), "lib")
    ]
  end
end

if $PROGRAM_NAME == __FILE__
  show_edges = ARGV.delete("--edges")
  root = ARGV.first || File.expand_path("..", __dir__)
  any = false
  ImportGraph.project(root).each do |graph|
    circles = graph.circle_lines + graph.folders(graph.name == "lib" ? "tsubame/" : "").circle_lines
    any ||= !circles.empty?
    puts "#{graph.name} (#{graph.root}): #{graph.files.length} files, " \
         "#{circles.empty? ? 'no circles' : "#{circles.length} circle(s)"}"
    graph.edge_lines.each { |l| puts "  #{l}" } if show_edges
    circles.each { |l| puts "  circle: #{l}" }
  end
  exit(any ? 1 : 0)
end
