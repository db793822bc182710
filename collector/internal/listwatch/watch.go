package listwatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// watch opens a watch, waiting at most CallTimeout for the server's answer,
// and returns it converted (see convertedWatch).
func (s *Source[V]) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.FieldSelector = s.cfg.FieldSelector
	wctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(s.cfg.CallTimeout, cancel)
	w, err := s.cfg.Watch(wctx, opts)
	timedOut := !timer.Stop()
	if err != nil {
		cancel()
		streaming := opts.SendInitialEvents != nil && *opts.SendInitialEvents
		switch {
		case timedOut && ctx.Err() == nil:
			err = fmt.Errorf("%s: no answer to a watch within %s: %w", s.cfg.What, s.cfg.CallTimeout, context.DeadlineExceeded)
		case streaming && apierrors.IsInvalid(err):
			// An API server without the WatchList feature rejects a
			// streaming first list as invalid, and the reflector falls
			// back to a list: expected, not a failure.
			s.log.Debug("streaming list not supported: listing", zap.String("what", s.cfg.What), zap.Error(err))
			return nil, err
		case apierrors.IsGone(err) || apierrors.IsResourceExpired(err):
			// The resource version is compacted away: the reflector lists
			// again, as after a 410 in the stream. Not a failure.
			s.log.Debug("watch from an expired resource version: listing again", zap.String("what", s.cfg.What), zap.Error(err))
			return nil, err
		}
		s.cfg.Health.ObserveCall(ctx, "watch", err)
		return nil, err
	}
	s.cfg.Health.ObserveCall(ctx, "watch", nil)
	cw := &convertedWatch[V]{
		src: s, ctx: ctx, inner: w, cancel: cancel, started: time.Now(),
		out: make(chan watch.Event), stop: make(chan struct{}),
	}
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		// A streamed first list is a list: it must end within the
		// deadline of one, with its end bookmark.
		cw.initial = map[string]bool{}
		cw.listDeadline = time.NewTimer(s.cfg.CallTimeout)
	}
	go cw.loop()
	return cw, nil
}

// convertedWatch is a watch whose objects are converted to Object[V] as
// they arrive. It counts a stream the server ends at once without an
// event, which the reflector only retries; an error event from the
// server; and, while a first list is streamed, objects beyond MaxObjects,
// which it does not pass on. Its goroutine ends when the watch is stopped
// or its stream ends.
type convertedWatch[V any] struct {
	src     *Source[V]
	ctx     context.Context
	inner   watch.Interface
	cancel  context.CancelFunc
	started time.Time
	// initial holds the names streamed before the end of a streamed first
	// list; nil when the first list is not streamed, or after its end.
	initial map[string]bool
	// listDeadline fires when a streamed first list has not ended within
	// CallTimeout; nil when none is streamed.
	listDeadline *time.Timer

	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *convertedWatch[V]) ResultChan() <-chan watch.Event { return w.out }

func (w *convertedWatch[V]) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.inner.Stop()
		w.cancel()
	})
}

func (w *convertedWatch[V]) loop() {
	defer close(w.out)
	in := w.inner.ResultChan()
	events := 0
	var deadline <-chan time.Time
	if w.listDeadline != nil {
		defer w.listDeadline.Stop()
		deadline = w.listDeadline.C
	}
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-w.stop:
			return
		case <-deadline:
			if w.initial == nil {
				deadline = nil // the list ended in time
				continue
			}
			err := apierrors.NewTimeoutError(fmt.Sprintf("%s: the streamed list did not end within %s", w.src.cfg.What, w.src.cfg.CallTimeout), 0)
			w.src.cfg.Health.ObserveStream(w.ctx, "streamed list", err)
			select {
			case w.out <- watch.Event{Type: watch.Error, Object: &err.ErrStatus}:
			case <-w.stop:
			}
			return
		case ev, ok = <-in:
		}
		if !ok {
			w.ended(events)
			return
		}
		events++
		ev, ok = w.convert(ev)
		if !ok {
			continue
		}
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
}

// ended counts a stream that the server ended at once without an event.
func (w *convertedWatch[V]) ended(events int) {
	select {
	case <-w.stop:
		return // stopped by the reflector
	default:
	}
	if events == 0 && time.Since(w.started) < shortWatch {
		w.src.cfg.Health.ObserveStream(w.ctx, "watch stream",
			fmt.Errorf("%s: the server ended the watch at once: %w", w.src.cfg.What, &cache.VeryShortWatchError{Name: w.src.cfg.What}))
	}
}

// convert returns ev with its object converted, or false for an event not
// to pass on.
func (w *convertedWatch[V]) convert(ev watch.Event) (watch.Event, bool) {
	switch ev.Type {
	case watch.Error:
		w.src.cfg.Health.ObserveStream(w.ctx, "watch stream", apierrors.FromObject(ev.Object))
		return ev, true
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return ev, false
		}
		o := &Object[V]{ObjectMeta: metav1.ObjectMeta{ResourceVersion: m.GetResourceVersion()}}
		if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
			o.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
			w.initial = nil
		}
		return watch.Event{Type: ev.Type, Object: o}, true
	}
	o, ok := w.src.convert(ev.Object)
	if !ok {
		return ev, false
	}
	if w.initial != nil && ev.Type == watch.Added && o.Keep {
		key := keyOf(o)
		if !w.initial[key] && len(w.initial) >= w.src.cfg.MaxObjects {
			w.src.cfg.Health.Refuse(fmt.Errorf("%s %s: streamed beyond the %d kept: %w", w.src.cfg.What, key, w.src.cfg.MaxObjects, apihealth.ErrTooMany))
			return ev, false
		}
		w.initial[key] = true
	}
	return watch.Event{Type: ev.Type, Object: o}, true
}

var _ runtime.Object = (*Object[int])(nil)
