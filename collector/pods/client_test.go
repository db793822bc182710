package pods

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/internal/testtool"
)

const (
	protobufType = "application/vnd.kubernetes.protobuf"
	jsonType     = "application/json"
)

// apiServer is a loopback stand-in for the API server's /api/v1/pods. It
// serves the pods of the node its field selector names, as a list or as a
// watch stream, encoded as the request asks (protobuf where it accepts it,
// as the API server does), and records every request. With watchList it streams the first list through
// a watch, as an API server with the WatchList feature does; without, it
// rejects such a watch as invalid, as one without the feature does.
type apiServer struct {
	t         *testing.T
	srv       *httptest.Server
	watchList bool
	codecs    serializer.CodecFactory

	mu     sync.Mutex
	pods   []*corev1.Pod
	events chan watch.Event // sent on the open watch
	reqs   []apiRequest
}

// apiRequest is what the server saw of a request, and what it answered.
type apiRequest struct {
	query       url.Values
	rawQuery    string
	accept      string
	userAgent   string
	auth        string
	status      int
	contentType string
}

func newAPIServer(t *testing.T, watchList bool, pods ...*corev1.Pod) *apiServer {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := &apiServer{
		t: t, watchList: watchList, codecs: serializer.NewCodecFactory(scheme),
		pods: pods, events: make(chan watch.Event, 10),
	}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

// kubeconfig writes a kubeconfig that reaches the server, trusting its
// certificate, and returns its path.
func (s *apiServer) kubeconfig() string {
	path := s.t.TempDir() + "/kubeconfig"
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}))
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, s.srv.URL, ca)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return path
}

func (s *apiServer) requests() []apiRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func (s *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	mediaType := jsonType
	if strings.Contains(r.Header.Get("Accept"), protobufType) {
		mediaType = protobufType
	}
	info, ok := runtime.SerializerInfoForMediaType(s.codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		s.t.Errorf("no serializer for %s", mediaType)
		return
	}
	rec := apiRequest{
		query: q, rawQuery: r.URL.RawQuery, accept: r.Header.Get("Accept"),
		userAgent: r.Header.Get("User-Agent"), auth: r.Header.Get("Authorization"),
	}
	answer := func(status int, contentType string) {
		rec.status, rec.contentType = status, contentType
		s.mu.Lock()
		s.reqs = append(s.reqs, rec)
		s.mu.Unlock()
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
	}
	enc := s.codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	fail := func(err *apierrors.StatusError) {
		answer(int(err.ErrStatus.Code), mediaType)
		if err := enc.Encode(&err.ErrStatus, w); err != nil {
			s.t.Errorf("encode status: %v", err)
		}
	}

	nodeName, ok := strings.CutPrefix(q.Get("fieldSelector"), "spec.nodeName=")
	if r.URL.Path != "/api/v1/pods" || r.Method != http.MethodGet || !ok {
		fail(apierrors.NewBadRequest("only pods of one node are served here"))
		return
	}
	s.mu.Lock()
	var onNode []*corev1.Pod
	for _, p := range s.pods {
		if p.Spec.NodeName == nodeName {
			onNode = append(onNode, p)
		}
	}
	s.mu.Unlock()

	if q.Get("watch") != "true" {
		list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
		for _, p := range onNode {
			list.Items = append(list.Items, *p)
		}
		answer(http.StatusOK, mediaType)
		if err := enc.Encode(list, w); err != nil {
			s.t.Errorf("encode list: %v", err)
		}
		return
	}

	initial := q.Get("sendInitialEvents") == "true"
	if initial && !s.watchList {
		fail(apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "", field.ErrorList{
			field.Forbidden(field.NewPath("sendInitialEvents"), "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"),
		}))
		return
	}
	streamType := mediaType
	if mediaType != jsonType {
		streamType += ";stream=watch" // as the API server labels a protobuf watch
	}
	answer(http.StatusOK, streamType)
	frames := info.StreamSerializer.Framer.NewFrameWriter(w)
	streamEnc := s.codecs.EncoderForVersion(info.StreamSerializer.Serializer, corev1.SchemeGroupVersion)
	send := func(ev watch.Event) bool {
		var obj bytes.Buffer
		if err := enc.Encode(ev.Object, &obj); err != nil {
			s.t.Errorf("encode %s event: %v", ev.Type, err)
			return false
		}
		out := &metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: obj.Bytes()}}
		if err := streamEnc.Encode(out, frames); err != nil {
			return false // the client went away
		}
		w.(http.Flusher).Flush()
		return true
	}
	if initial {
		for _, p := range onNode {
			if !send(watch.Event{Type: watch.Added, Object: p}) {
				return
			}
		}
		end := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: "10", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		}}
		if !send(watch.Event{Type: watch.Bookmark, Object: end}) {
			return
		}
	}
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev := <-s.events:
			if !send(ev) {
				return
			}
		}
	}
}

// jobPod is a Job's pod that names its model in a label.
func jobPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "training", Name: "bert-ft-x7k2p", UID: "uid-job", ResourceVersion: "11",
			Labels: map[string]string{"gpuxray.io/model": "bert", "team": "vision"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1", Kind: "Job", Name: "bert-ft", UID: "job-uid", Controller: new(true),
			}},
		},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// TestNewClientAgainstServer runs a Source on NewClient's client against a
// loopback API server, over TLS: the pods it serves are known with their workload,
// model and extra labels, and every request asked for this node's pods
// only, as gpuxray with the kubeconfig's token, in JSON: the server's
// corev1 types, encoded as a real API server encodes them, decode into the
// package's Pod.
func TestNewClientAgainstServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		watchList bool
		// wantCalls are the requests up to the first plain watch:
		// "watch-list" (rejected or not), "list", "watch".
		wantCalls []string
	}{
		{"watch-list", true, []string{"watch-list"}},
		{"no watch-list on the server", false, []string{"watch-list rejected", "list", "watch"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newAPIServer(t, tt.watchList, vllmPod("uid-1"), otherNodePod())
			cfg := testConfig()
			cfg.Kubeconfig = api.kubeconfig()
			client, err := NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			src, err := New(cfg, client, zaptest.NewLogger(t))
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
			t.Cleanup(func() { // before the server closes: Close waits for the open watch
				cancel()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Error("Run did not return after its context was cancelled")
				}
			})
			wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
			defer wcancel()
			if !src.WaitForSync(wctx) {
				t.Fatalf("no sync; requests: %+v", api.requests())
			}

			want := collector.Pod{
				UID: "uid-1", Namespace: "serving", Name: "vllm-llama-7c9d5b8f6d-x2k9q", Phase: "Running",
				WorkloadKind: "Deployment", Workload: "vllm-llama", Model: "llama-3.1-8b",
				ExtraLabels: map[string]string{"team": "nlp", "cost_center": strings.Repeat("c", 128)},
				ContainerIDs: map[string]string{
					"vllm": strings.Repeat("a", 64), "fetch": strings.Repeat("b", 64), "sidecar": strings.Repeat("c", 64),
				},
			}
			if got, ok := src.Pod("serving", want.Name); !ok || !podEqual(got, want) {
				t.Errorf("Pod = %+v, %v\nwant %+v", got, ok, want)
			}
			if _, ok := src.PodByUID("other-uid"); ok {
				t.Error("a pod of another node is known")
			}

			// Through the watch: a Job's pod comes and goes.
			testtool.Eventually(t, "a watch is open", func() bool {
				reqs := api.requests()
				last := reqs[len(reqs)-1]
				return last.status == http.StatusOK && last.query.Get("watch") == "true"
			})
			api.events <- watch.Event{Type: watch.Added, Object: jobPod()}
			testtool.Eventually(t, "the Job's pod is known", func() bool {
				p, ok := src.PodByUID("uid-job")
				return ok && p.WorkloadKind == "Job" && p.Workload == "bert-ft" && p.Model == "bert" &&
					p.Phase == "Pending" && p.ExtraLabels["team"] == "vision"
			})
			gone := jobPod()
			gone.ResourceVersion = "12"
			api.events <- watch.Event{Type: watch.Deleted, Object: gone}
			testtool.Eventually(t, "the Job's pod is forgotten", func() bool {
				_, ok := src.PodByUID("uid-job")
				return !ok
			})

			reqs := api.requests()
			var calls []string
			for i, r := range reqs {
				if r.query.Get("fieldSelector") != "spec.nodeName="+node ||
					!strings.Contains(r.rawQuery, "fieldSelector=spec.nodeName%3D"+node) {
					t.Errorf("request %d: query %q, want fieldSelector=spec.nodeName%%3D%s", i, r.rawQuery, node)
				}
				if r.userAgent != "gpuxray" || r.accept != jsonType || r.auth != "Bearer not-a-real-token" {
					t.Errorf("request %d: User-Agent %q, Accept %q, Authorization %q", i, r.userAgent, r.accept, r.auth)
				}
				if !strings.HasPrefix(r.contentType, jsonType) {
					t.Errorf("request %d answered as %q, want %s", i, r.contentType, jsonType)
				}
				switch {
				case r.query.Get("watch") != "true":
					calls = append(calls, "list")
				case r.query.Get("sendInitialEvents") == "true":
					if r.query.Get("allowWatchBookmarks") != "true" || r.query.Get("resourceVersionMatch") != "NotOlderThan" {
						t.Errorf("request %d: watch-list query %q", i, r.rawQuery)
					}
					if r.status != http.StatusOK {
						calls = append(calls, "watch-list rejected")
					} else {
						calls = append(calls, "watch-list")
					}
				default:
					if r.query.Get("resourceVersion") != "10" {
						t.Errorf("request %d: watch from resource version %q, want the list's 10", i, r.query.Get("resourceVersion"))
					}
					calls = append(calls, "watch")
				}
			}
			if len(calls) < len(tt.wantCalls) || !slices.Equal(calls[:len(tt.wantCalls)], tt.wantCalls) {
				t.Errorf("calls = %q, want them to start with %q", calls, tt.wantCalls)
			}

			// A rejected streaming list is the API server saying it has no
			// WatchList: the fallback to a list is not a failure.
			if errs := takeHealth(t, src, "the source is up", func(up bool, _ []error) bool { return up }); len(errs) != 0 {
				t.Errorf("errors counted: %v", errs)
			}
		})
	}
}
