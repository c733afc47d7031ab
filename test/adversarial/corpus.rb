# frozen_string_literal: true

require "yaml"

# The adversarial request corpus (test/adversarial/*.yml), loaded and
# checked for typos; used by corpus_test.rb and compare_puma.rb.
module AdversarialCorpus
  # One corpus entry; the format is described in docs/RELIABILITY.md.
  Case = Struct.new(:category, :name, :why, :bytes, :statuses, :after, :app_saw, :close_write, :head,
                    keyword_init: true)

  # Reads the YAML files: `send` is Latin-1 text (each character one
  # byte, so "\xC3\xA9" is the two bytes of UTF-8 é) with {{TEXT*N}} for N
  # copies of TEXT.
  module Loader
    KEYS = %w[name why send expect then app_saw close_write head].freeze
    SAW_KEYS = %w[method path query body uri protocol server_name server_port content_length headers].freeze

    # Innermost first, so {{a{{b*2}}*3}} is "abbabbabb".
    def self.expand(text)
      loop do
        expanded = text.gsub(/\{\{((?:(?!\{\{).)*?)\*(\d+)\}\}/m) { Regexp.last_match(1) * Integer(Regexp.last_match(2), 10) }
        return expanded if expanded == text

        text = expanded
      end
    end

    def self.bytes(text)
      expand(text).encode(Encoding::ISO_8859_1).b
    end

    def self.expand_saw(value)
      case value
      when String then expand(value)
      when Hash then value.transform_values { |v| expand_saw(v) }
      else value
      end
    end

    def self.load_case(category, entry)
      unknown = entry.keys - KEYS
      raise ArgumentError, "#{category}/#{entry["name"]}: unknown keys #{unknown}" unless unknown.empty?
      raise ArgumentError, "#{category}: a case needs name, why, send and expect" unless (%w[name why send expect] - entry.keys).empty?

      expect = entry["expect"]
      statuses = expect == "closed" ? [] : Array(expect).map { |s| Integer(s) }
      after = entry["then"] || (statuses.empty? || statuses.last >= 400 ? "closed" : "open")
      raise ArgumentError, "#{entry["name"]}: then must be open or closed" unless %w[open closed].include?(after)

      saw = entry.fetch("app_saw", [])
      saw = [saw] if saw.is_a?(Hash)
      saw = saw.map do |request|
        bad = request.keys - SAW_KEYS
        raise ArgumentError, "#{entry["name"]}: unknown app_saw keys #{bad}" unless bad.empty?

        { "query" => "", "body" => "" }.merge(expand_saw(request))
      end
      Case.new(category: category, name: entry["name"], why: entry["why"], bytes: bytes(entry["send"]),
               statuses: statuses, after: after, app_saw: saw, close_write: entry["close_write"] == true,
               head: entry["head"] == true)
    end

    def self.cases
      @cases ||= Dir[File.join(__dir__, "*.yml")].sort.flat_map do |file|
        category = File.basename(file, ".yml")
        YAML.safe_load(File.read(file), filename: file).map { |entry| load_case(category, entry) }
      end
    end
  end

  def self.cases
    Loader.cases
  end
end
