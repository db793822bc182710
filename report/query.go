package report

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sort"
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
}

// ErrUnreachable wraps a failure to reach Prometheus at all.
var ErrUnreachable = errors.New("Prometheus is unreachable")

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
	api       API
	timeout   time.Duration
	maxPoints int
	g         grid

	mu       sync.Mutex
	warnings []string
	progress func(done, total int)
	done     int
	total    int
}

// limitError is an answer that a smaller query may avoid: too many points,
// too many samples, or a timeout, as Prometheus or VictoriaMetrics says it.
func limitError(err error) bool {
	var e *v1.Error
	if !errors.As(err, &e) {
		return errors.Is(err, context.DeadlineExceeded)
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

// describe turns a client error into one sentence.
func describe(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && !ue.Timeout() {
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, redact(ue.URL), ue.Err)
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
	if err != nil {
		return "the given URL"
	}
	return p.Scheme + "://" + p.Host + strings.TrimSuffix(strings.SplitN(p.Path, "/api/", 2)[0], "/")
}

// queryRange evaluates expr at every step end, shifted by offset (negative:
// earlier), and returns its series on the grid.
func (q *querier) queryRange(ctx context.Context, expr string, offset time.Duration) ([]series, error) {
	chunk := min(q.maxPoints, q.g.n)
	by := map[model.Fingerprint]*series{}
	for first := 0; first < q.g.n; {
		last := min(first+chunk, q.g.n) - 1
		r := v1.Range{Start: q.g.at(first).Add(offset), End: q.g.at(last).Add(offset), Step: q.g.step}
		qctx, cancel := context.WithTimeout(ctx, q.timeout)
		v, warns, _, err := q.api.QueryRange(qctx, expr, r, v1.WithTimeout(q.timeout))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if limitError(err) && chunk > 1 {
				// Split: the server's point, sample or time limit.
				chunk = max(1, chunk/2)
				continue
			}
			return nil, fmt.Errorf("query %s from %s to %s: %w", expr, r.Start.Format(time.RFC3339), r.End.Format(time.RFC3339), describe(err))
		}
		q.mu.Lock()
		for _, w := range warns {
			q.warnings = append(q.warnings, "Prometheus: "+w)
		}
		q.mu.Unlock()
		m, ok := v.(model.Matrix)
		if !ok {
			return nil, fmt.Errorf("query %s: got a %s, want a matrix", expr, v.Type())
		}
		for _, ss := range m {
			fp := ss.Metric.Fingerprint()
			s := by[fp]
			if s == nil {
				s = &series{labels: ss.Metric, vals: make([]float64, q.g.n)}
				for i := range s.vals {
					s.vals[i] = math.NaN()
				}
				by[fp] = s
			}
			for _, p := range ss.Values {
				if i := q.g.index(p.Timestamp.Time().Add(-offset)); i >= 0 {
					s.vals[i] = float64(p.Value)
				}
			}
		}
		q.step(last - first + 1)
		first = last + 1
	}
	out := make([]series, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].labels.String() < out[j].labels.String() })
	return out, nil
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
