// Package apihealth is the health of a source that lists and watches one
// resource of the Kubernetes API through a client-go reflector (the pod
// source, the ResourceSlice source): whether it is up, and each failure as a
// *collector.SourceError with a reason, counted once.
package apihealth

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuxray/gpuxray/collector"
)

// maxPending bounds the failures kept between two Take calls; the
// reflector's backoff makes more than a few per second impossible, so the
// bound only matters when nobody calls Take.
const maxPending = 256

// Reasons of gpuxray_source_errors_total for an API failure.
const (
	ReasonForbidden    = "forbidden"    // RBAC denies the list or the watch
	ReasonUnauthorized = "unauthorized" // the credentials are refused (an expired token)
	ReasonUnavailable  = "unavailable"  // the API server cannot be reached or is overloaded
	ReasonOther        = "other"
)

// Tracker is what a source knows of its own state. It is safe for
// concurrent use.
type Tracker struct {
	source string // collector.Source*
	// what names the API in logs ("pods API"); stale says what the source
	// does while it fails.
	what, stale string
	log         *zap.Logger

	mu sync.Mutex
	// failing is set by a failed call and cleared by a successful one.
	failing bool
	// failedSinceTake is set by any failure and cleared by Take.
	failedSinceTake bool
	pending         []error
	// lastCallErr is the error the latest failed call returned, so that the
	// same error, handed on by the reflector, is not counted twice.
	lastCallErr error
}

// New returns the tracker of source, whose API is called what in logs, and
// which does stale while the API fails.
func New(source, what, stale string, logger *zap.Logger) *Tracker {
	return &Tracker{source: source, what: what, stale: stale, log: logger}
}

// Take returns whether the source is up — synced (its first list is
// stored), the latest call succeeded and none failed since the previous
// Take — and the failures since the previous Take.
func (t *Tracker) Take(synced bool) (bool, []error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	up := synced && !t.failing && !t.failedSinceTake
	errs := t.pending
	t.pending, t.failedSinceTake = nil, false
	return up, errs
}

// ObserveCall records the outcome of one list or watch call.
func (t *Tracker) ObserveCall(ctx context.Context, call string, err error) {
	if err != nil && ctx.Err() != nil {
		return // shutting down
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		if t.failing {
			t.log.Info(t.what+" reachable again", zap.String("call", call))
		}
		t.failing = false
		return
	}
	t.lastCallErr = err
	t.fail(call, err)
}

// ObserveStream records an error that ended a list-and-watch round or a
// watch stream: a call's error (already counted), the normal end of a
// watch (an expired resource version, EOF), or a failure the server sent.
// The reflector hands its watch error handler only the errors of calls,
// and retries after a stream's error event without a word, so the watch is
// observed too (ObserveWatch).
func (t *Tracker) ObserveStream(ctx context.Context, call string, err error) {
	if err == nil || ctx.Err() != nil || errors.Is(err, io.EOF) ||
		apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lastCallErr != nil && errors.Is(err, t.lastCallErr) {
		return
	}
	t.fail(call, err)
}

// ObserveWatch returns w, the watch of a call made with ctx, with its error
// events recorded as failures: none once ctx is done, when the stream ends
// because the agent stops.
func (t *Tracker) ObserveWatch(ctx context.Context, w watch.Interface) watch.Interface {
	return MapWatch(w, func(ev watch.Event) watch.Event {
		if ev.Type == watch.Error {
			t.ObserveStream(ctx, "watch stream", apierrors.FromObject(ev.Object))
		}
		return ev
	})
}

// MapWatch returns w with f applied to each event. Unlike watch.Filter,
// whose goroutine stays blocked on a send nobody reads after Stop, its
// goroutine ends when the watch is stopped or its stream ends.
func MapWatch(w watch.Interface, f func(watch.Event) watch.Event) watch.Interface {
	m := &mappedWatch{inner: w, f: f, out: make(chan watch.Event), stop: make(chan struct{})}
	go m.loop()
	return m
}

type mappedWatch struct {
	inner watch.Interface
	f     func(watch.Event) watch.Event
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func (m *mappedWatch) ResultChan() <-chan watch.Event { return m.out }

func (m *mappedWatch) Stop() {
	m.once.Do(func() {
		close(m.stop)
		m.inner.Stop()
	})
}

func (m *mappedWatch) loop() {
	defer close(m.out)
	in := m.inner.ResultChan()
	for {
		select {
		case <-m.stop:
			return
		case ev, ok := <-in:
			if !ok {
				return
			}
			select {
			case m.out <- m.f(ev):
			case <-m.stop:
				return
			}
		}
	}
}

// fail records one failure; t.mu is held.
func (t *Tracker) fail(call string, err error) {
	reason := Classify(err)
	if !t.failing {
		t.log.Warn(t.what+" failing: "+t.stale,
			zap.String("call", call), zap.String("reason", reason), zap.Error(err))
	} else {
		t.log.Debug(t.what+" still failing", zap.String("call", call), zap.String("reason", reason), zap.Error(err))
	}
	t.failing, t.failedSinceTake = true, true
	if len(t.pending) < maxPending {
		t.pending = append(t.pending, collector.NewSourceError(t.source, reason, err))
	}
}

// Classify returns the reason label for an API failure.
func Classify(err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return ReasonForbidden
	case apierrors.IsUnauthorized(err):
		return ReasonUnauthorized
	case apierrors.IsServiceUnavailable(err), apierrors.IsTooManyRequests(err),
		apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsInternalError(err),
		apierrors.IsUnexpectedServerError(err):
		return ReasonUnavailable
	}
	var short *cache.VeryShortWatchError
	if errors.As(err, &short) {
		return ReasonUnavailable // the server or a proxy cuts watches at once
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) {
		return ReasonUnavailable
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code >= 500 {
		return ReasonUnavailable
	}
	return ReasonOther
}
