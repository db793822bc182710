// Package pods watches the pods of one node through the Kubernetes API and
// answers, from memory, what pod-resources does not say: a pod's UID, phase,
// workload, model, extra labels and container IDs.
//
// It lists and watches pods with the field selector spec.nodeName=<node>
// (collector/internal/listwatch), so the API server sends only this node's
// pods. Pods are read as JSON into this package's Pod, which holds of a
// pod's spec only the node name, priority class and priority, and of its
// status only the phase and container IDs (see NewClient: the agent links
// no k8s.io/api package), and each is converted, as it arrives, to the
// collector.Pod the agent exports — workload, model, extra labels, cleaned
// of control characters — never per scrape. Only that is kept, for at most
// Config.MaxPods pods: memory is bounded by what a node can hold, whatever
// the API server sends, and a pod beyond the bound is refused and counted.
//
// When the API server cannot be reached, stalls, or RBAC denies the list
// or watch, the source keeps what it last knew, reports itself down
// through Health, and counts each failure; it lists and watches again with
// client-go's backoff and is up after its next successful call. Before the
// first list completes it knows no pod at all.
//
// The agent's service account needs get, list and watch on pods cluster
// wide: a field selector narrows what is sent, not what RBAC checks.
package pods

import (
	"context"
	"errors"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/watchlist"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
	"github.com/gpuxray/gpuxray/collector/internal/listwatch"
)

// Source is the pod source of one node. Its methods are safe for concurrent
// use; Pod, PodByUID and Health never block on the API server.
type Source struct {
	cfg Config
	lw  *listwatch.Source[collector.Pod]
}

// New returns a Source for cfg that reads pods through client (see
// NewClient). It watches nothing until Run.
func New(cfg Config, client PodClient, logger *zap.Logger) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("pods: no Kubernetes client")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &Source{cfg: cfg}
	lw, err := listwatch.New(listwatch.Config[collector.Pod]{
		What: "pods on node " + cfg.NodeName,
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.List(ctx, opts)
		},
		Watch:         client.Watch,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String(),
		// A client such as client-go's fakes, which cannot stream a first
		// list, says so; NewClient's can.
		StreamFirstList: !watchlist.DoesClientNotSupportWatchListSemantics(client),
		Convert:         s.convertObject,
		// A static pod's processes run in cgroups named by the static
		// pod's UID, not its mirror's: both find the pod.
		Index:       func(p collector.Pod) []string { return []string{p.UID, p.StaticUID} },
		MaxObjects:  cfg.maxPods(),
		CallTimeout: cfg.APITimeout,
		Health:      apihealth.New(collector.SourcePods, "pods API", "pods are known as last seen until it recovers", logger),
		Logger:      logger,
	})
	if err != nil {
		return nil, err
	}
	s.lw = lw
	return s, nil
}

// Run lists and watches the node's pods until ctx is done, then returns nil
// once the reflector has stopped. API failures do not end it: they are
// retried with backoff and reported through Health. A Source runs once.
func (s *Source) Run(ctx context.Context) error {
	return s.lw.Run(ctx)
}

// HasSynced reports whether the first list of the node's pods has been
// stored.
func (s *Source) HasSynced() bool { return s.lw.HasSynced() }

// WaitForSync waits until the first list has been stored or ctx is done,
// and reports which.
func (s *Source) WaitForSync(ctx context.Context) bool { return s.lw.WaitForSync(ctx) }

// Pod returns what is known of pod namespace/name, and false when the pod
// is not (yet, or any more) known: not on this node, not listed yet, or the
// API server has not been reached. The maps in the result are shared and
// must not be modified.
func (s *Source) Pod(namespace, name string) (collector.Pod, bool) {
	return s.lw.Get(namespace + "/" + name)
}

// PodByUID returns the pod whose UID is uid, as Pod does. The UID of a
// static pod, which its processes' cgroups carry, finds the pod's mirror.
func (s *Source) PodByUID(uid string) (collector.Pod, bool) {
	if uid == "" {
		return collector.Pod{}, false
	}
	return s.lw.ByIndex(uid)
}

// Len returns how many pods of the node are known.
func (s *Source) Len() int { return s.lw.Len() }

// Health reports whether the source is up — the first list has completed,
// the latest call to the API server succeeded and nothing failed or was
// refused since the previous Health call — and returns the failures since
// that call, each a *collector.SourceError of source "pods" with reason
// "forbidden", "unauthorized", "unavailable", "too_large", "too_many" or
// "other".
func (s *Source) Health() (up bool, errs []error) { return s.lw.Health() }

// convertObject converts a pod of a list or a watch event: not kept when
// it is not on this node (the field selector already keeps other nodes'
// pods away; this guards against a server or a fake that ignores it).
func (s *Source) convertObject(obj runtime.Object) (collector.Pod, bool, error) {
	p, ok := obj.(*Pod)
	if !ok || p == nil || p.Spec.NodeName != s.cfg.NodeName {
		return collector.Pod{}, false, nil
	}
	if err := checkPod(p); err != nil {
		return collector.Pod{}, false, err
	}
	return s.convert(p), true, nil
}
