package report

import (
	"context"

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

// verdictShortByType is the verdict's missing GPUs by GPU type.
func verdictShortByType(r *Report) []typedCount {
	return []typedCount{{gpuType: GPUTypeAny, gpus: r.Verdict.GPUsShort}}
}

// demandByType is each GPU type's pending demand and reclaimable capacity
// at each step, for the forecast.
func demandByType(_ *Report, in input, steps []DemandStep) []typeDemand {
	if len(in.ksm) == 0 {
		return nil
	}
	td := typeDemand{gpuType: GPUTypeAny, pending: make([]float64, len(steps)), reclaimable: make([]float64, len(steps))}
	for i, s := range steps {
		td.pending[i], td.reclaimable[i] = s.Pending, s.Reclaimable()
	}
	return []typeDemand{td}
}
