package pods

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
	"github.com/gpuxray/gpuxray/internal/testtool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started when client-go is imported.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

const node = "gpu-node-1"

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func testConfig() Config {
	c := DefaultConfig(node)
	c.ExtraLabels = map[string]string{"team": "team", "cost_center": "billing/cost-center"}
	return c
}

// vllmPod is a Deployment's pod as the API server returns it.
func vllmPod(uid string) *corev1.Pod {
	ctl := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "serving", Name: "vllm-llama-7c9d5b8f6d-x2k9q", UID: types.UID(uid),
			Labels: map[string]string{
				"app": "vllm-llama", "pod-template-hash": "7c9d5b8f6d",
				"model": "llama-3.1-8b", "team": "nlp", "billing/cost-center": strings.Repeat("c", 200),
			},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-12-01T08:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "vllm-llama-7c9d5b8f6d", UID: "rs-uid", Controller: &ctl,
			}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai:v0.9.0", Args: []string{"--api-key", "sk-not-kept"}}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "fetch", ContainerID: "cri-o://" + strings.Repeat("b", 64)},
			},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "vllm", ContainerID: "containerd://" + strings.Repeat("a", 64), Image: "vllm/vllm-openai:v0.9.0"},
				{Name: "sidecar", ContainerID: "docker://" + strings.Repeat("c", 64)},
				{Name: "waiting"},
			},
		},
	}
}

// otherNodePod is a pod of another node, which a fake clientset lists
// because it ignores field selectors.
func otherNodePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "serving", Name: "elsewhere", UID: "other-uid"},
		Spec:       corev1.PodSpec{NodeName: "gpu-node-2"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func podClient(c *fake.Clientset) PodClient { return fakePods{c.CoreV1().Pods(metav1.NamespaceAll)} }

// harness runs a Source against a fake clientset whose pod watches are
// made by the test, so that it knows when a watch is open and can end it.
type harness struct {
	t      *testing.T
	client *fake.Clientset
	src    *Source
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	watchers   []watch.Interface
	listFields []string
	listErr    error // returned by every list while set
	watchErr   error // returned by every watch while set
	watchOpen  chan struct{}
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{t: t, client: fake.NewClientset(objs...), watchOpen: make(chan struct{}, 100)}
	h.client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.listFields = append(h.listFields, a.(k8stesting.ListAction).GetListRestrictions().Fields.String())
		if h.listErr != nil {
			return true, nil, h.listErr
		}
		return false, nil, nil
	})
	h.client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.watchErr != nil {
			return true, nil, h.watchErr
		}
		w, err := h.client.Tracker().Watch(podsGVR, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		h.watchers = append(h.watchers, w)
		h.watchOpen <- struct{}{}
		return true, w, nil
	})
	src, err := New(testConfig(), podClient(h.client), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	h.src = src
	return h
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		if err := h.src.Run(ctx); err != nil {
			h.t.Errorf("Run: %v", err)
		}
	}()
	h.t.Cleanup(h.stop)
}

func (h *harness) stop() {
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.t.Error("Run did not return after its context was cancelled")
	}
}

// waitWatch waits until a watch is open.
func (h *harness) waitWatch() {
	h.t.Helper()
	select {
	case <-h.watchOpen:
	case <-time.After(10 * time.Second):
		h.t.Fatal("no watch was opened")
	}
}

func (h *harness) set(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"default", DefaultConfig("n1"), ""},
		{"no node", Config{}, "NODE_NAME is empty: set it from the downward API (spec.nodeName)"},
		{"missing kubeconfig", Config{NodeName: "n1", Kubeconfig: "/nonexistent/kubeconfig"}, `the kubeconfig "/nonexistent/kubeconfig" cannot be read`},
		{"reserved extra label", Config{NodeName: "n1", ExtraLabels: map[string]string{"pod": "team"}}, `"pod" is a label gpuxray already sets`},
		{"bad extra label key", Config{NodeName: "n1", ExtraLabels: map[string]string{"team": "-x"}}, `is not a Kubernetes label key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := New(Config{}, podClient(fake.NewClientset()), nil); err == nil {
		t.Error("New with no node name succeeded")
	}
	if _, err := New(DefaultConfig("n1"), nil, nil); err == nil {
		t.Error("New with no client succeeded")
	}
}

func TestConvert(t *testing.T) {
	t.Parallel()
	src, err := New(testConfig(), podClient(fake.NewClientset()), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := collector.Pod{
		UID: "uid-1", Namespace: "serving", Name: "vllm-llama-7c9d5b8f6d-x2k9q", Phase: "Running",
		WorkloadKind: "Deployment", Workload: "vllm-llama", Model: "llama-3.1-8b",
		ExtraLabels: map[string]string{"team": "nlp", "cost_center": strings.Repeat("c", 128)},
		ContainerIDs: map[string]string{
			"vllm": strings.Repeat("a", 64), "fetch": strings.Repeat("b", 64), "sidecar": strings.Repeat("c", 64),
		},
	}
	for _, tr := range []struct {
		name string
		pod  func() *Pod
	}{
		{"as listed", func() *Pod { return asPod(vllmPod("uid-1")) }},
	} {
		got := src.convert(tr.pod())
		if !podEqual(got, want) {
			t.Errorf("%s: convert = %+v\nwant %+v", tr.name, got, want)
		}
	}

	bare := &Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: "debug-gpu", UID: "u"}, Spec: PodSpec{NodeName: node}}
	if got := src.convert(bare); got.WorkloadKind != "Pod" || got.Workload != "debug-gpu" || got.ContainerIDs != nil {
		t.Errorf("bare pod: %+v, want workload Pod/debug-gpu and no container IDs", got)
	}
}

func podEqual(a, b collector.Pod) bool {
	return a.UID == b.UID && a.Namespace == b.Namespace && a.Name == b.Name && a.Phase == b.Phase &&
		a.WorkloadKind == b.WorkloadKind && a.Workload == b.Workload && a.Model == b.Model &&
		maps.Equal(a.ExtraLabels, b.ExtraLabels) && maps.Equal(a.ContainerIDs, b.ContainerIDs)
}

func TestPodLifecycle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, vllmPod("uid-1"), otherNodePod())
	ctx := context.Background()
	pods := h.client.CoreV1().Pods("serving")
	h.start()
	if !h.src.WaitForSync(ctx) {
		t.Fatal("no sync")
	}
	h.waitWatch()

	h.mu.Lock()
	fields := h.listFields
	h.mu.Unlock()
	if len(fields) == 0 || fields[0] != "spec.nodeName="+node {
		t.Errorf("list field selectors = %q, want spec.nodeName=%s", fields, node)
	}

	got, ok := h.src.Pod("serving", "vllm-llama-7c9d5b8f6d-x2k9q")
	if !ok || got.Workload != "vllm-llama" || got.Model != "llama-3.1-8b" || got.Phase != "Running" {
		t.Fatalf("Pod = %+v, %v; want the listed pod", got, ok)
	}
	if byUID, ok := h.src.PodByUID("uid-1"); !ok || byUID.Name != got.Name {
		t.Errorf("PodByUID(uid-1) = %+v, %v", byUID, ok)
	}
	if _, ok := h.src.Pod("serving", "elsewhere"); ok {
		t.Error("a pod of another node is known")
	}
	if _, ok := h.src.PodByUID("other-uid"); ok {
		t.Error("a pod of another node is known by UID")
	}
	if up, errs := h.src.Health(); !up || len(errs) != 0 {
		t.Errorf("Health = %v, %v; want up, no errors", up, errs)
	}

	// Added after the list: seen through the watch.
	added := vllmPod("uid-2")
	added.Name, added.Labels = "trainer-0", map[string]string{"gpuxray.io/model": "bert", "team": "vision"}
	added.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "bert-ft", Controller: new(true)}}
	if _, err := pods.Create(ctx, added, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the added pod is known", func() bool {
		p, ok := h.src.PodByUID("uid-2")
		return ok && p.WorkloadKind == "Job" && p.Workload == "bert-ft" && p.Model == "bert" && p.ExtraLabels["team"] == "vision"
	})

	// Relabelled: model and extra labels follow.
	relabelled := vllmPod("uid-1")
	relabelled.Labels["model"] = "llama-3.3-70b"
	relabelled.Labels["team"] = "platform"
	if _, err := pods.Update(ctx, relabelled, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the relabelled pod's model and team change", func() bool {
		p, _ := h.src.Pod("serving", relabelled.Name)
		return p.Model == "llama-3.3-70b" && p.ExtraLabels["team"] == "platform"
	})

	// Terminated: the phase says so.
	done := relabelled.DeepCopy()
	done.Status.Phase = corev1.PodSucceeded
	if _, err := pods.UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the pod is terminal", func() bool {
		p, ok := h.src.Pod("serving", done.Name)
		return ok && p.Phase == "Succeeded" && p.Terminal()
	})

	// Moved to another node (only a fake can): forgotten.
	moved := added.DeepCopy()
	moved.Spec.NodeName = "gpu-node-2"
	if _, err := pods.Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "a pod updated onto another node is forgotten", func() bool {
		_, ok := h.src.PodByUID("uid-2")
		return !ok
	})

	// Deleted, then recreated under the same name with a new UID (a
	// StatefulSet's pod): the old UID is forgotten.
	if err := pods.Delete(ctx, done.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the deleted pod is forgotten", func() bool {
		_, ok1 := h.src.Pod("serving", done.Name)
		_, ok2 := h.src.PodByUID("uid-1")
		return !ok1 && !ok2
	})
	if _, err := pods.Create(ctx, vllmPod("uid-3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the recreated pod is known by its new UID", func() bool {
		p, ok := h.src.PodByUID("uid-3")
		return ok && p.Name == done.Name
	})
	if n := h.src.Len(); n != 1 {
		t.Errorf("Len = %d, want 1", n)
	}
	if up, errs := h.src.Health(); !up || len(errs) != 0 {
		t.Errorf("Health = %v, %v; want up, no errors", up, errs)
	}
}

// refused is the error a dial to a closed port returns through client-go.
func refused() error {
	return &url.Error{Op: "Get", URL: "https://10.96.0.1:443/api/v1/pods", Err: &net.OpError{
		Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED),
	}}
}

func forbidden() error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
		errors.New(`User "system:serviceaccount:gpuxray:gpuxray" cannot list resource "pods" in API group "" at the cluster scope`))
}

// takeHealth calls Health until want holds for the state it reports,
// collecting the errors it returns on the way.
func takeHealth(t *testing.T, src *Source, what string, want func(up bool, errs []error) bool) []error {
	t.Helper()
	var all []error
	testtool.Eventually(t, what, func() bool {
		up, errs := src.Health()
		all = append(all, errs...)
		return want(up, all)
	})
	return all
}

func reasons(errs []error) map[string]int {
	out := map[string]int{}
	for _, err := range errs {
		var se *collector.SourceError
		if !errors.As(err, &se) || se.Source != collector.SourcePods {
			out["not a pods SourceError: "+err.Error()]++
			continue
		}
		out[se.Reason]++
	}
	return out
}

func TestUnavailableAtStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		err    error
		reason string
	}{
		{"connection refused", refused(), ReasonUnavailable},
		{"rbac forbids", forbidden(), ReasonForbidden},
		{"expired token", apierrors.NewUnauthorized("Unauthorized"), ReasonUnauthorized},
		{"overloaded", apierrors.NewTooManyRequests("slow down", 1), ReasonUnavailable},
		{"server error", apierrors.NewServiceUnavailable("etcd is down"), ReasonUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, vllmPod("uid-1"))
			h.set(func() { h.listErr = tt.err })
			h.start()
			errs := takeHealth(t, h.src, "a failure is reported", func(up bool, errs []error) bool { return !up && len(errs) > 0 })
			if r := reasons(errs); r[tt.reason] == 0 || len(r) != 1 {
				t.Errorf("reasons = %v, want only %q", r, tt.reason)
			}
			if _, ok := h.src.Pod("serving", "vllm-llama-7c9d5b8f6d-x2k9q"); ok || h.src.HasSynced() {
				t.Error("a pod is known before any list succeeded")
			}

			h.set(func() { h.listErr = nil })
			takeHealth(t, h.src, "the source recovers", func(up bool, _ []error) bool { return up })
			if _, ok := h.src.PodByUID("uid-1"); !ok {
				t.Error("the pod is not known after recovery")
			}
		})
	}
}

func TestUnavailableLater(t *testing.T) {
	t.Parallel()
	h := newHarness(t, vllmPod("uid-1"))
	h.start()
	if !h.src.WaitForSync(context.Background()) {
		t.Fatal("no sync")
	}
	h.waitWatch()
	if up, _ := h.src.Health(); !up {
		t.Fatal("not up after sync")
	}

	// The API server goes away: the open watch ends and every call fails.
	h.set(func() {
		h.listErr, h.watchErr = refused(), refused()
		for _, w := range h.watchers {
			w.Stop()
		}
	})
	errs := takeHealth(t, h.src, "the failure is reported", func(up bool, errs []error) bool { return !up && len(errs) > 0 })
	if r := reasons(errs); r[ReasonUnavailable] == 0 || len(r) != 1 {
		t.Errorf("reasons = %v, want only %q", r, ReasonUnavailable)
	}
	if p, ok := h.src.Pod("serving", "vllm-llama-7c9d5b8f6d-x2k9q"); !ok || p.UID != "uid-1" {
		t.Error("the pod known before the failure is forgotten while the API server is away")
	}

	// It comes back, and a pod was deleted meanwhile: the relist forgets it.
	if err := h.client.Tracker().Delete(podsGVR, "serving", "vllm-llama-7c9d5b8f6d-x2k9q"); err != nil {
		t.Fatal(err)
	}
	h.set(func() { h.listErr, h.watchErr = nil, nil })
	takeHealth(t, h.src, "the source recovers", func(up bool, _ []error) bool { return up })
	testtool.Eventually(t, "the pod deleted while disconnected is forgotten", func() bool { return h.src.Len() == 0 })
}

func TestWatchStreamError(t *testing.T) {
	t.Parallel()
	h := newHarness(t, vllmPod("uid-1"))
	var fw *watch.FakeWatcher
	h.client.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if fw != nil {
			return false, nil, nil // later watches: the tracker's
		}
		fw = watch.NewFakeWithChanSize(1, false)
		h.watchOpen <- struct{}{}
		return true, fw, nil
	})
	h.start()
	h.waitWatch()
	if !h.src.WaitForSync(context.Background()) {
		t.Fatal("no sync")
	}
	h.src.Health()
	// An error event in the stream: the server's own failure.
	fw.Error(&apierrors.NewInternalError(errors.New("etcdserver: request timed out")).ErrStatus)
	errs := takeHealth(t, h.src, "the stream error is reported", func(up bool, errs []error) bool { return len(errs) > 0 })
	if r := reasons(errs); r[ReasonUnavailable] != 1 || len(r) != 1 {
		t.Errorf("reasons = %v, want one %q", r, ReasonUnavailable)
	}
	takeHealth(t, h.src, "the source recovers", func(up bool, _ []error) bool { return up })

	// An expired resource version ends a watch normally: no failure.
	h.waitWatch()
	h.mu.Lock()
	opened := len(h.watchers)
	w := h.watchers[opened-1]
	h.mu.Unlock()
	w.(*watch.RaceFreeFakeWatcher).Error(&apierrors.NewResourceExpired("too old resource version: 1 (2)").ErrStatus)
	// The reflector opens its next watch only after it has handled the
	// expired one, so from then on Health has seen whatever it made of it.
	testtool.Eventually(t, "a watch is opened after the expired one", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.watchers) > opened
	})
	takeHealth(t, h.src, "up with no error after an expired watch", func(up bool, errs []error) bool {
		if len(errs) > 0 {
			t.Fatalf("an expired watch was counted: %v", errs)
		}
		return up
	})
}

func TestRunTwice(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.waitWatch()
	if err := h.src.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded")
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{forbidden(), ReasonForbidden},
		{apierrors.NewUnauthorized("x"), ReasonUnauthorized},
		{refused(), ReasonUnavailable},
		{context.DeadlineExceeded, ReasonUnavailable},
		{apierrors.NewInternalError(errors.New("x")), ReasonUnavailable},
		{apierrors.NewTimeoutError("x", 1), ReasonUnavailable},
		{apierrors.NewBadRequest("x"), ReasonOther},
		{errors.New("x"), ReasonOther},
	}
	for _, tt := range tests {
		t.Run(tt.want+" "+tt.err.Error(), func(t *testing.T) {
			if got := apihealth.Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

func TestNewClient(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/kubeconfig"
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig(node)
	cfg.Kubeconfig = path
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if c, err := NewClient(cfg); err != nil || c == nil {
		t.Fatalf("NewClient = %v, %v", c, err)
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return // inside a pod, in-cluster configuration works
	}
	if _, err := NewClient(DefaultConfig(node)); err == nil {
		t.Error("NewClient in-cluster succeeded outside a cluster")
	}
}

// TestStaticPodMirror: a static pod is known to the API server by its
// mirror, whose UID is not the static pod's; the mirror's
// kubernetes.io/config.mirror annotation names the static pod's UID, which
// its containers' cgroups carry. Both UIDs find the pod, and both are
// forgotten with it.
func TestStaticPodMirror(t *testing.T) {
	t.Parallel()
	const staticUID = "6f4b2a6b8e0e5f1c3a9d7e2b1c0f4a5d"
	mirror := func(uid, hash string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "kube-system", Name: "llm-server-" + node, UID: types.UID(uid),
				Labels: map[string]string{"gpuxray.io/model": "qwen-2.5-7b"},
				Annotations: map[string]string{
					AnnotationMirror:              hash,
					"kubernetes.io/config.hash":   hash,
					"kubernetes.io/config.source": "file",
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: "node-uid", Controller: new(true)}},
			},
			Spec:   corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	h := newHarness(t, mirror("mirror-uid-1", staticUID))
	ctx := context.Background()
	pods := h.client.CoreV1().Pods("kube-system")
	h.start()
	if !h.src.WaitForSync(ctx) {
		t.Fatal("no sync")
	}
	h.waitWatch()

	for _, uid := range []string{"mirror-uid-1", staticUID} {
		p, ok := h.src.PodByUID(uid)
		if !ok || p.Name != "llm-server-"+node || p.UID != "mirror-uid-1" || p.StaticUID != staticUID ||
			p.WorkloadKind != "Pod" || p.Workload != "llm-server-"+node || p.Model != "qwen-2.5-7b" {
			t.Errorf("PodByUID(%s) = %+v, %v; want the mirror pod, workload Pod/llm-server-%s, model qwen-2.5-7b", uid, p, ok, node)
		}
	}

	// The kubelet recreates a deleted mirror: a new mirror UID, the same
	// static pod. Then the manifest changes: a new static UID.
	if err := pods.Delete(ctx, "llm-server-"+node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, mirror("mirror-uid-2", staticUID), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the recreated mirror is known by its new UID", func() bool {
		p, ok := h.src.PodByUID("mirror-uid-2")
		return ok && p.UID == "mirror-uid-2"
	})
	if p, ok := h.src.PodByUID(staticUID); !ok || p.UID != "mirror-uid-2" {
		t.Errorf("PodByUID(static) = %+v, %v; want the recreated mirror", p, ok)
	}
	if _, ok := h.src.PodByUID("mirror-uid-1"); ok {
		t.Error("the deleted mirror's UID is still known")
	}
	const newStaticUID = "0123456789abcdef0123456789abcdef"
	if _, err := pods.Update(ctx, mirror("mirror-uid-2", newStaticUID), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the new manifest's UID finds the pod", func() bool {
		_, ok := h.src.PodByUID(newStaticUID)
		return ok
	})
	if _, ok := h.src.PodByUID(staticUID); ok {
		t.Error("the old manifest's UID is still known")
	}
	if err := pods.Delete(ctx, "llm-server-"+node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the deleted mirror is forgotten by both UIDs", func() bool {
		_, ok1 := h.src.PodByUID("mirror-uid-2")
		_, ok2 := h.src.PodByUID(newStaticUID)
		return !ok1 && !ok2
	})
}

// TestPodsBounded: a node whose pods outnumber MaxPods (a watch flooding
// new pods) keeps MaxPods of them and counts the rest (too_many). Before,
// every pod was stored: 1.7 GB after 40 s of a flood.
func TestPodsBounded(t *testing.T) {
	t.Parallel()
	var objs []runtime.Object
	for i := range 60 {
		p := vllmPod(fmt.Sprintf("uid-%d", i))
		p.Name = fmt.Sprintf("pod-%03d", i)
		objs = append(objs, p)
	}
	h := newHarness(t, objs...)
	cfg := testConfig()
	cfg.MaxPods = 50
	src, err := New(cfg, podClient(h.client), zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	h.src = src
	h.start()
	if !src.WaitForSync(context.Background()) {
		t.Fatal("no sync")
	}
	h.waitWatch()
	if n := src.Len(); n != 50 {
		t.Errorf("%d pods kept, want 50", n)
	}
	// Added through the watch, beyond the bound: refused.
	for i := range 20 {
		p := vllmPod(fmt.Sprintf("late-%d", i))
		p.Name = fmt.Sprintf("late-%03d", i)
		if _, err := h.client.CoreV1().Pods("serving").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	errs := takeHealth(t, src, "refusals counted", func(up bool, errs []error) bool { return reasons(errs)[ReasonTooMany] >= 2 })
	if r := reasons(errs); len(r) != 1 {
		t.Errorf("reasons %v, want only too_many", r)
	}
	if n := src.Len(); n != 50 {
		t.Errorf("%d pods kept after the flood, want 50", n)
	}
	// A kept pod deleted makes room for the next.
	if err := h.client.CoreV1().Pods("serving").Delete(context.Background(), "pod-000", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the deleted pod is forgotten", func() bool { return src.Len() == 49 })
}

// TestTerminalEscapes: a pod whose model annotation, labels and names hold
// terminal escapes (ESC, BEL, a bidi override) is kept with them removed,
// so that neither /metrics nor the report carries them. Before, they were
// exported as is.
func TestTerminalEscapes(t *testing.T) {
	t.Parallel()
	src, err := New(testConfig(), podClient(fake.NewClientset()), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := vllmPod("uid-1")
	p.Labels = map[string]string{"team": "nlp\x1b[2J\x07", "kueue.x-k8s.io/queue-name": "q\u009b1m"}
	p.Annotations = map[string]string{"gpuxray.io/model": "\x1b]0;pwned\x07llama\u202e-3"}
	p.OwnerReferences[0].Name = "vllm\x1b[31m-llama-7c9d5b8f6d"
	p.Spec.PriorityClassName = "high\r\nfake line"
	got := src.convert(asPod(p))
	want := map[string]string{
		"model": "]0;pwnedllama-3", "team": "nlp[2J", "workload": "vllm[31m-llama",
		"queue": "q1m", "priority class": "highfake line",
	}
	have := map[string]string{
		"model": got.Model, "team": got.ExtraLabels["team"], "workload": got.Workload,
		"queue": got.Scheduling.Queue, "priority class": got.Scheduling.PriorityClass,
	}
	if !maps.Equal(have, want) {
		t.Errorf("converted %q\nwant %q", have, want)
	}
}

// TestListStalls: through NewClient's client, a list that never completes
// is cut at Config.APITimeout and counted (unavailable), and the source is
// down; it retries, and is up once a list completes. Before, lists had no
// deadline: the source waited for ever, up.
func TestListStalls(t *testing.T) {
	t.Parallel()
	var stalled atomic.Bool
	stalled.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stalled.Load() && r.URL.Query().Get("watch") != "true" {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[
			{"metadata":{"name":"p","namespace":"ns","uid":"u1"},"spec":{"nodeName":"`+node+`"},"status":{"phase":"Running"}}]}`)
	}))
	t.Cleanup(srv.Close)
	js := &jsonServer{srv: srv}
	cfg := testConfig()
	cfg.Kubeconfig, cfg.APITimeout = js.kubeconfig(t), 300*time.Millisecond
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
	go func() { defer close(done); _ = src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	errs := takeHealth(t, src, "the stalled list is counted", func(up bool, errs []error) bool { return !up && len(errs) > 0 })
	if r := reasons(errs); r[ReasonUnavailable] == 0 || len(r) != 1 {
		t.Errorf("reasons %v, want only unavailable", r)
	}
	stalled.Store(false)
	takeHealth(t, src, "up once a list completes", func(up bool, _ []error) bool { return up })
	if _, ok := src.PodByUID("u1"); !ok {
		t.Error("the listed pod is not known")
	}
}
