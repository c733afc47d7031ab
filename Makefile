# make run   build and serve examples/demo on http://127.0.0.1:9292
# make test  build, then run the Rust and Ruby test suites (the Ruby suite
#            twice at once: Debian's Rack 2 and the vendored Rack 3)
# make test-rack3  the Ruby suite alone, under the vendored Rack 3
# make test-tune-replay  tsubame tune against an app of known capacity, and
#             a 30 s replay of its recommendation (about 90 s)
# make chaos  fault tests: workers killed and frozen, app errors, clients
#             vanishing, a full upload disk, descriptors running out
# make soak   a million mixed requests in cluster mode; RSS, fds, threads
# make fuzz   libFuzzer targets over request parsing and response heads
# make h2spec  the HTTP/2 conformance suite alone (also part of make test)
# make fleet   three instances behind HAProxy through restarts at 2,000 req/s;
#             fails on a lost request or p99 > 3x (benchmark)
# make gem     the source gem (built with cargo on install)
# make native-gem  the platform gem for this Ruby (no Rust needed to install)
# make bench-peers  Tsubame beside Puma, the ceiling server, Iodine, Itsi
# make bench-app-share  a Rails request's CPU: the app's and the server's, vs Puma
# make bench-files  files (to_path, --public) beside nginx and Puma
# make bench-websocket  rack.upgrade WebSockets beside faye on Puma, Iodine
# make bench-cable      ActionCable: adapter tsubame (-w 2) vs async, redis, Puma

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# rustup installs here and does not always put it on PATH for non-login shells.
export PATH := $(HOME)/.cargo/bin:/usr/local/go/bin:$(PATH)

APT_PACKAGES := ruby ruby-dev libclang-dev clang ruby-rack ruby-minitest rake \
                ruby-rack-test puma wrk apache2-utils curl thin ruby-webrick \
                openssl nghttp2-client haproxy nginx ruby-railties ruby-actionpack \
                ruby-actioncable ruby-websocket-driver ruby-nio4r python3-websockets python3-h2 \
                systemd zstd prometheus chromium testssl.sh redis-server ruby-redis

# The crypto library under rustls, session tickets and the WebSocket
# handshake: aws-lc (aws-lc-rs, the default: its RSA signatures are
# faster than ring's) or ring (TLS_CRYPTO=ring make build). See
# crates/tsubame-engine/src/crypto.rs and docs/TLS_HTTP2.md.
TLS_CRYPTO ?= aws-lc
CRYPTO_FEATURES := --no-default-features --features tsubame_native/$(TLS_CRYPTO)

TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
CARGO_SO := $(TARGET_DIR)/release/libtsubame_native.so
NATIVE_SO := lib/tsubame/tsubame_native.so
CARGO_BENCH := $(TARGET_DIR)/release/tsubame-bench
BENCH_BIN := lib/tsubame/tsubame-bench

# test/tune/replay_test.rb (tsubame tune against an app of known capacity,
# then a 30 s replay: about 90 s) has its own target, make test-tune-replay,
# to keep make test under 15 minutes.
SLOW_TESTS := test/tune/replay_test.rb
RUBY_TESTS := ruby -w -Ilib -Itest -e 'slow = ARGV.dup; ARGV.clear; Dir["test/**/*_test.rb"].sort.reject { |f| f.start_with?("test/realtime/") || slow.include?(f) }.each { |f| require File.expand_path(f) }' $(SLOW_TESTS)
# ActionCable with a thousand clients: alone after the two suites (beside
# them, its timings measure the other suite), and under Debian's Rack 2
# only, since Rails 6.1 (actionpack) requires Rack 2.
REALTIME_TESTS := ruby -w -Ilib -Itest -e 'Dir["test/realtime/*_test.rb"].sort.each { |f| require File.expand_path(f) }'

# Rack 3.2.7, vendored unmodified beside the project (tests only: the gem
# itself uses whatever Rack the user installs). TSUBAME_TEST_RACK_LIB puts
# it first for the tests and every server they start (test/test_helper.rb).
# Beside the checkout first; a clone made elsewhere (CI's) finds the
# machine's shared folder; RACK3_LIB=DIR names another.
RACK3_CANDIDATES := ../shared/vendor/rack-3.2.7/lib /work/shared/vendor/rack-3.2.7/lib /farm/in/shared/vendor/rack-3.2.7/lib
RACK3_LIB ?= $(or $(patsubst %/rack.rb,%,$(firstword $(wildcard $(addsuffix /rack.rb,$(RACK3_CANDIDATES))))),../shared/vendor/rack-3.2.7/lib)
RACK3_MISSING := the vendored Rack 3 is missing: no rack.rb in $(RACK3_CANDIDATES) (see ../shared/vendor/README.md)
TEST_LOGS := $(TARGET_DIR)/test-logs

CHAOS_TESTS := ruby -w -Ilib -Itest -e 'Dir["test/chaos/*_chaos.rb"].sort.each { |f| require File.expand_path(f) }'

# Seconds each fuzz target runs in `make fuzz` (FUZZ_SECONDS=600 make fuzz).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := request chunked response connection
FUZZ_DIR := crates/tsubame-engine/fuzz

.PHONY: deps build run test test-rack3 test-tune-replay chaos soak fuzz bench bench-cluster bench-io bench-tls bench-tls-handshakes testssl bench-peers bench-app-share bench-files bench-websocket bench-cable bench-tune-replay fleet gem native-gem h2spec h2spec-install

# Installs only what is missing, so a second run does nothing. apt is run
# at most once (one update, one install) and never asks questions.
deps:
	@missing=""; \
	for pkg in $(APT_PACKAGES); do \
	  dpkg -s "$$pkg" 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$pkg"; \
	done; \
	if [ -n "$$missing" ]; then \
	  sudo=""; \
	  if [ "$$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi; \
	  echo "deps: installing$$missing"; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing </dev/null; \
	fi
	@command -v cargo >/dev/null || { \
	  echo "deps: cargo not found on PATH or in $(HOME)/.cargo/bin; install Rust with rustup (https://rustup.rs)" >&2; \
	  exit 1; }

# cargo is incremental, so it is always asked; the copy only happens when
# the library changed. Copy-then-rename so a running server that has the
# old library mapped is not corrupted.
build: deps
	cargo build --release -p tsubame_native -p tsubame-bench $(CRYPTO_FEATURES)
	@if [ ! -e $(NATIVE_SO) ] || [ $(CARGO_SO) -nt $(NATIVE_SO) ]; then \
	  cp $(CARGO_SO) $(NATIVE_SO).tmp && mv -f $(NATIVE_SO).tmp $(NATIVE_SO); \
	  echo "build: updated $(NATIVE_SO)"; \
	fi
	@if [ ! -e $(BENCH_BIN) ] || [ $(CARGO_BENCH) -nt $(BENCH_BIN) ]; then \
	  cp $(CARGO_BENCH) $(BENCH_BIN).tmp && mv -f $(BENCH_BIN).tmp $(BENCH_BIN); \
	  echo "build: updated $(BENCH_BIN)"; \
	fi

run: deps build
	exe/tsubame -b tcp://127.0.0.1:9292 examples/demo/config.ru

# Every suite runs even if another fails, so one run reports everything;
# the exit status is still non-zero if any failed. The Ruby suite runs
# under Rack 2 and Rack 3 at the same time (each mostly waits on its
# servers, and one after the other would take about 13 minutes): each
# writes its own log, printed whole once both are done. When anything
# failed, the last lines name what (a CI page that shows only the end of
# the output then still says which test it was).
test: deps build h2spec-install
	@status=0; \
	mkdir -p $(TEST_LOGS); \
	cargo test -p tsubame-engine -p tsubame-bench --release --features tsubame-engine/fuzzing 2>&1 | tee $(TEST_LOGS)/cargo.log; \
	[ "$${PIPESTATUS[0]}" -eq 0 ] || status=1; \
	echo "Ruby suite under Rack 2 and Rack 3 at once: $(TEST_LOGS)/ruby-rack2.log, $(TEST_LOGS)/ruby-rack3.log"; \
	$(RUBY_TESTS) >$(TEST_LOGS)/ruby-rack2.log 2>&1 & rack2=$$!; \
	if [ -f $(RACK3_LIB)/rack.rb ]; then \
	  TSUBAME_TEST_RACK_LIB=$(RACK3_LIB) $(RUBY_TESTS) >$(TEST_LOGS)/ruby-rack3.log 2>&1 & rack3=$$!; \
	else \
	  echo "test: $(RACK3_MISSING)" | tee $(TEST_LOGS)/ruby-rack3.log >&2; rack3=; \
	fi; \
	wait $$rack2 || status=1; \
	if [ -n "$$rack3" ]; then wait $$rack3 || status=1; else status=1; fi; \
	echo "=== Ruby suite, Debian's Rack 2 ==="; cat $(TEST_LOGS)/ruby-rack2.log; \
	echo "=== Ruby suite, Rack 3 ($(RACK3_LIB)) ==="; cat $(TEST_LOGS)/ruby-rack3.log; \
	echo "=== ActionCable (Rails 6.1, Debian's Rack 2) ==="; \
	$(REALTIME_TESTS) 2>&1 | tee $(TEST_LOGS)/realtime.log; \
	[ "$${PIPESTATUS[0]}" -eq 0 ] || status=1; \
	if [ $$status -ne 0 ]; then \
	  echo "=== What failed (the logs above in full: $(TEST_LOGS)) ==="; \
	  grep -h -A2 -E "^test .* FAILED|panicked at" $(TEST_LOGS)/cargo.log || true; \
	  for log in ruby-rack2 ruby-rack3 realtime; do \
	    grep -q -E "^(Failure|Error):" $(TEST_LOGS)/$$log.log 2>/dev/null || continue; \
	    echo "--- $$log"; grep -h -A4 -E "^(Failure|Error):" $(TEST_LOGS)/$$log.log | cut -c1-400; \
	  done; \
	fi; \
	exit $$status

test-tune-replay: deps build
	ruby -w -Ilib -Itest $(SLOW_TESTS)

test-rack3: deps build h2spec-install
	@[ -f $(RACK3_LIB)/rack.rb ] || { echo "test-rack3: $(RACK3_MISSING)" >&2; exit 1; }
	TSUBAME_TEST_RACK_LIB=$(RACK3_LIB) $(RUBY_TESTS)

# Not part of `make test`: these kill processes, mount a tmpfs (as root;
# skipped otherwise) and take a few minutes.
chaos: deps build
	$(CHAOS_TESTS)

soak: deps build
	ruby -w -Ilib test/soak/soak.rb

# cargo-fuzz needs the nightly toolchain; it is installed here when missing.
# Each target runs FUZZ_SECONDS; a crash stops the run with the input saved
# under $(FUZZ_DIR)/artifacts/.
fuzz: deps
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
	cd $(FUZZ_DIR) && for target in $(FUZZ_TARGETS); do \
	  cargo +nightly fuzz run "$$target" -O -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 || exit 1; \
	done

bench: deps build
	benchmarks/hello.sh

bench-cluster: deps build
	benchmarks/cluster.sh

# Fiber mode vs threads, Puma and Thin on I/O-bound endpoints, next to a
# no-Ruby floor (about 12 min).
bench-io: deps build
	cargo build --release -p tsubame-bench --example sleep_floor
	FLOOR=$(TARGET_DIR)/release/examples/sleep_floor benchmarks/io_bound.sh

bench-tls: deps build
	benchmarks/tls.sh

# New TLS connections per second (openssl s_time -new), Tsubame's cluster
# beside nginx on the same RSA and ECDSA certificates (docs/TLS_HTTP2.md).
bench-tls-handshakes: deps build
	benchmarks/tls_handshakes.sh

# Debian's testssl against an ssl:// bind (RSA and ECDSA certificates):
# fails on any finding of severity MEDIUM or above. Minutes per
# certificate, so not part of `make test` (docs/TLS_HTTP2.md).
testssl: deps build
	ruby -w -Ilib -Itest test/tls_audit/testssl.rb

# 1 MiB and 4 KiB files: Tsubame (to_path and --public) beside Debian's
# nginx and Puma. nginx is installed here only (not by `make deps`);
# files.sh starts its own nginx on a loopback port.
bench-files: deps build
	@dpkg -s nginx 2>/dev/null | grep -q '^Status: install ok installed' || { \
	  sudo=""; if [ "$$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nginx </dev/null; }
	benchmarks/files.sh

# rack.upgrade WebSockets beside faye-websocket on Puma and, with
# PEERS_DIR, Iodine: idle memory and threads, broadcast, echo.
bench-cable: deps build
	ruby benchmarks/cable.rb

bench-websocket: deps build
	@dpkg -s ruby-faye-websocket 2>/dev/null | grep -q '^Status: install ok installed' || { \
	  sudo=""; if [ "$$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ruby-faye-websocket </dev/null; }
	ruby benchmarks/websocket.rb

# Tsubame beside Puma, the ceiling server and locally built peers
# (PEERS_DIR, see docs/BENCHMARKS.md); SHAPE=hello|100k|upload|rails.
bench-peers: deps build
	benchmarks/peers.sh

# How much of a Rails request's CPU is the app's and how much the server's
bench-app-share: deps build
	benchmarks/app_share.sh

# Three Tsubame instances behind HAProxy at a steady 2,000 req/s through a
# rolling USR2 and a rolling TERM+start; fails (exit 1, with the figures)
# on any failed request or a restart's p99 above 3x the steady p99 (~2 min).
# Each setting can be overridden from the environment (ROUNDS=3 make fleet);
# benchmarks/fleet.sh alone runs the longer study (overload, Puma).
fleet: deps build
	PEER=$${PEER:-tsubame} RATE=$${RATE:-2000} THREADS=$${THREADS:-32} STEADY=$${STEADY:-30} \
	  OVERLOAD_S=$${OVERLOAD_S:-0} MAX_P99_RATIO=$${MAX_P99_RATIO:-3} benchmarks/fleet.sh

# $(call go_install,TARGET,PROGRAM,MODULE@VERSION): go install MODULE into
# GOPATH/bin once, unless PROGRAM is there or on PATH already.
define go_install
	@command -v go >/dev/null || { echo "$(1): go not found (the machine image has it in /usr/local/go/bin)" >&2; exit 1; }
	@gobin="$$(go env GOPATH)/bin"; \
	if [ ! -x "$$gobin/$(2)" ] && ! command -v $(2) >/dev/null; then \
	  echo "$(1): go install $(3)"; \
	  go install $(3); \
	fi
endef

# h2spec is a Go program: installed into GOPATH/bin once, with go install.
# test/h2/h2spec_test.rb finds it there (or through $$H2SPEC / PATH).
H2SPEC_VERSION := latest
h2spec-install: deps
	$(call go_install,h2spec-install,h2spec,github.com/summerwind/h2spec/cmd/h2spec@$(H2SPEC_VERSION))

# vegeta: the independent open-loop client of benchmarks/tune_replay.rb.
VEGETA_VERSION := v12.13.0
bench-tune-replay: deps build
	$(call go_install,bench-tune-replay,vegeta,github.com/tsenart/vegeta/v12@$(VEGETA_VERSION))
	ruby benchmarks/tune_replay.rb

h2spec: build h2spec-install
	ruby -w -Ilib -Itest test/h2/h2spec_test.rb

# The source gem: `gem install` builds the extension with cargo.
gem:
	gem build tsubame.gemspec

# The platform gem (tsubame-VERSION-x86_64-linux.gem): the extension and
# tsubame-bench built here, for this Ruby's minor version; `gem install`
# compiles nothing and needs no Rust (docs/DEPLOY.md).
native-gem: build
	script/native_gem
