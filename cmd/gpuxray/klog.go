package main

import (
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"k8s.io/klog/v2"
)

// routeKlog sends what client-go logs through klog (reflector warnings,
// throttling, watch errors) to the agent's logger, named client-go, so it
// is JSON in the cluster like every other line instead of klog's own text
// on stderr. klog is process-wide: the agent calls this once.
func routeKlog(logger *zap.Logger) {
	klog.SetLogger(zapr.NewLogger(logger.Named("client-go")))
}
