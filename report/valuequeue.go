package report

import (
	"context"
	"slices"

	"github.com/prometheus/common/model"
)

// The seams between value.go and the rest of the report, in one place.

// valueQuery runs one of value.go's queries over the grid.
func (q *querier) valueQuery(ctx context.Context, expr string) ([]series, error) {
	return q.queryRange(ctx, expr, 0, false)
}

func stepString(d interface{ Seconds() float64 }) string {
	return model.Duration(int64(d.Seconds() * 1e9)).String()
}

// verdictShortByType is the verdict's missing GPUs by GPU type: the
// verdict's own by type where the queue X-ray matched waiters to types,
// else all of them as "any".
func verdictShortByType(r *Report) []typedCount {
	var out []typedCount
	for _, t := range r.Verdict.GPUTypes {
		if t.GPUsShort > 0 {
			out = append(out, typedCount{gpuType: t.GPUType, gpus: t.GPUsShort})
		}
	}
	if len(out) == 0 {
		out = []typedCount{{gpuType: GPUTypeAny, gpus: r.Verdict.GPUsShort}}
	}
	return out
}

// demandByType is each GPU type's pending demand and reclaimable capacity
// at each step, for the forecast: the queue X-ray's, by the type waiters
// select, set against the free and idle whole GPUs of that type; waiters
// that select none ("any") against what every type has left over after
// its own waiters. Without the X-ray's types, the cluster's pending and
// reclaimable GPUs as "any".
func demandByType(r *Report, in input, steps []DemandStep) []typeDemand {
	if len(in.ksm) == 0 {
		return nil
	}
	if len(r.Queue.types) == 0 {
		td := typeDemand{gpuType: GPUTypeAny, pending: make([]float64, len(steps)), reclaimable: make([]float64, len(steps))}
		for i, s := range steps {
			td.pending[i], td.reclaimable[i] = s.Pending, s.Reclaimable()
		}
		return []typeDemand{td}
	}
	names := make([]string, 0, len(r.Queue.types))
	for name := range r.Queue.types {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []typeDemand
	for _, name := range names {
		ts := r.Queue.types[name]
		td := typeDemand{gpuType: name, pending: slices.Clone(ts.pending), reclaimable: slices.Clone(ts.idle)}
		if name == GPUTypeAny {
			if !slices.ContainsFunc(ts.pending, func(v float64) bool { return v > 0 }) {
				continue
			}
			for i := range td.reclaimable {
				td.reclaimable[i] = 0
				for other, os := range r.Queue.types {
					if other != GPUTypeAny {
						td.reclaimable[i] += max(0, os.idle[i]-os.pending[i])
					}
				}
			}
		}
		out = append(out, td)
	}
	return out
}
