package pods

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpuxray/gpuxray/collector"
)

// readJSON returns testdata/name as a map, to be served as it is or
// edited first.
func readJSON(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// checkRealPod asserts what the source reads of testdata/pod.json, a
// Deployment's pod as `kubectl get -o json` shows it.
func checkRealPod(t *testing.T, p *Pod) {
	t.Helper()
	prio := int32(100000)
	if p.Namespace != "serving" || p.Name != "vllm-llama-7c9d5b8f6d-x2k9q" || p.UID != "0b6a7c1e-2f3d-4e5a-8b9c-0d1e2f3a4b5c" ||
		p.Labels["team"] != "nlp" || p.Annotations["gpuxray.io/model"] != "llama-3.1-8b-instruct" || p.DeletionTimestamp == nil ||
		len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "ReplicaSet" || p.OwnerReferences[0].Controller == nil {
		t.Errorf("metadata: %+v", p.ObjectMeta)
	}
	if want := (PodSpec{NodeName: node, PriorityClassName: "serving-high", Priority: &prio}); p.Spec.NodeName != want.NodeName ||
		p.Spec.PriorityClassName != want.PriorityClassName || p.Spec.Priority == nil || *p.Spec.Priority != prio {
		t.Errorf("spec: %+v, want %+v", p.Spec, want)
	}
	want := PodStatus{
		Phase:                 "Running",
		InitContainerStatuses: []ContainerStatus{{Name: "fetch", ContainerID: "cri-o://" + strings.Repeat("b", 64)}},
		ContainerStatuses: []ContainerStatus{
			{Name: "vllm", ContainerID: "containerd://" + strings.Repeat("a", 64)},
			{Name: "sidecar"},
		},
		// kubectl debug's container: the kubelet lists it nowhere, but its
		// processes can run on the pod's GPUs.
		EphemeralContainerStatuses: []ContainerStatus{{Name: "debugger-x1", ContainerID: "containerd://" + strings.Repeat("d", 64)}},
	}
	if fmt.Sprint(p.Status) != fmt.Sprint(want) {
		t.Errorf("status: %+v\nwant %+v", p.Status, want)
	}
}

// TestDecodeJSON: a pod as the API server sends it — managed fields,
// containers, volumes, tolerations, conditions, images, an ephemeral
// container — decodes into Pod with what the source reads, and survives
// trim and convert; a PriorityClass decodes into its name and value.
// Decoded as the REST clients decode, by kind and apiVersion.
func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	decode := func(gv string, raw []byte, types ...runtime.Object) runtime.Object {
		t.Helper()
		var scheme *runtime.Scheme
		if gv == "v1" {
			scheme = newScheme(coreV1, types...)
		} else {
			scheme = newScheme(schedulingV1, types...)
		}
		obj, _, err := serializer.NewCodecFactory(scheme).UniversalDeserializer().Decode(raw, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}

	raw, err := os.ReadFile("testdata/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	p, ok := decode("v1", raw, &Pod{}, &PodList{}).(*Pod)
	if !ok {
		t.Fatalf("decoded %T, want *Pod", p)
	}
	checkRealPod(t, p)
	src, err := New(testConfig(), fakePods{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := src.convert(p)
	wantPod := collector.Pod{
		UID: "0b6a7c1e-2f3d-4e5a-8b9c-0d1e2f3a4b5c", Namespace: "serving", Name: "vllm-llama-7c9d5b8f6d-x2k9q", Phase: "Running",
		WorkloadKind: "Deployment", Workload: "vllm-llama", Model: "llama-3.1-8b-instruct",
		ExtraLabels:  map[string]string{"team": "nlp", "cost_center": ""},
		ContainerIDs: map[string]string{"vllm": strings.Repeat("a", 64), "fetch": strings.Repeat("b", 64), "debugger-x1": strings.Repeat("d", 64)},
	}
	wantSched := collector.Scheduling{PriorityClass: "serving-high", Priority: 100000, HasPriority: true, Queue: "serving"}
	if !podEqual(got, wantPod) || got.StaticUID != "" || got.Scheduling != wantSched {
		t.Errorf("convert = %+v\nwant %+v, %+v", got, wantPod, wantSched)
	}

	// A deep copy shares nothing the source could change.
	cp := p.DeepCopyObject().(*Pod)
	cp.Labels["team"] = "x"
	cp.Status.ContainerStatuses[0].ContainerID = "x"
	*cp.Spec.Priority = 1
	checkRealPod(t, p)

	raw, err = os.ReadFile("testdata/priorityclass.json")
	if err != nil {
		t.Fatal(err)
	}
	pc, ok := decode("scheduling.k8s.io/v1", raw, &PriorityClass{}, &PriorityClassList{}).(*PriorityClass)
	if !ok || pc.Name != "serving-high" || pc.Value != 100000 {
		t.Errorf("priority class: %+v", pc)
	}
}

// jsonServer serves fixed JSON bodies: a list for a GET of path, and the
// events of a watch of it, as the API server writes them (one JSON object
// each, then the stream ends). It records each request's path, query and
// Accept header.
type jsonServer struct {
	srv    *httptest.Server
	mu     sync.Mutex
	seen   []string
	list   map[string][]byte
	events map[string][][]byte
}

func newJSONServer(t *testing.T) *jsonServer {
	s := &jsonServer{list: map[string][]byte{}, events: map[string][][]byte{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.URL.Path+"?"+r.URL.RawQuery+" Accept: "+r.Header.Get("Accept"))
		list, events := s.list[r.URL.Path], s.events[r.URL.Path]
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if list == nil {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"NotFound","code":404}`)
			return
		}
		if r.URL.Query().Get("watch") != "true" {
			_, _ = w.Write(list)
			return
		}
		for _, ev := range events {
			_, _ = w.Write(append(ev, '\n'))
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// kubeconfig writes a kubeconfig that reaches the server and returns its
// path.
func (s *jsonServer) kubeconfig(t *testing.T) string {
	path := t.TempDir() + "/kubeconfig"
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, s.srv.URL)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (s *jsonServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// events returns the events of w until it ends.
func events(t *testing.T, w watch.Interface) []watch.Event {
	t.Helper()
	defer w.Stop()
	var out []watch.Event
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return out
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatal("the watch did not end")
		}
	}
}

// TestClientsDecodeJSON: NewClient and NewPriorityClassClient ask for
// JSON, on the paths of core/v1 and scheduling.k8s.io/v1, and decode the
// API server's lists and watch events (a bookmark among them) into the
// package's types.
func TestClientsDecodeJSON(t *testing.T) {
	t.Parallel()
	api := newJSONServer(t)

	item := readJSON(t, "pod.json")
	delete(item, "kind") // a list's items carry no kind, nor apiVersion
	delete(item, "apiVersion")
	api.list["/api/v1/pods"] = mustJSON(t, map[string]any{
		"kind": "PodList", "apiVersion": "v1", "metadata": map[string]any{"resourceVersion": "48211990"},
		"items": []any{item},
	})
	done := readJSON(t, "pod.json")
	done["status"].(map[string]any)["phase"] = "Succeeded"
	done["metadata"].(map[string]any)["resourceVersion"] = "48211999"
	api.events["/api/v1/pods"] = [][]byte{
		mustJSON(t, map[string]any{"type": "MODIFIED", "object": done}),
		[]byte(`{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"48212000","creationTimestamp":null},"spec":{"containers":null},"status":{}}}`),
		mustJSON(t, map[string]any{"type": "DELETED", "object": done}),
	}
	class := readJSON(t, "priorityclass.json")
	api.list["/apis/scheduling.k8s.io/v1/priorityclasses"] = mustJSON(t, map[string]any{
		"kind": "PriorityClassList", "apiVersion": "scheduling.k8s.io/v1", "metadata": map[string]any{"resourceVersion": "1300"},
		"items": []any{class, map[string]any{"metadata": map[string]any{"name": "system-node-critical"}, "value": 2000001000, "globalDefault": false}},
	})
	api.events["/apis/scheduling.k8s.io/v1/priorityclasses"] = [][]byte{
		[]byte(`{"type":"ADDED","object":{"kind":"PriorityClass","apiVersion":"scheduling.k8s.io/v1","metadata":{"name":"batch","resourceVersion":"1301"},"value":1000,"preemptionPolicy":"Never"}}`),
	}

	cfg := testConfig()
	cfg.Kubeconfig = api.kubeconfig(t)
	ctx := context.Background()
	opts := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}

	pods, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := pods.List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if list.ResourceVersion != "48211990" || len(list.Items) != 1 {
		t.Fatalf("list: resource version %q, %d items", list.ResourceVersion, len(list.Items))
	}
	checkRealPod(t, &list.Items[0])
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: opts.FieldSelector, ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	evs := events(t, w)
	var got []string
	for _, ev := range evs {
		p, ok := ev.Object.(*Pod)
		if !ok {
			t.Fatalf("%s event of %T, want *Pod", ev.Type, ev.Object)
		}
		got = append(got, fmt.Sprintf("%s %s %s %s", ev.Type, p.ResourceVersion, p.Name, p.Status.Phase))
	}
	if want := []string{
		"MODIFIED 48211999 vllm-llama-7c9d5b8f6d-x2k9q Succeeded",
		"BOOKMARK 48212000  ",
		"DELETED 48211999 vllm-llama-7c9d5b8f6d-x2k9q Succeeded",
	}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("watch events:\n%q\nwant\n%q", got, want)
	}

	classes, err := NewPriorityClassClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clist, err := classes.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]int32{}
	for _, c := range clist.Items {
		values[c.Name] = c.Value
	}
	if want := map[string]int32{"serving-high": 100000, "system-node-critical": 2000001000}; !maps.Equal(values, want) || clist.ResourceVersion != "1300" {
		t.Errorf("classes %v at %q, want %v at 1300", values, clist.ResourceVersion, want)
	}
	cw, err := classes.Watch(ctx, metav1.ListOptions{ResourceVersion: "1300"})
	if err != nil {
		t.Fatal(err)
	}
	cevs := events(t, cw)
	if len(cevs) != 1 || cevs[0].Type != watch.Added {
		t.Fatalf("class watch events %+v, want one ADDED", cevs)
	}
	if c, ok := cevs[0].Object.(*PriorityClass); !ok || c.Name != "batch" || c.Value != 1000 {
		t.Errorf("class watch: %+v", cevs[0].Object)
	}

	want := []string{
		"/api/v1/pods?fieldSelector=spec.nodeName%3D" + node + " Accept: application/json",
		"/api/v1/pods?fieldSelector=spec.nodeName%3D" + node + "&resourceVersion=48211990&watch=true Accept: application/json",
		"/apis/scheduling.k8s.io/v1/priorityclasses? Accept: application/json",
		"/apis/scheduling.k8s.io/v1/priorityclasses?resourceVersion=1300&watch=true Accept: application/json",
	}
	if got := api.requests(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requests:\n%q\nwant\n%q", got, want)
	}
}
