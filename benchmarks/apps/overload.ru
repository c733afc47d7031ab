# frozen_string_literal: true

# /fast answers at once; /io waits like a call to a slow upstream
# (?ms=N, default 500); /up is an app-level health check for servers that
# have no engine-level one.
run lambda { |env|
  case env["PATH_INFO"]
  when "/io"
    sleep Integer(env["QUERY_STRING"][/ms=(\d+)/, 1] || 500) / 1000.0
    [200, { "content-type" => "text/plain" }, ["io"]]
  when "/slow" then sleep 60; [200, { "content-type" => "text/plain" }, ["slow"]]
  else [200, { "content-type" => "text/plain" }, ["ok"]]
  end
}
