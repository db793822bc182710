package listwatch

import (
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestRecoveryAfterOutage measures how long a source takes to be up again
// after an API server outage ends: the figures in docs/reliability.md. It
// waits out real backoffs (minutes), so it runs only with
// GPUXRAY_MEASURE=1:
//
//	GPUXRAY_MEASURE=1 go test -run TestRecoveryAfterOutage -v ./collector/internal/listwatch
//
// It asserts only that the source recovers; the times are logged.
func TestRecoveryAfterOutage(t *testing.T) {
	if os.Getenv("GPUXRAY_MEASURE") == "" {
		t.Skip("a measurement of real backoffs: set GPUXRAY_MEASURE=1")
	}
	t.Parallel()
	for _, outage := range []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute} {
		for _, code := range []int{http.StatusInternalServerError, http.StatusUnauthorized, http.StatusForbidden} {
			t.Run(outage.String()+"/"+http.StatusText(code), func(t *testing.T) {
				t.Parallel()
				h := newHostile(t)
				var failing atomic.Bool
				list := func(w http.ResponseWriter, _ *http.Request) {
					if failing.Load() {
						writeStatus(w, code, http.StatusText(code))
						return
					}
					writeList(w, "10", thingJSON("a", "1", "one"))
				}
				h.set(list, func(w http.ResponseWriter, r *http.Request) {
					if failing.Load() {
						writeStatus(w, code, http.StatusText(code))
						return
					}
					quietWatch(w, r)
				})
				src := run(t, h, nil)
				healthUntil(t, src, "up", func(up bool, _ map[string]int) bool { return up })
				failing.Store(true)
				h.srv.CloseClientConnections() // the open watch ends; every call now fails
				time.Sleep(outage)
				failing.Store(false)
				back := time.Now()
				deadline := back.Add(3 * time.Minute)
				for {
					if up, _ := src.Health(); up {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("not up 3 minutes after the outage ended")
					}
					time.Sleep(50 * time.Millisecond)
				}
				t.Logf("outage %s answering %d: up %.1f s after it ended", outage, code, time.Since(back).Seconds())
			})
		}
	}
}
