package sim

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
)

// The API group the simulated API server serves, and the versions it can.
const (
	ResourceGroup = "resource.k8s.io"
	// APIVersionV1 is resource.k8s.io/v1, GA since Kubernetes 1.34.
	APIVersionV1 = "v1"
	// APIVersionV1beta2 is resource.k8s.io/v1beta2 (Kubernetes 1.33), whose
	// ResourceSlice has the same fields as v1's.
	APIVersionV1beta2 = "v1beta2"
)

// Defaults of the simulated API server.
const (
	// apiHistory is how many slice events a watch can resume from; older
	// resourceVersions are answered 410 Gone, as after etcd's compaction.
	apiHistory = 1024
	// apiFollow is how often the server brings its slices to the clock
	// while it serves, so that watches see changes without a request.
	apiFollow = 100 * time.Millisecond
)

const (
	jsonMediaType     = "application/json"
	protobufMediaType = "application/vnd.kubernetes.protobuf"
)

// sliceFields are the field selectors the API server supports on
// ResourceSlices.
var sliceFields = []string{"metadata.name", "spec.driver", "spec.nodeName", "spec.pool.name"}

// APIServer is a fake Kubernetes API server that serves the node's
// ResourceSlices (Node.ResourceSlices) over the real REST API on loopback:
// discovery, get, list and watch of resource.k8s.io/v1 resourceslices in
// JSON or protobuf, with field and label selectors, resourceVersions on
// lists, objects and events, and 410 Gone for a resourceVersion it no
// longer has. It is safe for concurrent use.
//
// The served slices follow the node's clock: Sync brings them to the
// clock's now, and every change bumps the pool's generation and stamps
// every slice of the pool anew (MODIFIED events), as the driver's slice
// controller does. Sync runs on every request and, while the server
// serves, every 100 ms; a replay on a virtual clock calls it (or
// ResourceVersion) after moving the clock.
//
// It serves the node's ResourceClaims (Node.ResourceClaims) too, namespaced,
// with the field selectors the API server supports on them (metadata.name
// and metadata.namespace only: pkg/registry/resource/resourceclaim/
// strategy.go toSelectableFields, kubernetes/kubernetes at 0021a864). The
// claims do not change during a run, so their watches send no event after
// the first state.
//
// Served as the API server does, but for what a node agent never asks:
// there is no write, no paging (limit is ignored and no continue token is
// given), and no resource.k8s.io/v1beta1.
type APIServer struct {
	node   *Node
	codecs serializer.CodecFactory

	mu       sync.Mutex
	rv       uint64
	gen      int64
	cur      map[string]*resourcev1.ResourceSlice
	history  []sliceEvent // oldest first
	oldest   uint64       // watches from a resourceVersion below it are too old
	changed  chan struct{}
	drop     chan struct{}
	versions []string
	code     int
	// down is true while an apiserver_down fault is active at the clock.
	down bool

	srv  *http.Server
	addr string
	tls  bool
	cert *tls.Certificate
	ca   []byte
	done chan struct{}
	wg   sync.WaitGroup
}

type sliceEvent struct {
	rv  uint64
	typ watch.EventType
	obj *resourcev1.ResourceSlice
}

// NewAPIServer returns a server of node's ResourceSlices, serving
// resource.k8s.io/v1 until SetVersions says otherwise. Call Start to serve.
func NewAPIServer(node *Node) *APIServer {
	scheme := runtime.NewScheme()
	// Both versions register meta/v1's options, lists, status and watch
	// events in the scheme too.
	_ = resourcev1.AddToScheme(scheme)
	_ = resourcev1beta2.AddToScheme(scheme)
	s := &APIServer{
		node:     node,
		codecs:   serializer.NewCodecFactory(scheme),
		rv:       1,
		cur:      map[string]*resourcev1.ResourceSlice{},
		changed:  make(chan struct{}),
		drop:     make(chan struct{}),
		versions: []string{APIVersionV1},
	}
	s.Sync()
	return s
}

// SetVersions sets the versions of resource.k8s.io served, preferred first:
// v1 and v1beta2, so that a client's fallback to an older cluster's API can
// be tested. Unknown versions are ignored.
func (s *APIServer) SetVersions(versions ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.versions = nil
	for _, v := range versions {
		if (v == APIVersionV1 || v == APIVersionV1beta2) && !slices.Contains(s.versions, v) {
			s.versions = append(s.versions, v)
		}
	}
}

// SetError makes every request answer HTTP status code (429, 500, 503, …)
// with a Status, until SetError(0).
func (s *APIServer) SetError(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.code = code
}

// DropWatches ends every open watch, as an API server that restarts its
// watch cache or a load balancer that cuts long requests does; clients
// resume from the last resourceVersion they saw.
func (s *APIServer) DropWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.drop)
	s.drop = make(chan struct{})
}

// Compact forgets every event so far, as etcd's compaction does: a watch
// or an exact list from an older resourceVersion is answered 410 Gone.
func (s *APIServer) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history, s.oldest = nil, s.rv
}

// ResourceVersion brings the slices to the clock's now and returns the
// server's resourceVersion: a decimal integer that grows with every event.
// A replay on a virtual clock waits until the agent has seen it before
// polling.
func (s *APIServer) ResourceVersion() string {
	s.Sync()
	s.mu.Lock()
	defer s.mu.Unlock()
	return strconv.FormatUint(s.rv, 10)
}

// Sync brings the served slices to Node.ResourceSlices at the clock's
// now. If anything changed, the pool's generation goes up and every slice
// is stamped with it: ADDED for a new slice, MODIFIED for the others,
// DELETED for one gone, each event with a resourceVersion of its own.
func (s *APIServer) Sync() {
	want := s.node.ResourceSlices()
	clock := s.node.Clock().Now()
	now := metav1.NewTime(clock.UTC().Truncate(time.Second))
	s.mu.Lock()
	defer s.mu.Unlock()
	if down := s.node.sc.APIServerDownAt(clock.Sub(s.node.sc.Start)); down != s.down {
		s.down = down
		if down {
			close(s.drop)
			s.drop = make(chan struct{})
		}
	}
	same := len(want) == len(s.cur)
	for i := range want {
		old, ok := s.cur[want[i].Name]
		if !ok {
			same = false
			break
		}
		w := want[i].Spec
		w.Pool.Generation = old.Spec.Pool.Generation
		if !equality.Semantic.DeepEqual(w, old.Spec) {
			same = false
			break
		}
	}
	if same {
		return
	}
	s.gen++
	next := make(map[string]*resourcev1.ResourceSlice, len(want))
	for i := range want {
		obj := want[i].DeepCopy()
		obj.Spec.Pool.Generation = s.gen
		typ := watch.Added
		if old, ok := s.cur[obj.Name]; ok {
			typ = watch.Modified
			obj.UID, obj.CreationTimestamp, obj.Generation = old.UID, old.CreationTimestamp, old.Generation+1
		} else {
			obj.UID = types.UID(ClaimUID(s.node.sc.Node, "", "resourceslice/"+obj.Name))
			obj.CreationTimestamp, obj.Generation = now, 1
			obj.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: s.node.sc.Node, UID: types.UID(ClaimUID(s.node.sc.Node, "", "node")), Controller: new(true)}}
		}
		s.rv++
		obj.ResourceVersion = strconv.FormatUint(s.rv, 10)
		next[obj.Name] = obj
		s.record(typ, obj)
	}
	var gone []string
	for name := range s.cur {
		if next[name] == nil {
			gone = append(gone, name)
		}
	}
	slices.Sort(gone)
	for _, name := range gone {
		obj := s.cur[name].DeepCopy()
		s.rv++
		obj.ResourceVersion = strconv.FormatUint(s.rv, 10)
		s.record(watch.Deleted, obj)
	}
	s.cur = next
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *APIServer) record(typ watch.EventType, obj *resourcev1.ResourceSlice) {
	s.history = append(s.history, sliceEvent{rv: s.rv, typ: typ, obj: obj})
	if n := len(s.history) - apiHistory; n > 0 {
		s.oldest = s.history[n-1].rv
		s.history = slices.Delete(s.history, 0, n)
	}
}

// Down brings the server to the clock's now and reports whether an
// apiserver_down fault makes it answer 503: a replay does not wait for the
// agent to catch up with it then.
func (s *APIServer) Down() bool {
	s.Sync()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// Start serves plain HTTP on a loopback port of its own, the same one
// again after Stop, like an API server coming back.
func (s *APIServer) Start() error { return s.start(false) }

// StartTLS serves HTTPS with a self-signed certificate for 127.0.0.1,
// whose PEM CACert returns.
func (s *APIServer) StartTLS() error { return s.start(true) }

func (s *APIServer) start(useTLS bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return fmt.Errorf("fake API server already serving on %s", s.addr)
	}
	addr := s.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fake API server: %w", err)
	}
	if useTLS {
		if s.cert == nil {
			if err := s.makeCert(); err != nil {
				lis.Close()
				return fmt.Errorf("fake API server certificate: %w", err)
			}
		}
		lis = tls.NewListener(lis, &tls.Config{Certificates: []tls.Certificate{*s.cert}, MinVersion: tls.VersionTLS12})
	}
	s.addr, s.tls, s.done = lis.Addr().String(), useTLS, make(chan struct{})
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	srv, done := s.srv, s.done
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		// Serve returns when Stop closes the server; its error says only that.
		_ = srv.Serve(lis)
	}()
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(apiFollow)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.Sync()
			}
		}
	}()
	return nil
}

// makeCert makes the server's self-signed certificate.
func (s *APIServer) makeCert() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gpuxray-sim-apiserver"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	s.cert = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	s.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return nil
}

// Stop closes every connection at once, open watches too, like an API
// server going away. Stop on a stopped server does nothing.
func (s *APIServer) Stop() {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	close(done)
	srv.Close()
	s.wg.Wait()
}

// URL is the server's base URL (http://127.0.0.1:PORT, https with
// StartTLS), for a rest.Config's Host; "" before the first Start.
func (s *APIServer) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addr == "" {
		return ""
	}
	if s.tls {
		return "https://" + s.addr
	}
	return "http://" + s.addr
}

// CACert is the PEM certificate StartTLS serves, for a client's CA data.
func (s *APIServer) CACert() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ca)
}

// ServeHTTP implements http.Handler.
func (s *APIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.Sync()
	s.mu.Lock()
	code, versions := s.code, slices.Clone(s.versions)
	if s.down {
		code = http.StatusServiceUnavailable
	}
	s.mu.Unlock()
	if code != 0 {
		st := statusFor(code)
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		s.fail(w, r, &apierrors.StatusError{ErrStatus: st})
		return
	}
	if r.Method != http.MethodGet {
		s.fail(w, r, apierrors.NewMethodNotSupported(schema.GroupResource{Group: ResourceGroup, Resource: "resourceslices"}, strings.ToLower(r.Method)))
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/version":
		writeJSON(w, map[string]string{"major": "1", "minor": "34", "gitVersion": "v1.34.0-gpuxray-sim", "platform": "linux/amd64"})
	case r.URL.Path == "/api":
		writeJSON(w, &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
	case r.URL.Path == "/apis":
		list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
		if len(versions) > 0 {
			list.Groups = []metav1.APIGroup{apiGroup(versions)}
		}
		writeJSON(w, list)
	case len(parts) == 2 && parts[0] == "apis" && parts[1] == ResourceGroup && len(versions) > 0:
		g := apiGroup(versions)
		g.Kind, g.APIVersion = "APIGroup", "v1"
		writeJSON(w, &g)
	case len(parts) >= 3 && parts[0] == "apis" && parts[1] == ResourceGroup && slices.Contains(versions, parts[2]):
		s.serveVersion(w, r, parts[2], parts[3:])
	default:
		s.fail(w, r, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
	}
}

func apiGroup(versions []string) metav1.APIGroup {
	g := metav1.APIGroup{Name: ResourceGroup}
	for _, v := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: ResourceGroup + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

func (s *APIServer) serveVersion(w http.ResponseWriter, r *http.Request, version string, rest []string) {
	gr := schema.GroupResource{Group: ResourceGroup, Resource: "resourceslices"}
	switch {
	case len(rest) == 0:
		writeJSON(w, &metav1.APIResourceList{
			TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: ResourceGroup + "/" + version,
			APIResources: []metav1.APIResource{
				{Name: "resourceslices", SingularName: "resourceslice", Kind: "ResourceSlice", Verbs: metav1.Verbs{"get", "list", "watch"}},
				{Name: "resourceclaims", SingularName: "resourceclaim", Namespaced: true, Kind: "ResourceClaim", Verbs: metav1.Verbs{"get", "list", "watch"}},
			},
		})
	case len(rest) == 3 && rest[0] == "namespaces" && rest[2] == "resourceclaims":
		s.serveClaims(w, r, version, rest[1])
	case rest[0] != "resourceslices" || len(rest) > 2:
		s.fail(w, r, apierrors.NewNotFound(gr, strings.Join(rest, "/")))
	case len(rest) == 2:
		s.mu.Lock()
		obj := s.cur[rest[1]]
		s.mu.Unlock()
		if obj == nil {
			s.fail(w, r, apierrors.NewNotFound(gr, rest[1]))
			return
		}
		s.write(w, r, version, http.StatusOK, s.versioned(version, obj))
	default:
		q := r.URL.Query()
		match, err := selector(q)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if v := q.Get("watch"); v == "true" || v == "1" {
			s.watch(w, r, version, q, match)
			return
		}
		s.list(w, r, version, q, match)
	}
}

// selector parses the request's field and label selectors into a match.
func selector(q map[string][]string) (func(*resourcev1.ResourceSlice) bool, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	fs, err := fields.ParseSelector(get("fieldSelector"))
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	for _, req := range fs.Requirements() {
		if !slices.Contains(sliceFields, req.Field) {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field))
		}
	}
	ls, err := labels.Parse(get("labelSelector"))
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return func(o *resourcev1.ResourceSlice) bool {
		node := ""
		if o.Spec.NodeName != nil {
			node = *o.Spec.NodeName
		}
		return ls.Matches(labels.Set(o.Labels)) && fs.Matches(fields.Set{
			"metadata.name": o.Name, "spec.driver": o.Spec.Driver, "spec.nodeName": node, "spec.pool.name": o.Spec.Pool.Name,
		})
	}, nil
}

// matching is the current slices that match, by name, and the
// resourceVersion they are at. s.mu must be held.
func (s *APIServer) matching(match func(*resourcev1.ResourceSlice) bool) []*resourcev1.ResourceSlice {
	var out []*resourcev1.ResourceSlice
	for _, o := range s.cur {
		if match(o) {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b *resourcev1.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// list answers a list at the current resourceVersion. The server keeps no
// older states: an exact resourceVersion other than the current one is
// 410 Gone, one from the future a timeout, as the API server answers.
func (s *APIServer) list(w http.ResponseWriter, r *http.Request, version string, q map[string][]string, match func(*resourcev1.ResourceSlice) bool) {
	s.mu.Lock()
	items, rv := s.matching(match), s.rv
	s.mu.Unlock()
	if want := first(q, "resourceVersion"); want != "" && want != "0" {
		n, err := strconv.ParseUint(want, 10, 64)
		switch {
		case err != nil:
			s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", want)))
			return
		case n > rv:
			s.fail(w, r, apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", n, rv), 1))
			return
		case n < rv && first(q, "resourceVersionMatch") == string(metav1.ResourceVersionMatchExact):
			s.fail(w, r, apierrors.NewResourceExpired(fmt.Sprintf("The resourceVersion for the provided list is too old: %d (%d)", n, rv)))
			return
		}
	}
	meta := metav1.ListMeta{ResourceVersion: strconv.FormatUint(rv, 10)}
	var list runtime.Object
	if version == APIVersionV1beta2 {
		l := &resourcev1beta2.ResourceSliceList{ListMeta: meta}
		for _, o := range items {
			l.Items = append(l.Items, *toV1beta2(o))
		}
		l.APIVersion, l.Kind = resourcev1beta2.SchemeGroupVersion.String(), "ResourceSliceList"
		list = l
	} else {
		l := &resourcev1.ResourceSliceList{ListMeta: meta}
		for _, o := range items {
			l.Items = append(l.Items, *o)
		}
		l.APIVersion, l.Kind = resourcev1.SchemeGroupVersion.String(), "ResourceSliceList"
		list = l
	}
	s.write(w, r, version, http.StatusOK, list)
}

func first(q map[string][]string, k string) string {
	if v := q[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// watch streams events newer than the request's resourceVersion, after
// the current state as ADDED events for none or "0", or with
// sendInitialEvents then a bookmark that ends them. A resourceVersion
// older than the server's history gets an ERROR event with a 410 Status,
// as the API server's watch cache sends, and the watch ends.
func (s *APIServer) watch(w http.ResponseWriter, r *http.Request, version string, q map[string][]string, match func(*resourcev1.ResourceSlice) bool) {
	from := first(q, "resourceVersion")
	initial := first(q, "sendInitialEvents") == "true"
	if initial && first(q, "resourceVersionMatch") != string(metav1.ResourceVersionMatchNotOlderThan) {
		s.fail(w, r, apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "", field.ErrorList{
			field.Forbidden(field.NewPath("resourceVersionMatch"), "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
		}))
		return
	}
	var last uint64
	if from != "" && from != "0" {
		n, err := strconv.ParseUint(from, 10, 64)
		if err != nil {
			s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version %q", from)))
			return
		}
		last = n
	}
	var timeout <-chan time.Time
	if v := first(q, "timeoutSeconds"); v != "" {
		sec, err := strconv.Atoi(v)
		if err != nil || sec < 0 {
			s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("invalid timeoutSeconds %q", v)))
			return
		}
		if sec > 0 {
			t := time.NewTimer(time.Duration(sec) * time.Second)
			defer t.Stop()
			timeout = t.C
		}
	}
	mediaType, info := s.negotiate(r)
	enc := s.codecs.EncoderForVersion(info.Serializer, groupVersion(version))
	streamType := mediaType
	if mediaType == protobufMediaType {
		streamType += ";stream=watch"
	}
	frames := info.StreamSerializer.Framer.NewFrameWriter(w)
	streamEnc := s.codecs.EncoderForVersion(info.StreamSerializer.Serializer, groupVersion(version))
	flusher, _ := w.(http.Flusher)
	send := func(typ watch.EventType, obj runtime.Object) bool {
		var buf bytes.Buffer
		if err := enc.Encode(obj, &buf); err != nil {
			return false
		}
		ev := &metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: buf.Bytes()}}
		if err := streamEnc.Encode(ev, frames); err != nil {
			return false // the client went away
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	s.mu.Lock()
	snapshot, rv, done, drop := s.matching(match), s.rv, s.done, s.drop
	tooOld := from != "" && from != "0" && !initial && last < s.oldest
	oldest := s.oldest
	s.mu.Unlock()
	w.Header().Set("Content-Type", streamType)
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	expired := func(n, oldest uint64) {
		st := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", n, oldest)).ErrStatus
		send(watch.Error, &st)
	}
	if tooOld {
		expired(last, oldest)
		return
	}
	if from == "" || from == "0" || initial {
		for _, o := range snapshot {
			if !send(watch.Added, s.versioned(version, o)) {
				return
			}
		}
		last = rv
		if initial {
			end := s.versioned(version, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{
				ResourceVersion: strconv.FormatUint(rv, 10),
				Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
			}})
			if !send(watch.Bookmark, end) {
				return
			}
		}
	}
	for {
		s.mu.Lock()
		if last < s.oldest {
			oldest := s.oldest
			s.mu.Unlock()
			expired(last, oldest)
			return
		}
		var pending []sliceEvent
		for _, ev := range s.history {
			if ev.rv > last {
				pending = append(pending, ev)
			}
		}
		changed := s.changed
		s.mu.Unlock()
		for _, ev := range pending {
			last = ev.rv
			if match(ev.obj) && !send(ev.typ, s.versioned(version, ev.obj)) {
				return
			}
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-done:
			return
		case <-drop:
			return
		case <-timeout:
			return
		}
	}
}

func groupVersion(version string) schema.GroupVersion {
	return schema.GroupVersion{Group: ResourceGroup, Version: version}
}

// versioned is obj as the requested version has it.
func (s *APIServer) versioned(version string, obj *resourcev1.ResourceSlice) runtime.Object {
	if version == APIVersionV1beta2 {
		return toV1beta2(obj)
	}
	o := obj.DeepCopy()
	o.APIVersion, o.Kind = resourcev1.SchemeGroupVersion.String(), "ResourceSlice"
	return o
}

// toV1beta2 converts a slice to v1beta2, whose fields are v1's.
func toV1beta2(obj *resourcev1.ResourceSlice) *resourcev1beta2.ResourceSlice {
	raw, _ := json.Marshal(obj)
	out := &resourcev1beta2.ResourceSlice{}
	_ = json.Unmarshal(raw, out)
	out.APIVersion, out.Kind = resourcev1beta2.SchemeGroupVersion.String(), "ResourceSlice"
	return out
}

// negotiate picks protobuf where the client accepts it, else JSON.
func (s *APIServer) negotiate(r *http.Request) (string, runtime.SerializerInfo) {
	mediaType := jsonMediaType
	if strings.Contains(r.Header.Get("Accept"), protobufMediaType) {
		mediaType = protobufMediaType
	}
	info, _ := runtime.SerializerInfoForMediaType(s.codecs.SupportedMediaTypes(), mediaType)
	return mediaType, info
}

func (s *APIServer) write(w http.ResponseWriter, r *http.Request, version string, code int, obj runtime.Object) {
	mediaType, info := s.negotiate(r)
	var buf bytes.Buffer
	if err := s.codecs.EncoderForVersion(info.Serializer, groupVersion(version)).Encode(obj, &buf); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", mediaType)
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// fail answers err's Status, as the API server does.
func (s *APIServer) fail(w http.ResponseWriter, r *http.Request, err error) {
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		se = apierrors.NewInternalError(err)
	}
	st := se.ErrStatus
	st.Kind, st.APIVersion = "Status", "v1"
	s.write(w, r, APIVersionV1, int(st.Code), &st)
}

// statusFor is the Status an injected HTTP error code answers with.
func statusFor(code int) metav1.Status {
	reasons := map[int]metav1.StatusReason{
		http.StatusUnauthorized: metav1.StatusReasonUnauthorized, http.StatusForbidden: metav1.StatusReasonForbidden,
		http.StatusTooManyRequests: metav1.StatusReasonTooManyRequests, http.StatusInternalServerError: metav1.StatusReasonInternalError,
		http.StatusServiceUnavailable: metav1.StatusReasonServiceUnavailable, http.StatusGatewayTimeout: metav1.StatusReasonTimeout,
	}
	reason, ok := reasons[code]
	if !ok {
		reason = metav1.StatusReasonUnknown
	}
	return metav1.Status{Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: fmt.Sprintf("injected %d %s", code, http.StatusText(code))}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", jsonMediaType)
	_ = json.NewEncoder(w).Encode(v)
}

// serveClaims lists or watches the ResourceClaims of namespace.
func (s *APIServer) serveClaims(w http.ResponseWriter, r *http.Request, version, namespace string) {
	q := r.URL.Query()
	fs, err := fields.ParseSelector(first(q, "fieldSelector"))
	if err != nil {
		s.fail(w, r, apierrors.NewBadRequest(err.Error()))
		return
	}
	for _, req := range fs.Requirements() {
		if req.Field != "metadata.name" && req.Field != "metadata.namespace" {
			s.fail(w, r, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", req.Field)))
			return
		}
	}
	var items []runtime.Object
	for _, c := range s.node.ResourceClaims() {
		if c.Namespace == namespace && fs.Matches(fields.Set{"metadata.name": c.Name, "metadata.namespace": c.Namespace}) {
			items = append(items, claimVersioned(version, c))
		}
	}
	s.mu.Lock()
	rv := strconv.FormatUint(s.rv, 10)
	done, drop := s.done, s.drop
	s.mu.Unlock()
	if v := first(q, "watch"); v != "true" && v != "1" {
		var list runtime.Object
		if version == APIVersionV1beta2 {
			l := &resourcev1beta2.ResourceClaimList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
			for _, o := range items {
				l.Items = append(l.Items, *o.(*resourcev1beta2.ResourceClaim))
			}
			l.APIVersion, l.Kind = resourcev1beta2.SchemeGroupVersion.String(), "ResourceClaimList"
			list = l
		} else {
			l := &resourcev1.ResourceClaimList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
			for _, o := range items {
				l.Items = append(l.Items, *o.(*resourcev1.ResourceClaim))
			}
			l.APIVersion, l.Kind = resourcev1.SchemeGroupVersion.String(), "ResourceClaimList"
			list = l
		}
		s.write(w, r, version, http.StatusOK, list)
		return
	}
	mediaType, info := s.negotiate(r)
	streamType := mediaType
	if mediaType == protobufMediaType {
		streamType += ";stream=watch"
	}
	frames := info.StreamSerializer.Framer.NewFrameWriter(w)
	enc := s.codecs.EncoderForVersion(info.Serializer, groupVersion(version))
	streamEnc := s.codecs.EncoderForVersion(info.StreamSerializer.Serializer, groupVersion(version))
	w.Header().Set("Content-Type", streamType)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if from := first(q, "resourceVersion"); from == "" || from == "0" {
		for _, o := range items {
			var buf bytes.Buffer
			if enc.Encode(o, &buf) != nil {
				return
			}
			if streamEnc.Encode(&metav1.WatchEvent{Type: string(watch.Added), Object: runtime.RawExtension{Raw: buf.Bytes()}}, frames) != nil {
				return
			}
		}
	}
	if flusher != nil {
		flusher.Flush()
	}
	var timeout <-chan time.Time
	if sec, err := strconv.Atoi(first(q, "timeoutSeconds")); err == nil && sec > 0 {
		t := time.NewTimer(time.Duration(sec) * time.Second)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-r.Context().Done():
	case <-done:
	case <-drop:
	case <-timeout:
	}
}

// claimVersioned is claim c as the requested version has it.
func claimVersioned(version string, c resourcev1.ResourceClaim) runtime.Object {
	if version == APIVersionV1beta2 {
		raw, _ := json.Marshal(c)
		out := &resourcev1beta2.ResourceClaim{}
		_ = json.Unmarshal(raw, out)
		out.APIVersion, out.Kind = resourcev1beta2.SchemeGroupVersion.String(), "ResourceClaim"
		return out
	}
	c.APIVersion, c.Kind = resourcev1.SchemeGroupVersion.String(), "ResourceClaim"
	return &c
}
