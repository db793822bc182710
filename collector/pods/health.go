package pods

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

// maxPending bounds the failures kept between two Health calls; the
// reflector's backoff makes more than a few per second impossible, so the
// bound only matters when nobody calls Health.
const maxPending = 256

// Reasons of gpuxray_source_errors_total{source="pods"}.
const (
	ReasonForbidden    = "forbidden"    // RBAC denies list or watch on pods
	ReasonUnauthorized = "unauthorized" // the credentials are refused (an expired token)
	ReasonUnavailable  = "unavailable"  // the API server cannot be reached or is overloaded
	ReasonOther        = "other"
)

// health is what the source knows of its own state.
type health struct {
	mu sync.Mutex
	// failing is set by a failed call and cleared by a successful one.
	failing bool
	// failedSinceTake is set by any failure and cleared by take.
	failedSinceTake bool
	pending         []error
	// lastCallErr is the error the latest failed call returned, so that the
	// same error, handed on by the reflector, is not counted twice.
	lastCallErr error
}

// take returns whether the source is up and the failures since the last take.
func (h *health) take(synced bool) (bool, []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	up := synced && !h.failing && !h.failedSinceTake
	errs := h.pending
	h.pending, h.failedSinceTake = nil, false
	return up, errs
}

// observeCall records the outcome of one list or watch call.
func (s *Source) observeCall(ctx context.Context, call string, err error) {
	h := &s.health
	if err != nil && ctx.Err() != nil {
		return // shutting down
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		if h.failing {
			s.log.Info("pods API reachable again", zap.String("call", call))
		}
		h.failing = false
		return
	}
	h.lastCallErr = err
	s.fail(call, err)
}

// observeStream records an error that ended a list-and-watch round or a
// watch stream: a call's error (already counted), the normal end of a
// watch (an expired resource version, EOF), or a failure the server sent.
// The reflector hands the informer's watch error handler only the errors
// of calls, and retries after a stream's error event without a word, so
// the watch is observed too (observeWatch).
func (s *Source) observeStream(ctx context.Context, call string, err error) {
	h := &s.health
	if err == nil || ctx.Err() != nil || errors.Is(err, io.EOF) ||
		apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastCallErr != nil && errors.Is(err, h.lastCallErr) {
		return
	}
	s.fail(call, err)
}

// observeWatch returns w, with its error events recorded as failures.
func (s *Source) observeWatch(w watch.Interface) watch.Interface {
	o := &observedWatch{inner: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go o.loop(s)
	return o
}

// observedWatch passes a watch's events on, recording its error events.
// Its goroutine ends when the watch is stopped or its stream ends.
type observedWatch struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func (o *observedWatch) ResultChan() <-chan watch.Event { return o.out }

func (o *observedWatch) Stop() {
	o.once.Do(func() {
		close(o.stop)
		o.inner.Stop()
	})
}

func (o *observedWatch) loop(s *Source) {
	defer close(o.out)
	in := o.inner.ResultChan()
	for {
		select {
		case <-o.stop:
			return
		case ev, ok := <-in:
			if !ok {
				return
			}
			if ev.Type == watch.Error {
				s.observeStream(context.Background(), "watch stream", apierrors.FromObject(ev.Object))
			}
			select {
			case o.out <- ev:
			case <-o.stop:
				return
			}
		}
	}
}

// fail records one failure; h.mu is held.
func (s *Source) fail(call string, err error) {
	h := &s.health
	reason := classify(err)
	if !h.failing {
		s.log.Warn("pods API failing: pods are known as last seen until it recovers",
			zap.String("call", call), zap.String("reason", reason), zap.Error(err))
	} else {
		s.log.Debug("pods API still failing", zap.String("call", call), zap.String("reason", reason), zap.Error(err))
	}
	h.failing, h.failedSinceTake = true, true
	if len(h.pending) < maxPending {
		h.pending = append(h.pending, collector.NewSourceError(collector.SourcePods, reason, err))
	}
}

// classify returns the reason label for an API failure.
func classify(err error) string {
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
