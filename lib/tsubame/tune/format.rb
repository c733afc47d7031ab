# frozen_string_literal: true

module Tsubame
  module Tune
    # How `tsubame tune` writes rates and latencies, in every output.
    module Format
      module_function

      # 12.5, 980, 12,300
      def rate(value)
        return format("%.1f", value) if value < 100

        format("%.0f", value).reverse.scan(/\d{1,3}/).join(",").reverse
      end

      # 0.85 ms, 12.3 ms, 250 ms, 1.2 s; "-" for nothing.
      def ms(value)
        return "-" if value.nil?
        return "#{format("%.2f", value / 1000.0).sub(/\.?0+\z/, "")} s" if value >= 1000
        return format("%.0f ms", value) if value >= 100
        return format("%.1f ms", value) if value >= 10

        format("%.2f ms", value)
      end
    end
  end
end
