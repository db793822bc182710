package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// API is the part of the Prometheus HTTP API the report reads;
// client_golang's v1.API is one.
type API interface {
	QueryRange(ctx context.Context, query string, r v1.Range, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error)
	Query(ctx context.Context, query string, ts time.Time, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error)
}

// ErrUnreachable wraps a failure to reach Prometheus at all.
var ErrUnreachable = errors.New("Prometheus is unreachable")

// errNoAnswer is a query the server did not answer at all in time.
var errNoAnswer = errors.New("no answer")

// ErrNoData is returned when the range holds no gpuxray series.
var ErrNoData = errors.New("no gpuxray series in the range")

// grid is the report's time grid: n steps of step ending at end; step i
// covers (start+i·step, start+(i+1)·step].
type grid struct {
	start time.Time
	step  time.Duration
	n     int
}

func (g grid) at(i int) time.Time { return g.start.Add(time.Duration(i+1) * g.step) }

// index returns the step whose end is t, or -1.
func (g grid) index(t time.Time) int {
	d := t.Sub(g.start)
	if d <= 0 || d%g.step != 0 {
		return -1
	}
	i := int(d/g.step) - 1
	if i >= g.n {
		return -1
	}
	return i
}

// series is one labelled series on the grid; NaN where absent.
type series struct {
	labels model.Metric
	vals   []float64
}

// querier runs range queries over the grid, in chunks the server accepts.
type querier struct {
	api API
	// base is the server's URL as given (no credentials), for errors.
	base           string
	timeout        time.Duration
	maxPoints      int
	maxSeries      int
	maxAnswerBytes int64
	g              grid

	mu       sync.Mutex
	warnings []string
	// seen and extra dedupe and bound Prometheus' own warnings.
	seen     map[string]bool
	extra    int
	bad      map[string]*badValues
	progress func(done, total int)
	done     int
	total    int
}

// badValues is what one query answered that no figure can hold.
type badValues struct {
	n     int
	first float64
	at    time.Time
}

// maxValue bounds every value the report reads: more than a million GPUs'
// time over thirty years in seconds, a petabyte of one allocation's memory.
// Sums of a million steps of such values stay finite.
const maxValue = 1e15

// maxPromWarnings is how many distinct warnings of Prometheus' own the
// report repeats; the rest are counted.
const maxPromWarnings = 10

// usable is whether v can enter a figure: finite, within maxValue, and not
// negative unless the query's values may be (a PriorityClass's value).
func usable(v float64, signed bool) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > maxValue {
		return false
	}
	return signed || v >= 0
}

// ErrAnswerTooLarge is an answer larger than LimitAnswers allows.
var ErrAnswerTooLarge = errors.New("Prometheus' answer is larger than the limit")

// LimitAnswers bounds the body of every answer read through rt to max
// bytes (after decompression): reading more fails with ErrAnswerTooLarge,
// before the client holds it all in memory.
func LimitAnswers(rt http.RoundTripper, max int64) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return answerLimit{rt: rt, max: max}
}

type answerLimit struct {
	rt  http.RoundTripper
	max int64
}

func (l answerLimit) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(r)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: l.max}
	return resp, nil
}

type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrAnswerTooLarge
	}
	// One byte past the limit tells a body of exactly max bytes from a longer one.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, ErrAnswerTooLarge
	}
	return n, err
}

// limitError is an answer that a smaller query may avoid: too many points,
// too many samples, a timeout the server declared, or an answer over the
// size limit, as Prometheus or VictoriaMetrics says it. Our own deadline is
// not one: a server that said nothing in that time is stalled (stalled).
func limitError(err error) bool {
	if errors.Is(err, ErrAnswerTooLarge) {
		return true
	}
	var e *v1.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Type {
	case v1.ErrTimeout, v1.ErrCanceled:
		return true
	}
	m := strings.ToLower(e.Msg + " " + e.Detail)
	// VictoriaMetrics: "too many points for the given step …; cannot exceed
	// -search.maxPointsPerTimeseries".
	return strings.Contains(m, "maximum resolution") || strings.Contains(m, "too many samples") ||
		strings.Contains(m, "too many points") ||
		strings.Contains(m, "timed out") || strings.Contains(m, "timeout")
}

// stalled is our own deadline passing with no answer: the server was asked
// to give up a little earlier (serverTimeout), so it did not answer at all.
func stalled(err error) bool {
	var ue *url.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ue) && ue.Timeout()
}

// serverTimeout is the timeout the server is asked to keep: a tenth less
// than our deadline, so that a live server's "query timed out" arrives
// before we stop waiting, and our deadline passing means it said nothing.
func serverTimeout(d time.Duration) time.Duration { return d - d/10 }

// describe turns a client error into one sentence. base is the server's
// URL as given: the one a redirect loop or a relative Location would lose.
func describe(err error, base string) error {
	var ue *url.Error
	if errors.As(err, &ue) && !ue.Timeout() && !errors.Is(err, ErrAnswerTooLarge) {
		at := base
		if at == "" {
			at = redact(ue.URL)
		}
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, at, ue.Err)
	}
	var e *v1.Error
	if errors.As(err, &e) && e.Type == v1.ErrClient && (strings.Contains(e.Msg, "401") || strings.Contains(e.Msg, "403")) {
		return fmt.Errorf("Prometheus refused the request (%s): check the credentials", e.Msg)
	}
	return err
}

// redact keeps a URL's scheme, host and path: no query string or password.
func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" || p.Host == "" {
		return "the given URL"
	}
	return p.Scheme + "://" + p.Host + strings.TrimSuffix(strings.SplitN(p.Path, "/api/", 2)[0], "/")
}

// short is a query as errors and warnings name it: its first 100 characters.
func short(expr string) string {
	if len(expr) <= 100 {
		return expr
	}
	return expr[:100] + "…"
}

// queryRange evaluates expr at every step end, shifted by offset (negative:
// earlier), and returns its series on the grid; signed allows negative
// values. A chunk the server refuses for its size is split; one it does not
// answer within the timeout is tried once more, halved, then given up.
func (q *querier) queryRange(ctx context.Context, expr string, offset time.Duration, signed bool) ([]series, error) {
	chunk := min(q.maxPoints, q.g.n)
	by := map[model.Fingerprint]*series{}
	stalls := 0
	for first := 0; first < q.g.n; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		last := min(first+chunk, q.g.n) - 1
		r := v1.Range{Start: q.g.at(first).Add(offset), End: q.g.at(last).Add(offset), Step: q.g.step}
		qctx, cancel := context.WithTimeout(ctx, q.timeout)
		v, warns, _, err := q.api.QueryRange(qctx, expr, r, v1.WithTimeout(serverTimeout(q.timeout)))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if stalled(err) {
				if stalls++; stalls < 2 && chunk > 1 {
					chunk = max(1, chunk/2)
					continue
				}
				return nil, fmt.Errorf("Prometheus at %s did not answer query %s from %s to %s within --prometheus.timeout %s, %s: is it overloaded or stalled?",
					q.where(), short(expr), r.Start.Format(time.RFC3339), r.End.Format(time.RFC3339), model.Duration(q.timeout), plural(stalls, "once", "twice"))
			}
			if limitError(err) && chunk > 1 {
				// Split: the server's point, sample or time limit, or ours on size.
				chunk = max(1, chunk/2)
				continue
			}
			if errors.Is(err, ErrAnswerTooLarge) {
				return nil, fmt.Errorf("Prometheus' answer to query %s for the one step at %s is larger than --prometheus.max-answer-bytes (%d bytes): raise the limit if the answer is right",
					short(expr), r.End.Format(time.RFC3339), q.maxAnswerBytes)
			}
			return nil, fmt.Errorf("query %s from %s to %s: %w", short(expr), r.Start.Format(time.RFC3339), r.End.Format(time.RFC3339), describe(err, q.base))
		}
		q.warn(warns)
		m, ok := v.(model.Matrix)
		if !ok {
			return nil, fmt.Errorf("query %s: got a %s, want a matrix", short(expr), typeOf(v))
		}
		for k, ss := range m {
			// A signal is heard between any few thousand series of an answer.
			if k%4096 == 0 && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			fp := ss.Metric.Fingerprint()
			s := by[fp]
			if s == nil {
				if len(by) >= q.maxSeries {
					return nil, fmt.Errorf("query %s returned more than --prometheus.max-series (%d) series: raise the limit if the answer is right", short(expr), q.maxSeries)
				}
				s = &series{labels: ss.Metric, vals: make([]float64, q.g.n)}
				for i := range s.vals {
					s.vals[i] = math.NaN()
				}
				by[fp] = s
			}
			for _, p := range ss.Values {
				i := q.g.index(p.Timestamp.Time().Add(-offset))
				if i < 0 {
					continue
				}
				if v := float64(p.Value); usable(v, signed) {
					s.vals[i] = v
				} else {
					q.refuse(expr, v, p.Timestamp.Time())
				}
			}
		}
		q.step(last - first + 1)
		first = last + 1
		stalls = 0
	}
	out := make([]series, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sortSeries(out)
	return out, ctx.Err()
}

// sortSeries sorts series by their labels, each spelled once: spelling
// them at every comparison took a minute for 200,000 series, deaf to
// signals.
func sortSeries(ss []series) {
	type keyed struct {
		key string
		s   series
	}
	ks := make([]keyed, len(ss))
	for i, s := range ss {
		ks[i] = keyed{s.labels.String(), s}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	for i := range ks {
		ss[i] = ks[i].s
	}
}

// where is the server's URL for a message.
func (q *querier) where() string {
	if q.base == "" {
		return "the given URL"
	}
	return q.base
}

func typeOf(v model.Value) string {
	if v == nil {
		return "nothing"
	}
	return v.Type().String()
}

// warn keeps Prometheus' warnings, each once, at most maxPromWarnings.
func (q *querier) warn(ws v1.Warnings) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range ws {
		switch {
		case q.seen[w]:
		case len(q.seen) >= maxPromWarnings:
			q.extra++
		default:
			if q.seen == nil {
				q.seen = map[string]bool{}
			}
			q.seen[w] = true
			q.warnings = append(q.warnings, "Prometheus: "+short(w))
		}
	}
}

// refuse counts a value no figure can hold.
func (q *querier) refuse(expr string, v float64, at time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bad == nil {
		q.bad = map[string]*badValues{}
	}
	b := q.bad[expr]
	if b == nil {
		b = &badValues{first: v, at: at}
		q.bad[expr] = b
	}
	b.n++
}

// allWarnings is Prometheus' warnings, how many more it gave, and the
// values refused, by query.
func (q *querier) allWarnings() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := slices.Clone(q.warnings)
	if q.extra > 0 {
		out = append(out, fmt.Sprintf("Prometheus gave %d more warnings", q.extra))
	}
	exprs := make([]string, 0, len(q.bad))
	for e := range q.bad {
		exprs = append(exprs, e)
	}
	slices.Sort(exprs)
	for _, e := range exprs {
		b := q.bad[e]
		out = append(out, fmt.Sprintf("Prometheus answered %d %s to query %s that no figure can hold (not finite, negative or beyond ±1e15; the first %g at %s): they were left out, so the figures that read them are low",
			b.n, plural(b.n, "value", "values"), short(e), b.first, b.at.UTC().Format(time.RFC3339)))
	}
	return out
}

// step records progress: n more points of one query done.
func (q *querier) step(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.done += n
	if q.progress != nil {
		q.progress(q.done, q.total)
	}
}

// sampleTime is the time of the first (first) or last raw sample of the
// selector sel in the step that ends at at: the step's start, for the
// first, or its end, for the last, when it has none (the bounds of the
// span without data that it refines).
func (q *querier) sampleTime(ctx context.Context, sel string, at time.Time, first bool) (time.Time, error) {
	qctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	expr := sel + "[" + model.Duration(q.g.step).String() + "]"
	v, _, _, err := q.api.Query(qctx, expr, at, v1.WithTimeout(serverTimeout(q.timeout)))
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
		if stalled(err) {
			return time.Time{}, fmt.Errorf("%w within --prometheus.timeout %s", errNoAnswer, model.Duration(q.timeout))
		}
		return time.Time{}, describe(err, q.base)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return time.Time{}, fmt.Errorf("query %s: got a %s, want a matrix", short(expr), typeOf(v))
	}
	from := at.Add(-q.g.step)
	var best time.Time
	for _, s := range m {
		for _, p := range s.Values {
			t := p.Timestamp.Time().UTC()
			if !t.After(from) || t.After(at) {
				continue
			}
			if best.IsZero() || first && t.Before(best) || !first && t.After(best) {
				best = t
			}
		}
	}
	if best.IsZero() {
		if first {
			return from, nil
		}
		return at, nil
	}
	return best, nil
}
