package exporter

import (
	"mime"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Registry is the agent's registry: the engine's Collector and the other
// collectors (Go runtime, process). It gathers as a prometheus.Registry
// holding them all does; NewHandler serves a text or OpenMetrics scrape of
// it through the fast path, the Collector writing its own families (see
// text.go) between the others', which client_golang gathers and encodes as
// ever.
type Registry struct {
	all    *prometheus.Registry // every collector: Gather, and every other scrape
	others *prometheus.Registry // all but the engine's Collector
	engine *Collector
}

// NewRegistry returns a registry holding engine.
func NewRegistry(engine *Collector) *Registry {
	r := &Registry{all: prometheus.NewRegistry(), others: prometheus.NewRegistry(), engine: engine}
	r.all.MustRegister(engine)
	return r
}

// Register registers c, one of the other collectors: the engine's is
// NewRegistry's.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.all.Register(c); err != nil {
		return err
	}
	if err := r.others.Register(c); err != nil {
		r.all.Unregister(c)
		return err
	}
	return nil
}

// MustRegister registers cs, panicking on the first error.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Gather gathers every collector, the engine's included.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) { return r.all.Gather() }

// textHandler serves a gatherer's metrics as promhttp.HandlerFor(g, opts)
// does with the options of newTextHandler, except that an OpenMetrics 1
// scrape gathers through openMetricsGatherer (see openmetrics.go). A
// Registry's are served by the fast path when the scrape negotiates the
// classic text format or OpenMetrics 0.0.1 or 1.0.0 (what Prometheus asks
// for first) and filters no name (name[]), by that handler otherwise
// (protobuf, a filter).
type textHandler struct {
	r          *Registry // nil for another gatherer: no fast path
	errorLog   promhttp.Logger
	formats    []expfmt.Format // the formats promhttp offers
	names      []string        // the engine's text families, in order
	omNames    []string        // and their OpenMetrics family names, sorted
	fallback   http.Handler    // promhttp's
	omFallback http.Handler    // the same for OpenMetrics 1
}

// textScrapes counts the scrapes the fast path served, for the tests.
var textScrapes atomic.Uint64

// textBufs are the buffers the engine's families are written to.
var textBufs sync.Pool

type textBuf struct {
	b    []byte
	ends []int
}

// newTextHandler returns g's metrics handler, with the fast path where g is
// a *Registry. Its options are the ones the fast path implements: errors
// logged to errorLog and the rest served (promhttp.ContinueOnError),
// OpenMetrics offered, no compression (withGzip compresses), no timeout
// and no in-flight limit (NewHandler sets them around it).
func newTextHandler(g prometheus.Gatherer, errorLog promhttp.Logger) http.Handler {
	opts := promhttp.HandlerOpts{
		ErrorLog:           errorLog,
		ErrorHandling:      promhttp.ContinueOnError,
		EnableOpenMetrics:  true,
		DisableCompression: true,
	}
	h := &textHandler{errorLog: errorLog, formats: expfmt.DefaultOpenMetricsAcceptedFormats()}
	if r, ok := g.(*Registry); ok {
		h.r, h.names, h.omNames, g = r, r.engine.textFamilyNames(), r.engine.textOpenMetricsNames(), r.all
	}
	h.fallback = promhttp.HandlerFor(g, opts)
	h.omFallback = promhttp.HandlerFor(openMetricsGatherer{g}, opts)
	return h
}

func (h *textHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	format := expfmt.NegotiateAccept(req.Header, h.formats...)
	text, om := format.FormatType() == expfmt.TypeTextPlain, isOpenMetrics1(format)
	if h.names == nil || !text && !om ||
		(req.URL != nil && req.URL.RawQuery != "" && len(req.URL.Query()["name[]"]) > 0) ||
		!h.serveText(w, format, om) {
		// The handlers negotiate as above: the same format.
		if om {
			h.omFallback.ServeHTTP(w, req)
		} else {
			h.fallback.ServeHTTP(w, req)
		}
	}
}

// isOpenMetrics1 reports whether expfmt.NewEncoder writes format with
// MetricFamilyToOpenMetrics: OpenMetrics, but not 2.0.0.
func isOpenMetrics1(format expfmt.Format) bool {
	if format.FormatType() != expfmt.TypeOpenMetrics {
		return false
	}
	_, params, err := mime.ParseMediaType(string(format))
	return err != nil || params["version"] != expfmt.OpenMetricsVersion_2_0_0
}

// serveText writes the scrape in the text format (OpenMetrics with om) and
// reports true, or writes nothing and reports false where the engine's
// families cannot be written by the fast path.
func (h *textHandler) serveText(w http.ResponseWriter, format expfmt.Format, om bool) bool {
	tb, _ := textBufs.Get().(*textBuf)
	if tb == nil {
		tb = &textBuf{}
	}
	defer textBufs.Put(tb)
	var ok bool
	tb.b, tb.ends, ok = h.r.engine.appendText(tb.b[:0], tb.ends[:0], om)
	if !ok {
		return false
	}
	mfs, err := h.r.others.Gather()
	for _, mf := range mfs {
		if _, clash := slices.BinarySearch(h.names, mf.GetName()); clash {
			return false // the full registry says what is wrong
		}
	}
	if om {
		mfs = openMetricsFamilies(mfs, h.names)
		for _, mf := range mfs {
			// Another family named as one of the engine's counters is
			// there: the engine's headers are written already, and the
			// fallback serves the counter as unknown.
			if _, clash := slices.BinarySearch(h.omNames, openMetricsName(mf)); clash {
				return false
			}
		}
	}

	// From here as promhttp's handler with ContinueOnError, with the
	// engine's families as a part of mfs.
	textScrapes.Add(1)
	if err != nil {
		h.errorLog.Println("error gathering metrics:", err)
		if len(mfs) == 0 && len(tb.b) == 0 {
			httpError(w, err)
			return true
		}
	}
	w.Header().Add("Vary", "Accept")
	w.Header().Set("Content-Type", string(format))

	enc := expfmt.NewEncoder(w, format)
	// An error writing is logged and the rest is written, as promhttp does.
	handleError := func(err error) bool {
		if err != nil {
			h.errorLog.Println("error encoding and sending metric family:", err)
		}
		return false
	}
	// Merge the two sorted lists of families, writing the engine's in runs.
	e, from := 0, 0 // the next engine family, and where its run starts
	flush := func(upTo int) bool {
		if upTo > from {
			_, err := w.Write(tb.b[from:upTo])
			from = upTo
			return handleError(err)
		}
		return false
	}
	for _, mf := range mfs {
		for e < len(h.names) && h.names[e] < mf.GetName() {
			e++
		}
		end := 0
		if e > 0 {
			end = tb.ends[e-1]
		}
		if flush(end) || handleError(enc.Encode(mf)) {
			return true
		}
	}
	if flush(len(tb.b)) {
		return true
	}
	if closer, ok := enc.(expfmt.Closer); ok {
		handleError(closer.Close())
	}
	return true
}

// httpError is promhttp's answer to a failed gather.
func httpError(rsp http.ResponseWriter, err error) {
	rsp.Header().Del("Content-Encoding")
	http.Error(rsp, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
}
