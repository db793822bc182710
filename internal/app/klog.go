package app

import (
	"context"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"k8s.io/klog/v2"
)

// wholeProcess marks the context of a run that is the whole process (main's),
// not one of the many runs a test makes side by side: only such a run may
// set process-wide state such as klog's logger.
type wholeProcess struct{}

func ownsProcess(ctx context.Context) bool { v, _ := ctx.Value(wholeProcess{}).(bool); return v }

// routeKlog sends what client-go logs through klog (reflector warnings,
// throttling, watch errors) to the agent's logger, named client-go, so it
// is JSON in the cluster like every other line instead of klog's own text
// on stderr. klog is process-wide: the agent calls this once.
func routeKlog(logger *zap.Logger) {
	klog.SetLogger(zapr.NewLogger(logger.Named("client-go")))
}
