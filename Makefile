# gpuxray — build, test and check. go-nvml is cgo; its header is noisy.
export CGO_CFLAGS := -Wno-deprecated-declarations
export CGO_ENABLED := 1

VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.revision=$(REVISION)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"

.PHONY: all build image-binaries test test-e2e lint fmt vet demo bench fuzz fleet clean

all: lint test build

## build: the gpuxray binary in ./bin, and gpuxray-sim, the same with the
## simulated node (agent --simulate, replay; docs/demo.md)
build:
	go build $(GOFLAGS_BUILD) -o bin/gpuxray ./cmd/gpuxray
	go build $(GOFLAGS_BUILD) -o bin/gpuxray-sim ./cmd/gpuxray-sim

## image-binaries: gpuxray for each of PLATFORMS in $(BINDIR)/<os>_<arch>/gpuxray, as the
## Dockerfile builds it (cmd/gpuxray links no simulator). cgo needs a C compiler per target: Debian's cross compilers
## (gcc-aarch64-linux-gnu, gcc-x86-64-linux-gnu) where the target is not the host.
PLATFORMS ?= linux/amd64 linux/arm64
BINDIR    ?= bin
GOHOSTARCH := $(shell go env GOHOSTARCH)
image-binaries:
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%%/*}; arch=$${p#*/}; cc=gcc; \
	  if [ "$$arch" != "$(GOHOSTARCH)" ]; then \
	    case "$$arch" in \
	      amd64) cc=x86_64-linux-gnu-gcc ;; \
	      arm64) cc=aarch64-linux-gnu-gcc ;; \
	      *) echo "image-binaries: no C cross compiler known for $$p" >&2; exit 1 ;; \
	    esac; \
	  fi; \
	  echo "go build $$p (CC=$$cc) -> $(BINDIR)/$${os}_$${arch}/gpuxray"; \
	  GOOS=$$os GOARCH=$$arch CC=$$cc go build $(GOFLAGS_BUILD) -o $(BINDIR)/$${os}_$${arch}/gpuxray ./cmd/gpuxray; \
	done

## test: the unit tests, with the race detector (a few minutes; CONTRIBUTING.md).
## Tests that need promtool, helm or kustomize skip without them, and fail under CI=1.
test:
	go test -race -count=1 -timeout 15m ./...

## test-e2e: the tests in files tagged e2e (`//go:build e2e` atop the file): real
## Prometheus, VictoriaMetrics and chromium, the gpuxray binary, the cross build,
## replays of hours and days, floods. Only those files' tests run (-run takes their
## names), in one go test so that packages run side by side.
E2E_TIMEOUT ?= 60m
E2E_FILES = $(shell grep -rlE --include='*_test.go' '^//go:build .*\<e2e\>' .)
E2E_TESTS = $(shell sed -nE 's/^func (Test[A-Za-z0-9_]*)\(t \*testing\.T\).*/\1/p' $(E2E_FILES) | sort -u | paste -sd'|')
## The race detector runs a replay about 7x slower: the replays over 30 virtual
## minutes skip under it (skipLongUnderRace), and a second pass runs them without
## it, beside test/bench's accuracy and memory measurements, which the race
## detector would only slow and distort.
LONG_REPLAYS := TestReplayGoldenLong|TestReplayDriverShapes|TestReplayMIGModeSwitch|TestReplayFaultyDay
RACE_FREE_DIRS := ./test/bench/ ./test/bench/scenario/
RACE_FREE_TESTS = $(shell sed -nE 's/^func (Test[A-Za-z0-9_]*)\(t \*testing\.T\).*/\1/p' $(filter $(addsuffix %,$(RACE_FREE_DIRS)),$(E2E_FILES)) | sort -u | paste -sd'|')
test-e2e:
	go test -race -count=1 -tags e2e -timeout $(E2E_TIMEOUT) -run '^($(E2E_TESTS))$$' $(filter-out $(RACE_FREE_DIRS),$(sort $(dir $(E2E_FILES))))
	go test -count=1 -tags e2e -timeout $(E2E_TIMEOUT) -run '^($(LONG_REPLAYS)|$(RACE_FREE_TESTS))$$' ./cmd/gpuxray-sim $(RACE_FREE_DIRS)

## bench: Go benchmarks (-count 6 for benchstat-style medians), then the real-binary
## harness and the 24-hour churn replay (docs/benchmarks.md)
BENCHCOUNT ?= 6
bench:
	go test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) ./...
	go test -count=1 -timeout 60m -run 'Harness|Churn' -v ./test/bench -args -harness

## fuzz: each parser's fuzz target for FUZZTIME (its committed corpus under
## testdata/fuzz/ runs with every go test); a failing input lands in testdata/fuzz/
FUZZTIME ?= 5s
FUZZ_TARGETS := ./collector:FuzzParseDeviceID ./collector/proc:FuzzParseCgroup \
	./agent:FuzzParseSchedule ./collector/sim:FuzzParseScenario \
	./collector/workload:FuzzModelFromCmdline ./collector/workload:FuzzCapValue \
	./collector/workload:FuzzSanitizeLabelName ./collector/workload:FuzzCleanValue ./collector/proc:FuzzParseStartTime
## A run that ends in a bare "context deadline exceeded", with no failing input
## written, is Go's fuzz coordinator racing its own -fuzztime deadline
## (golang/go#75804, fixed in Go 1.27), not a finding: it runs once more.
fuzz:
	@set -e; log=$$(mktemp); trap 'rm -f $$log' EXIT; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t#*:}; \
	  for try in 1 2; do \
	    echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
	    if go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg >$$log 2>&1; then cat $$log; break; fi; \
	    cat $$log; \
	    if [ $$try = 1 ] && grep -q 'context deadline exceeded' $$log && ! grep -q 'Failing input written' $$log; then \
	      echo "fuzz: the -fuzztime deadline race (golang/go#75804), not a finding: once more"; continue; fi; \
	    exit 1; \
	  done; \
	done

## lint: formatting, and vet of the default and e2e builds
lint: fmt vet

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	go vet ./...
	go vet -tags e2e ./...

## fleet: NODES simulated nodes (8 GPUs each) served live by one process, scraped by two
## vmagent shards into VictoriaMetrics with vmalert and Alertmanager, and a week of their
## history read back by gpuxray report; prints truth against the engine and fails when a
## figure is off by more than 1% (docs/fleet.md). Needs victoria-metrics, vmagent, vmalert,
## prometheus-alertmanager, prometheus and promtool. FLEETFLAGS: more flags (-help lists them).
NODES ?= 40
FLEETFLAGS ?=
fleet: build
	go run ./test/fleet/cmd/fleet -nodes $(NODES) -gpuxray bin/gpuxray-sim $(FLEETFLAGS)

## demo: the agent on the embedded simulated node (gpuxray-sim), on :9471;
## ARGS go to the agent: make demo ARGS=--web.listen-address=:9472, or a scenario FILE
ARGS ?=
demo:
	go run ./cmd/gpuxray-sim agent --simulate $(ARGS)

clean:
	rm -rf bin
