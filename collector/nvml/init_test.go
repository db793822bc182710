package nvml

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector"
)

// noAllocations is a kubelet that holds nothing.
type noAllocations struct{ clock Clock }

func (n noAllocations) List(context.Context) (collector.AllocationList, error) {
	return collector.AllocationList{At: n.clock.Now()}, nil
}

// TestInitFailureCountedPerAttempt: without NVML (no libnvidia-ml.so.1), the
// agent polls every second but Init is tried only every 5 s and more
// (initRetryMin, doubling to initRetryMax). Through the real engine, as
// cmd/gpuxray wires it (Init once, then a Read a poll):
// gpuxray_source_errors_total{source="nvml",reason="init"} counts each
// Init attempt once, not each poll; the source is down at every poll; and
// one line at warn or above says so (the engine's "source down"), until the
// error changes, which the reader says once more. Every failed attempt is
// logged at debug.
func TestInitFailureCountedPerAttempt(t *testing.T) {
	t.Parallel()
	inits := 0
	ret := gonvml.ERROR_LIBRARY_NOT_FOUND
	lib := &mock.Interface{InitFunc: func() gonvml.Return { inits++; return ret }}
	clock := &stepClock{t: time.Unix(1_800_000_000, 0)}
	core, logs := observer.New(zapcore.DebugLevel)
	logger := zap.New(core)
	r := New(lib, DefaultConfig(), logger.Named("nvml"), clock)
	_ = r.Init() // as cmd/gpuxray: a failure is the engine's to report
	engine, err := agent.New(agent.DefaultConfig(), r, noAllocations{clock}, clock, logger.Named("engine"))
	if err != nil {
		t.Fatal(err)
	}
	nvmlState := func() (up bool, errs uint64) {
		for _, s := range engine.Snapshot().Sources {
			if s.Name == collector.SourceNVML {
				return s.Up, s.Errors["init"]
			}
		}
		t.Fatal("no nvml source in the snapshot")
		return
	}
	loud := func() []string {
		var out []string
		for _, e := range logs.All() {
			if e.Level >= zapcore.WarnLevel {
				out = append(out, e.LoggerName+": "+e.Message)
			}
		}
		return out
	}
	poll := func(seconds int) {
		for i := 0; i < seconds; i++ {
			clock.t = clock.t.Add(time.Second)
			engine.Poll(context.Background())
			if up, _ := nvmlState(); up {
				t.Fatalf("nvml up at %s without NVML", clock.t)
			}
		}
	}

	poll(600) // ten minutes: attempts at 0, 5, 15, 35, 75, 155, 315 s
	up, counted := nvmlState()
	if up || inits != 7 || counted != uint64(inits) {
		t.Errorf("after 10 min of 1 s polls: nvml up %v, %d Init attempts, errors_total{reason=init} %d; want down, 7, 7 (one per attempt)", up, inits, counted)
	}
	if l := loud(); len(l) != 1 || l[0] != "engine: source down" {
		t.Errorf("lines at warn and above %q, want the engine's one \"source down\"", l)
	}
	if n := logs.FilterMessage("NVML Init failed").Len(); n != inits {
		t.Errorf("%d debug lines for %d failed Init attempts", n, inits)
	}

	// The driver is installed but not loaded yet: a new error, said once.
	ret = gonvml.ERROR_DRIVER_NOT_LOADED
	poll(900) // attempts at 615, 915 and 1215 s (the backoff reached 5 min)
	_, counted = nvmlState()
	if inits != 10 || counted != uint64(inits) {
		t.Errorf("%d Init attempts, errors_total{reason=init} %d; want 10, 10", inits, counted)
	}
	if l := loud(); len(l) != 2 || !strings.HasPrefix(l[1], "nvml: ") {
		t.Errorf("lines at warn and above %q, want one more from the reader for the new error", l)
	}

	// Every Read between attempts still says why, without counting.
	_, err = r.Read(context.Background())
	if !errors.Is(err, ErrNotInitialized) || !errors.Is(err, gonvml.ERROR_DRIVER_NOT_LOADED) {
		t.Errorf("Read between attempts = %v, want ErrNotInitialized wrapping ERROR_DRIVER_NOT_LOADED", err)
	}
	var se *collector.SourceError
	if errors.As(err, &se) {
		t.Errorf("Read between attempts = %v, a SourceError the engine would count again", err)
	}
}
