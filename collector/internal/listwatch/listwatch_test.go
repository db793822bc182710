package listwatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
	"github.com/gpuxray/gpuxray/internal/testtool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started when client-go is imported.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

// thing is a namespaced test resource, test.gpuxray.io/v1 things, with a
// value the source keeps.
type thing struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Value             string `json:"value"`
}

type thingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []thing `json:"items"`
}

func (t *thing) DeepCopyObject() runtime.Object {
	out := &thing{TypeMeta: t.TypeMeta, Value: t.Value}
	t.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

func (l *thingList) DeepCopyObject() runtime.Object {
	out := &thingList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopyObject().(*thing))
	}
	return out
}

var thingsGV = schema.GroupVersion{Group: "test.gpuxray.io", Version: "v1"}

// thingClient is a REST client of things, built as the sources build
// theirs: JSON, LimitResponses.
type thingClient struct {
	c      *rest.RESTClient
	params runtime.ParameterCodec
}

func newThingClient(t *testing.T, url string) *thingClient {
	t.Helper()
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(thingsGV.WithKind("Thing"), &thing{})
	scheme.AddKnownTypeWithName(thingsGV.WithKind("ThingList"), &thingList{})
	metav1.AddToGroupVersion(scheme, thingsGV)
	rc := LimitResponses(&rest.Config{Host: url})
	rc.GroupVersion, rc.APIPath = &thingsGV, "/apis"
	rc.AcceptContentTypes, rc.ContentType = "application/json", "application/json"
	rc.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	c, err := rest.RESTClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &thingClient{c: c, params: runtime.NewParameterCodec(scheme)}
}

func (c *thingClient) List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	out := &thingList{}
	err := c.c.Get().Resource("things").VersionedParams(&opts, c.params).Do(ctx).Into(out)
	return out, err
}

func (c *thingClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.c.Get().Resource("things").VersionedParams(&opts, c.params).Watch(ctx)
}

// hostile is an API server of things whose every answer a test chooses:
// list answers a list request, watch a watch request. It counts the
// requests and the bytes it wrote.
type hostile struct {
	srv     *httptest.Server
	lists   atomic.Int64
	watches atomic.Int64
	written atomic.Int64

	mu    sync.Mutex
	list  func(w http.ResponseWriter, r *http.Request)
	watch func(w http.ResponseWriter, r *http.Request)
}

func newHostile(t *testing.T) *hostile {
	h := &hostile{}
	h.list = func(w http.ResponseWriter, _ *http.Request) { writeList(w, "10", thingJSON("a", "1", "one")) }
	h.watch = func(w http.ResponseWriter, r *http.Request) { quietWatch(w, r) }
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		list, wat := h.list, h.watch
		h.mu.Unlock()
		cw := &countingWriter{ResponseWriter: w, n: &h.written}
		if r.URL.Query().Get("watch") == "true" {
			h.watches.Add(1)
			wat(cw, r)
			return
		}
		h.lists.Add(1)
		list(cw, r)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hostile) set(list, wat func(w http.ResponseWriter, r *http.Request)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if list != nil {
		h.list = list
	}
	if wat != nil {
		h.watch = wat
	}
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingWriter) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

func thingJSON(name, rv, value string) string {
	return fmt.Sprintf(`{"kind":"Thing","apiVersion":"test.gpuxray.io/v1","metadata":{"name":%q,"namespace":"ns","uid":"uid-%s","resourceVersion":%q},"value":%q}`,
		name, name, rv, value)
}

func writeList(w http.ResponseWriter, rv string, items ...string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"kind":"ThingList","apiVersion":"test.gpuxray.io/v1","metadata":{"resourceVersion":%q},"items":[%s]}`, rv, strings.Join(items, ","))
}

func writeStatus(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":%q,"code":%d}`, reason, code)
}

// startWatch answers a watch request's headers.
func startWatch(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
}

func event(typ, obj string) string { return fmt.Sprintf(`{"type":%q,"object":%s}`+"\n", typ, obj) }

// quietWatch is a watch on which nothing happens until the client leaves.
func quietWatch(w http.ResponseWriter, r *http.Request) {
	startWatch(w)
	<-r.Context().Done()
}

// stall answers nothing until the client leaves.
func stall(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// run starts a Source of things against h and stops it at the end of the
// test.
func run(t *testing.T, h *hostile, tune func(*Config[string])) *Source[string] {
	t.Helper()
	c := newThingClient(t, h.srv.URL)
	cfg := Config[string]{
		What: "things", List: c.List, Watch: c.Watch,
		Convert: func(obj runtime.Object) (string, bool, error) {
			th, ok := obj.(*thing)
			if !ok {
				return "", false, nil
			}
			return th.Value, th.Value != "elsewhere", nil
		},
		Index:       func(v string) []string { return []string{"by-" + v} },
		MaxObjects:  100,
		CallTimeout: 500 * time.Millisecond,
		Health:      apihealth.New(collector.SourcePods, "things API", "kept as last seen", zaptest.NewLogger(t)),
		Logger:      zaptest.NewLogger(t),
	}
	if tune != nil {
		tune(&cfg)
	}
	src, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := src.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
	})
	return src
}

// healthUntil calls Health until want holds for what it reports, and
// returns the reasons of the errors on the way.
func healthUntil(t *testing.T, src *Source[string], what string, want func(up bool, reasons map[string]int) bool) map[string]int {
	t.Helper()
	reasons := map[string]int{}
	testtool.Eventually(t, what, func() bool {
		up, errs := src.Health()
		for _, err := range errs {
			var se *collector.SourceError
			if !errors.As(err, &se) {
				reasons["not a SourceError: "+err.Error()]++
				continue
			}
			reasons[se.Reason]++
		}
		return want(up, reasons)
	})
	return reasons
}

func TestSyncAndIndex(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.set(func(w http.ResponseWriter, _ *http.Request) {
		writeList(w, "10", thingJSON("a", "1", "one"), thingJSON("b", "2", "elsewhere"))
	}, nil)
	src := run(t, h, nil)
	if !src.WaitForSync(t.Context()) {
		t.Fatal("no sync")
	}
	if v, ok := src.Get("ns/a"); !ok || v != "one" {
		t.Errorf("Get(ns/a) = %q, %v", v, ok)
	}
	if v, ok := src.ByIndex("by-one"); !ok || v != "one" {
		t.Errorf("ByIndex(by-one) = %q, %v", v, ok)
	}
	if _, ok := src.Get("ns/b"); ok || src.Len() != 1 {
		t.Errorf("an object Convert does not keep is kept (%d kept)", src.Len())
	}
	if rv := src.ResourceVersion(); rv != "10" {
		t.Errorf("ResourceVersion = %q, want 10", rv)
	}
	healthUntil(t, src, "up", func(up bool, _ map[string]int) bool { return up })
}

// TestListStalls: a list that never completes is cut at CallTimeout,
// counted as unavailable and retried; the source is down meanwhile, and up
// once a list completes. Before, lists had no deadline and the source
// waited for ever.
func TestListStalls(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.set(stall, nil)
	src := run(t, h, nil)
	reasons := healthUntil(t, src, "the stalled list is counted", func(up bool, r map[string]int) bool {
		if up {
			t.Fatal("up while every list stalls")
		}
		return r[apihealth.ReasonUnavailable] > 0
	})
	if len(reasons) != 1 {
		t.Errorf("reasons %v, want only unavailable", reasons)
	}
	if h.lists.Load() < 2 {
		// healthUntil saw the first timeout; the reflector retries.
		testtool.Eventually(t, "the list is retried", func() bool { return h.lists.Load() >= 2 })
	}
	h.set(func(w http.ResponseWriter, _ *http.Request) { writeList(w, "10", thingJSON("a", "1", "one")) }, nil)
	healthUntil(t, src, "up after a list completes", func(up bool, _ map[string]int) bool { return up })
	if v, _ := src.Get("ns/a"); v != "one" {
		t.Errorf("Get(ns/a) = %q after recovery", v)
	}
}

// TestWatchStalls: a watch whose answer never comes is cut at CallTimeout
// and counted.
func TestWatchStalls(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.set(nil, stall)
	src := run(t, h, nil)
	reasons := healthUntil(t, src, "the stalled watch is counted", func(_ bool, r map[string]int) bool {
		return r[apihealth.ReasonUnavailable] > 0
	})
	if len(reasons) != 1 {
		t.Errorf("reasons %v, want only unavailable", reasons)
	}
	if v, ok := src.Get("ns/a"); !ok || v != "one" {
		t.Errorf("the listed object is not kept: %q, %v", v, ok)
	}
}

// TestWatchGoneStatus: a watch answered 410 Gone as its HTTP status (an
// expired resource version) makes the reflector list again, and is not a
// failure. Before, it was counted and marked the source down.
func TestWatchGoneStatus(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	var gone atomic.Int64
	h.set(nil, func(w http.ResponseWriter, r *http.Request) {
		if gone.Add(1) == 1 {
			writeStatus(w, http.StatusGone, "Expired")
			return
		}
		quietWatch(w, r)
	})
	src := run(t, h, nil)
	testtool.Eventually(t, "a second watch after the relist", func() bool { return h.watches.Load() >= 2 })
	if n := h.lists.Load(); n < 2 {
		t.Errorf("%d lists, want a relist after 410", n)
	}
	reasons := healthUntil(t, src, "up", func(up bool, _ map[string]int) bool { return up })
	if len(reasons) != 0 {
		t.Errorf("410 Gone counted: %v", reasons)
	}
}

// TestWatchEndsAtOnce: a server that ends every watch at once with EOF is
// counted (unavailable), and the watch is not opened again at once each
// time: client-go backs off.
func TestWatchEndsAtOnce(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.set(nil, func(w http.ResponseWriter, _ *http.Request) { startWatch(w) })
	src := run(t, h, nil)
	reasons := healthUntil(t, src, "the cut watch is counted", func(_ bool, r map[string]int) bool {
		return r[apihealth.ReasonUnavailable] >= 2
	})
	if len(reasons) != 1 {
		t.Errorf("reasons %v, want only unavailable", reasons)
	}
	// The reflector waits 0.8 s or more before the second round, then
	// longer: far fewer watches than a loop without backoff would open.
	if n := h.watches.Load(); n > 10 {
		t.Errorf("%d watches opened: no backoff", n)
	}
}

// TestHugeWatchEvent: a watch event that never ends is refused once it
// passes MaxEventBytes, before more is read: the server could write little
// more than that (and the socket's buffers) before the client left.
// Counted as too_large. Before, client-go's JSON framer buffered the whole
// event.
func TestHugeWatchEvent(t *testing.T) {
	// Not parallel: it reads megabytes, slow under the race detector.
	h := newHostile(t)
	const huge = 100 << 20
	var once atomic.Bool
	h.set(nil, func(w http.ResponseWriter, r *http.Request) {
		if !once.CompareAndSwap(false, true) {
			quietWatch(w, r)
			return
		}
		startWatch(w)
		if _, err := io.WriteString(w, `{"type":"MODIFIED","object":{"kind":"Thing","apiVersion":"test.gpuxray.io/v1","metadata":{"name":"a","namespace":"ns"},"value":"`); err != nil {
			return
		}
		chunk := []byte(strings.Repeat("x", 64<<10))
		for sent := 0; sent < huge; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "\"}}\n")
	})
	before := h.written.Load()
	src := run(t, h, func(c *Config[string]) { c.CallTimeout = 10 * time.Second })
	reasons := healthUntil(t, src, "the huge event is counted", func(_ bool, r map[string]int) bool {
		return r[apihealth.ReasonTooLarge] > 0
	})
	if len(reasons) != 1 {
		t.Errorf("reasons %v, want only too_large", reasons)
	}
	testtool.Eventually(t, "a watch after the refused one", func() bool { return h.watches.Load() >= 2 })
	if n := h.written.Load() - before; n > 32<<20 {
		t.Errorf("the server wrote %d MiB before the client left; the event was read past its bound", n>>20)
	}
	if v, ok := src.Get("ns/a"); !ok || v != "one" {
		t.Errorf("the listed object is not kept: %q, %v", v, ok)
	}
}

// TestHugeList: a list larger than MaxListBytes is refused (too_large)
// before it is read whole; the values last seen are kept.
func TestHugeList(t *testing.T) {
	// Not parallel: it reads megabytes, slow under the race detector.
	h := newHostile(t)
	var items []string
	for i := 0; i < 4000; i++ {
		items = append(items, thingJSON("t"+strconv.Itoa(i), "1", strings.Repeat("v", 200)))
	}
	chunk := strings.Join(items, ",") // about 1 MiB
	h.set(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"ThingList","apiVersion":"test.gpuxray.io/v1","metadata":{"resourceVersion":"10"},"items":[`)
		for i := 0; i < 300; i++ { // 300 MiB
			sep := ","
			if i == 0 {
				sep = ""
			}
			if _, err := io.WriteString(w, sep+chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "]}")
	}, nil)
	src := run(t, h, func(c *Config[string]) { c.CallTimeout = 10 * time.Second })
	reasons := healthUntil(t, src, "the huge list is counted", func(up bool, r map[string]int) bool {
		if up {
			t.Fatal("up while every list is refused")
		}
		return r[apihealth.ReasonTooLarge] > 0
	})
	if len(reasons) != 1 {
		t.Errorf("reasons %v, want only too_large", reasons)
	}
	if n := h.written.Load(); n > 64<<20 {
		t.Errorf("the server wrote %d MiB: the list was read past its bound", n>>20)
	}
	if src.HasSynced() || src.Len() != 0 {
		t.Errorf("synced %v with %d objects from a refused list", src.HasSynced(), src.Len())
	}
}

// TestWatchFlood: a watch that adds objects without end keeps MaxObjects
// of them and counts the rest (too_many); the source is down while it
// refuses. Before, every object was stored.
func TestWatchFlood(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	var flooded atomic.Bool
	h.set(nil, func(w http.ResponseWriter, r *http.Request) {
		if !flooded.CompareAndSwap(false, true) {
			quietWatch(w, r)
			return
		}
		startWatch(w)
		for i := 0; i < 5000; i++ {
			if _, err := io.WriteString(w, event("ADDED", thingJSON("f"+strconv.Itoa(i), strconv.Itoa(20+i), "v"+strconv.Itoa(i)))); err != nil {
				return
			}
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	src := run(t, h, nil)
	testtool.Eventually(t, "the flood is read", func() bool { return src.ResourceVersion() == strconv.Itoa(20+4999) })
	if n := src.Len(); n != 100 {
		t.Errorf("%d objects kept, want the bound, 100", n)
	}
	reasons := healthUntil(t, src, "refusals counted", func(_ bool, r map[string]int) bool { return r[apihealth.ReasonTooMany] > 0 })
	if len(reasons) != 1 {
		t.Errorf("reasons %v, want only too_many", reasons)
	}
	healthUntil(t, src, "up once the flood is over", func(up bool, _ map[string]int) bool { return up })
}

// TestListOverBound: a list of more objects than MaxObjects keeps the
// first MaxObjects and counts the rest.
func TestListOverBound(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.set(func(w http.ResponseWriter, _ *http.Request) {
		var items []string
		for i := 0; i < 150; i++ {
			items = append(items, thingJSON(fmt.Sprintf("t%03d", i), "1", "v"))
		}
		writeList(w, "10", items...)
	}, nil)
	src := run(t, h, nil)
	if !src.WaitForSync(t.Context()) {
		t.Fatal("no sync")
	}
	if n := src.Len(); n != 100 {
		t.Errorf("%d kept, want 100", n)
	}
	if _, ok := src.Get("ns/t099"); !ok {
		t.Error("the 100th listed object is not kept")
	}
	reasons := healthUntil(t, src, "refusals counted", func(_ bool, r map[string]int) bool { return r[apihealth.ReasonTooMany] > 0 })
	if len(reasons) != 1 {
		t.Errorf("reasons %v, want only too_many", reasons)
	}
}

// TestStreamedListFlood: a first list streamed through a watch keeps at
// most MaxObjects objects before its end bookmark.
func TestStreamedListFlood(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	h.set(nil, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sendInitialEvents") != "true" {
			quietWatch(w, r)
			return
		}
		startWatch(w)
		for i := 0; i < 1000; i++ {
			if _, err := io.WriteString(w, event("ADDED", thingJSON("s"+strconv.Itoa(i), "5", "v"))); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, event("BOOKMARK", `{"kind":"Thing","apiVersion":"test.gpuxray.io/v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}`))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	src := run(t, h, func(c *Config[string]) { c.StreamFirstList = true })
	if !src.WaitForSync(t.Context()) {
		t.Fatal("no sync")
	}
	if h.lists.Load() != 0 {
		t.Skip("client-go's WatchListClient feature is off: the first list was not streamed")
	}
	if n := src.Len(); n != 100 {
		t.Errorf("%d kept, want 100", n)
	}
	reasons := healthUntil(t, src, "refusals counted", func(_ bool, r map[string]int) bool { return r[apihealth.ReasonTooMany] > 0 })
	if len(reasons) != 1 {
		t.Errorf("reasons %v, want only too_many", reasons)
	}
}

// TestNotServed: before any list, a resource the server does not serve is
// an empty answer (synced, up); after one, it is a failure and the values
// last seen are kept.
func TestNotServed(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	notFound := func(w http.ResponseWriter, _ *http.Request) { writeStatus(w, http.StatusNotFound, "NotFound") }
	h.set(notFound, nil)
	errNotServed := errors.New("not served")
	src := run(t, h, func(c *Config[string]) {
		list := c.List
		c.List = func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			obj, err := list(ctx, opts)
			if apierrors.IsNotFound(err) {
				err = fmt.Errorf("%w: %w", errNotServed, err)
			}
			return obj, err
		}
		c.NotServed = func(err error) bool { return errors.Is(err, errNotServed) }
	})
	if !src.WaitForSync(t.Context()) {
		t.Fatal("no sync")
	}
	if reasons := healthUntil(t, src, "up with nothing", func(up bool, _ map[string]int) bool { return up }); len(reasons) != 0 {
		t.Errorf("not served counted: %v", reasons)
	}

	h.set(func(w http.ResponseWriter, _ *http.Request) { writeList(w, "10", thingJSON("a", "1", "one")) },
		func(w http.ResponseWriter, _ *http.Request) { writeStatus(w, http.StatusNotFound, "NotFound") })
	src.Relist()
	testtool.Eventually(t, "listed", func() bool { _, ok := src.Get("ns/a"); return ok })
	h.set(notFound, nil)
	src.Relist()
	healthUntil(t, src, "down, counted", func(up bool, r map[string]int) bool { return !up && r[apihealth.ReasonOther] > 0 })
	if v, ok := src.Get("ns/a"); !ok || v != "one" {
		t.Errorf("the values last seen are gone after a 404: %q, %v", v, ok)
	}
}

// TestEventLimit: the scanner finds a JSON value's end through nesting,
// strings and escapes, and fails only a value past the bound.
func TestEventLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		max      int64
		fail     bool
	}{
		{"two events within", `{"a":"}}}"}` + "\n" + `{"b":[1,2,{"c":"\"}"}]}` + "\n", 24, false},
		{"events back to back", `{"a":1}{"b":2}{"c":3}`, 8, false},
		{"one event past", `{"a":"` + strings.Repeat("x", 100) + `"}`, 64, true},
		{"escaped quote keeps the string open", `{"a":"\"` + strings.Repeat("}", 100) + `"}`, 64, true},
		{"a top-level string", `"` + strings.Repeat("x", 100) + `"`, 64, true},
		{"a top-level number", strings.Repeat("1", 100), 64, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &eventLimit{r: io.NopCloser(strings.NewReader(tc.in)), max: tc.max}
			_, err := io.ReadAll(iotestOneByte{r})
			var tl *apihealth.TooLargeError
			if got := errors.As(err, &tl); got != tc.fail {
				t.Errorf("err = %v, want a TooLargeError: %v", err, tc.fail)
			}
		})
	}
}

// iotestOneByte reads one byte at a time, so that values span reads.
type iotestOneByte struct{ r io.Reader }

func (o iotestOneByte) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func TestReached(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		have, want string
		ok         bool
	}{
		{"10", "9", true}, {"10", "10", true}, {"9", "10", false},
		{"", "1", false}, {"abc", "abc", true}, {"abc", "abd", false}, {"10", "x", false},
	} {
		if got := reached(tt.have, tt.want); got != tt.ok {
			t.Errorf("reached(%q, %q) = %v, want %v", tt.have, tt.want, got, tt.ok)
		}
	}
}

// TestPagination: a list answered in pages (limit and continue, as an API
// server without a watch cache answers) is read page by page, and the
// store holds every page's objects; the bound counts across the pages.
func TestPagination(t *testing.T) {
	t.Parallel()
	h := newHostile(t)
	var limits []string
	var mu sync.Mutex
	h.set(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		limits = append(limits, q.Get("limit")+"/"+q.Get("continue"))
		mu.Unlock()
		page, _ := strconv.Atoi(q.Get("continue"))
		var items []string
		for i := range 3 {
			n := page*3 + i
			items = append(items, thingJSON(fmt.Sprintf("p%02d", n), "1", "v"))
		}
		next := ""
		if page < 3 {
			next = strconv.Itoa(page + 1)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"kind":"ThingList","apiVersion":"test.gpuxray.io/v1","metadata":{"resourceVersion":"10","continue":%q},"items":[%s]}`, next, strings.Join(items, ","))
	}, nil)
	src := run(t, h, func(c *Config[string]) { c.MaxObjects = 10 })
	if !src.WaitForSync(t.Context()) {
		t.Fatal("no sync")
	}
	mu.Lock()
	got := slices.Clone(limits)
	mu.Unlock()
	if len(got) < 4 || got[1] != "500/1" || got[2] != "500/2" {
		t.Errorf("list requests (limit/continue) %q, want 4 pages of limit 500", got)
	}
	if n := src.Len(); n != 10 {
		t.Errorf("%d kept of 12 listed in 4 pages, want the bound, 10", n)
	}
	if _, ok := src.Get("ns/p09"); !ok {
		t.Error("the tenth object, on the fourth page, is not kept")
	}
	reasons := healthUntil(t, src, "refusals counted", func(_ bool, r map[string]int) bool { return r[apihealth.ReasonTooMany] > 0 })
	if len(reasons) != 1 {
		t.Errorf("reasons %v, want only too_many", reasons)
	}
}
