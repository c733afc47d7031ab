# frozen_string_literal: true

module Tsubame
  # The response headers an app may return. Rack 2.2's SPEC asks only that
  # they respond to #each and yield name/value pairs (Puma serves an Array
  # of pairs, or an empty Array); from Rack 3 on they must be a Hash.
  module ResponseHeaders
    module_function

    # Returns a Hash the engine takes. Under Rack 2, a name yielded twice
    # has its values joined with "\n", Rack 2's way of giving several.
    def normalize(headers, rack3)
      return headers if headers.is_a?(Hash)
      raise TypeError, "response headers must be a Hash under Rack 3 (got #{headers.class})" if rack3
      unless headers.respond_to?(:each)
        raise TypeError, "response headers must be a Hash or respond to #each (got #{headers.class})"
      end

      hash = {}
      headers.each do |name, value|
        hash[name] = hash.key?(name) ? "#{hash[name]}\n#{value}" : value
      end
      hash
    end
  end
end
