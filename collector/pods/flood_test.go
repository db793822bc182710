package pods

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/gpuxray/gpuxray/internal/testtool"
)

// TestFloodMemory measures the heap the pod source holds after a watch
// floods it with 20,000 pods of the node, 4 KiB of annotations each: the
// figure in docs/reliability.md. It runs only with GPUXRAY_MEASURE=1:
//
//	GPUXRAY_MEASURE=1 go test -run TestFloodMemory -v ./collector/pods
func TestFloodMemory(t *testing.T) {
	if os.Getenv("GPUXRAY_MEASURE") == "" {
		t.Skip("a measurement: set GPUXRAY_MEASURE=1")
	}
	const n = 20000
	ann := strings.Repeat("a", 4096)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Query().Get("watch") != "true":
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
			return
		case r.URL.Query().Get("sendInitialEvents") == "true":
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422}`)
			return
		}
		for i := range n {
			fmt.Fprintf(w, `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p%d","namespace":"ns","uid":"u%d","resourceVersion":"%d","annotations":{"x":%q}},"spec":{"nodeName":%q},"status":{"phase":"Running"}}}`+"\n",
				i, i, i+2, ann, node)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	cfg := DefaultConfig(node)
	cfg.Kubeconfig = (&jsonServer{srv: srv}).kubeconfig(t)
	client, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(cfg, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = src.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testtool.Eventually(t, "the flood is read", func() bool { return src.lw.ResourceVersion() == fmt.Sprint(n+1) })
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("pods kept %d of %d flooded; heap in use after GC %.1f MiB", src.Len(), n, float64(ms.HeapInuse)/(1<<20))
}
