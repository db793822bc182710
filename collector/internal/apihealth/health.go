// Package apihealth is the health of a source that lists and watches one
// resource of the Kubernetes API (the pod source, the PriorityClass and
// ResourceSlice sources): whether it is up, and each failure or refused
// object as a *collector.SourceError with a reason, counted once.
package apihealth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuxray/gpuxray/collector"
)

// maxPending bounds the failures kept between two Take calls: the
// reflector's backoff makes more than a few calls per second impossible,
// and a flood of refused objects is counted up to this bound per Take.
const maxPending = 256

// Reasons of gpuxray_source_errors_total for an API failure.
const (
	ReasonForbidden    = "forbidden"    // RBAC denies the list or the watch
	ReasonUnauthorized = "unauthorized" // the credentials are refused (an expired token)
	ReasonUnavailable  = "unavailable"  // the API server cannot be reached, is overloaded, or stalls
	// ReasonTooLarge: an answer or an object larger than any the API server
	// stores, or beyond the API's own validation limits, refused.
	ReasonTooLarge = "too_large"
	// ReasonTooMany: an object refused because the source keeps as many as
	// a node can hold.
	ReasonTooMany = "too_many"
	ReasonOther   = "other"
)

// ErrTooMany is wrapped by the error of an object refused because the
// source is full.
var ErrTooMany = errors.New("the source keeps no more objects")

// TooLargeError is an answer of the API server, or one object in it, that
// is larger than the bound the source reads.
type TooLargeError struct {
	What  string // "a watch event", "a list", "ResourceSlice x"
	Limit int64  // bytes, or items
	Unit  string // "bytes" (default) or another unit
}

// tooLargeMarker is in every TooLargeError's text: a watch stream's
// decoding error reaches the reflector only as the text of a Status.
const tooLargeMarker = "larger than the API server stores"

func (e *TooLargeError) Error() string {
	unit := e.Unit
	if unit == "" {
		unit = "bytes"
	}
	return fmt.Sprintf("%s is %s (more than %d %s): refused", e.What, tooLargeMarker, e.Limit, unit)
}

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
	// failedSinceTake is set by any failure or refusal and cleared by Take.
	failedSinceTake bool
	pending         []error
	// lastCallErr is the error the latest failed call returned, so that the
	// same error, handed on by the reflector, is not counted twice.
	lastCallErr error
	// refusing is set by a refusal and cleared by a Take that finds none
	// since the previous one: one warning per episode of refusals.
	refusing, refusedSinceTake bool
	refused                    int // refusals in the current episode
}

// New returns the tracker of source, whose API is called what in logs, and
// which does stale while the API fails.
func New(source, what, stale string, logger *zap.Logger) *Tracker {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Tracker{source: source, what: what, stale: stale, log: logger}
}

// Take returns whether the source is up — synced (its first list is
// stored), the latest call succeeded and nothing failed or was refused
// since the previous Take — and the failures since the previous Take.
func (t *Tracker) Take(synced bool) (bool, []error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	up := synced && !t.failing && !t.failedSinceTake
	errs := t.pending
	t.pending, t.failedSinceTake = nil, false
	if t.refusing && !t.refusedSinceTake {
		t.log.Info(t.what+": no object refused since the last poll", zap.Int("refused", t.refused))
		t.refusing, t.refused = false, 0
	}
	t.refusedSinceTake = false
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

// Refuse records an object the source did not keep (err wraps ErrTooMany,
// or is a *TooLargeError): counted, and the source is down until the next
// Take, but a refusal is not a failing API, so the following poll is up
// again if nothing else is refused.
func (t *Tracker) Refuse(err error) {
	reason := Classify(err)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refused++
	if !t.refusing {
		t.log.Warn(t.what+": refusing objects; the source keeps what it holds",
			zap.String("reason", reason), zap.Error(err))
	} else {
		t.log.Debug(t.what+": refused", zap.String("reason", reason), zap.Error(err))
	}
	t.refusing, t.refusedSinceTake, t.failedSinceTake = true, true, true
	if len(t.pending) < maxPending {
		t.pending = append(t.pending, collector.NewSourceError(t.source, reason, err))
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
	var tooLarge *TooLargeError
	switch {
	case errors.As(err, &tooLarge):
		return ReasonTooLarge
	case errors.Is(err, ErrTooMany):
		return ReasonTooMany
	case apierrors.IsForbidden(err):
		return ReasonForbidden
	case apierrors.IsUnauthorized(err):
		return ReasonUnauthorized
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && strings.Contains(status.Status().Message, tooLargeMarker) {
		// A watch event over the bound: client-go's stream watcher turns
		// the reader's error into a Status of its text.
		return ReasonTooLarge
	}
	switch {
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
	if errors.As(err, &status) && status.Status().Code >= 500 {
		return ReasonUnavailable
	}
	return ReasonOther
}
