# frozen_string_literal: true

module Tsubame
  # The Prometheus text exposition format (version 0.0.4): metric families
  # with their HELP and TYPE, samples grouped under them.
  class PrometheusText
    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    Family = Struct.new(:type, :help, :samples)

    def initialize
      @families = {}
    end

    # One sample of a counter or gauge.
    def add(name, type, help, labels, value)
      return if value.nil?

      family(name, type, help).samples << [name, labels, value]
    end

    # A histogram from cumulative bucket counts (the last is +Inf), the
    # bounds they belong to (seconds) and the sum.
    def histogram(name, help, labels, bounds, cumulative, sum)
      return unless cumulative

      samples = family(name, "histogram", help).samples
      bounds.each_with_index do |bound, i|
        samples << ["#{name}_bucket", labels.merge("le" => number(bound)), cumulative[i]]
      end
      samples << ["#{name}_bucket", labels.merge("le" => "+Inf"), cumulative.last]
      samples << ["#{name}_sum", labels, sum]
      samples << ["#{name}_count", labels, cumulative.last]
    end

    def to_s
      out = +""
      @families.each do |name, family|
        out << "# HELP #{name} #{family.help}\n# TYPE #{name} #{family.type}\n"
        family.samples.each do |sample_name, labels, value|
          out << sample_name << label_text(labels) << " " << number(value) << "\n"
        end
      end
      out
    end

    private

    def family(name, type, help)
      @families[name] ||= Family.new(type, help, [])
    end

    def label_text(labels)
      return "" if labels.empty?

      "{#{labels.map { |key, value| "#{key}=\"#{escape(value.to_s)}\"" }.join(",")}}"
    end

    def escape(value)
      value.gsub("\\", "\\\\\\\\").gsub("\"", "\\\\\"").gsub("\n", "\\\\n")
    end

    def number(value)
      case value
      when Integer then value.to_s
      when Float then value.finite? ? format("%.9g", value) : (value.nan? ? "NaN" : value.positive? ? "+Inf" : "-Inf")
      else value.to_s
      end
    end
  end
end
