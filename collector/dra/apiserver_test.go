package dra

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

const (
	protobufType = "application/vnd.kubernetes.protobuf"
	jsonType     = "application/json"
)

var slicesGR = schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}

// apiServer is a loopback stand-in for the API server's
// /apis/resource.k8s.io/<version>/resourceslices: lists and watches of the
// slices of the node its field selector names, in the versions it serves
// (answering 404 for the others, as an API server does), encoded as the
// request asks (protobuf unless jsonOnly). It keeps an event log with
// resource versions, so a watch from a resource version gets what came
// after it, and a watch from before the last compaction gets 410 Gone. It
// can refuse every request (403), or go away (setDown: its port refuses
// connections) and come back on the same address.
type apiServer struct {
	t        *testing.T
	srv      *httptest.Server
	codecs   serializer.CodecFactory
	jsonOnly bool

	mu        sync.Mutex
	served    map[string]bool
	forbidden bool
	down      bool
	addr      string
	rv        int64
	slices    map[string]*resourcev1.ResourceSlice
	log       []logEvent
	compacted int64 // a watch from before this gets 410 Gone
	expired   int   // bumped to end every open watch with 410 Gone
	// goneStatus answers a watch from before the compaction with the HTTP
	// status 410 rather than a 410 event in the stream: the API server
	// does either, depending on where it finds the version too old.
	goneStatus bool
	// cutWatches ends every watch at once, with no event (a proxy that
	// cuts long requests).
	cutWatches bool
	changed    chan struct{} // closed and replaced on every change
	reqs       []apiRequest
}

type logEvent struct {
	rv  int64
	typ watch.EventType
	obj *resourcev1.ResourceSlice
}

// apiRequest is what the server saw of a request, and what it answered.
type apiRequest struct {
	version   string
	query     url.Values
	accept    string
	userAgent string
	auth      string
	status    int
}

func (r apiRequest) isWatch() bool { return r.query.Get("watch") == "true" }

// newAPIServer serves versions over TLS (or plain HTTP if !useTLS).
func newAPIServer(t *testing.T, useTLS, jsonOnly bool, versions ...string) *apiServer {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{resourcev1.AddToScheme, resourcev1beta2.AddToScheme, resourcev1beta1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	s := &apiServer{
		t: t, codecs: serializer.NewCodecFactory(scheme), jsonOnly: jsonOnly,
		served: map[string]bool{}, slices: map[string]*resourcev1.ResourceSlice{}, rv: 100,
		changed: make(chan struct{}),
	}
	for _, v := range versions {
		s.served[v] = true
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if useTLS {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	s.addr = s.srv.Listener.Addr().String()
	t.Cleanup(s.srv.Close)
	return s
}

// setDown makes the server go away — its port refuses connections, open
// ones drop — or come back on the same address.
func (s *apiServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if down == s.down {
		return
	}
	s.down = down
	s.notifyLocked()
	if down {
		s.srv.Listener.Close()
		s.srv.CloseClientConnections()
		return
	}
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		s.t.Fatalf("listen again on %s: %v", s.addr, err)
	}
	s.srv.Listener = l
	if s.srv.TLS != nil {
		l = tls.NewListener(l, s.srv.TLS)
	}
	go func() { _ = s.srv.Config.Serve(l) }() // returns when Close closes the listener
}

// restConfig reaches the server with a bearer token, trusting its
// certificate.
func (s *apiServer) restConfig() *rest.Config {
	rc := &rest.Config{Host: s.srv.URL, BearerToken: "not-a-real-token"}
	if s.srv.TLS != nil {
		rc.TLSClientConfig.CAData = pemCert(s.srv)
	}
	return rc
}

func (s *apiServer) requests() []apiRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

func (s *apiServer) set(f func(s *apiServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
	s.notifyLocked()
}

func (s *apiServer) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// put creates or updates a slice; with notify false the change is not in
// the event log (it happened while the log was compacted away).
func (s *apiServer) put(sl *resourcev1.ResourceSlice, notify bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	sl = sl.DeepCopy()
	sl.ResourceVersion = strconv.FormatInt(s.rv, 10)
	typ := watch.Modified
	if s.slices[sl.Name] == nil {
		typ = watch.Added
	}
	s.slices[sl.Name] = sl
	if notify {
		s.log = append(s.log, logEvent{s.rv, typ, sl})
	}
	s.notifyLocked()
	return sl.ResourceVersion
}

func (s *apiServer) remove(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	old := s.slices[name].DeepCopy()
	old.ResourceVersion = strconv.FormatInt(s.rv, 10)
	delete(s.slices, name)
	s.log = append(s.log, logEvent{s.rv, watch.Deleted, old})
	s.notifyLocked()
	return old.ResourceVersion
}

// bookmark moves the resource version on with a bookmark event only.
func (s *apiServer) bookmark() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	bm := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
	s.log = append(s.log, logEvent{s.rv, watch.Bookmark, bm})
	s.notifyLocked()
	return bm.ResourceVersion
}

// expire compacts the event log away and ends every open watch with 410
// Gone: the reflector must list again.
func (s *apiServer) expire() {
	s.set(func(s *apiServer) {
		s.compacted, s.log = s.rv, nil
		s.expired++
	})
}

func (s *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	version, ok := strings.CutPrefix(r.URL.Path, "/apis/resource.k8s.io/")
	version, ok2 := strings.CutSuffix(version, "/resourceslices")
	rec := apiRequest{version: version, query: q, accept: r.Header.Get("Accept"),
		userAgent: r.Header.Get("User-Agent"), auth: r.Header.Get("Authorization")}

	s.mu.Lock()
	forbidden, served := s.forbidden, s.served[version]
	s.mu.Unlock()

	mediaType := jsonType
	if !s.jsonOnly && strings.Contains(rec.accept, protobufType) {
		mediaType = protobufType
	}
	info, _ := runtime.SerializerInfoForMediaType(s.codecs.SupportedMediaTypes(), mediaType)
	gv := schema.GroupVersion{Group: "resource.k8s.io", Version: version}
	enc := s.codecs.EncoderForVersion(info.Serializer, gv)
	answer := func(status int, contentType string) {
		rec.status = status
		s.record(rec)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
	}
	fail := func(err *apierrors.StatusError) {
		answer(int(err.ErrStatus.Code), mediaType)
		if err := enc.Encode(&err.ErrStatus, w); err != nil {
			s.t.Errorf("encode status: %v", err)
		}
	}
	s.mu.Lock()
	anyServed := len(s.served) > 0
	s.mu.Unlock()
	switch {
	case r.URL.Path == "/apis/resource.k8s.io" && anyServed:
		// Discovery of the group: its versions are not read.
		answer(http.StatusOK, jsonType)
		_, _ = w.Write([]byte(`{"kind":"APIGroup","apiVersion":"v1","name":"resource.k8s.io","versions":[]}`))
		return
	case !ok || !ok2 || !served:
		fail(apierrors.NewNotFound(schema.GroupResource{}, ""))
		return
	case forbidden:
		fail(apierrors.NewForbidden(slicesGR, "", errorString(
			`User "system:serviceaccount:gpuxray:gpuxray" cannot list resource "resourceslices" in API group "resource.k8s.io" at the cluster scope`)))
		return
	}
	nodeName, ok := strings.CutPrefix(q.Get("fieldSelector"), "spec.nodeName=")
	if r.Method != http.MethodGet || !ok {
		fail(apierrors.NewBadRequest("only the slices of one node are served here"))
		return
	}
	onNode := func(sl *resourcev1.ResourceSlice) bool {
		return sl.Spec.NodeName == nil || *sl.Spec.NodeName == nodeName // bookmarks have no spec
	}

	if q.Get("watch") != "true" {
		s.mu.Lock()
		list := &resourcev1.ResourceSliceList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
		for _, name := range sortedKeys(s.slices) {
			if sl := s.slices[name]; onNode(sl) {
				list.Items = append(list.Items, *sl)
			}
		}
		s.mu.Unlock()
		answer(http.StatusOK, mediaType)
		if err := enc.Encode(toVersionList(version, list), w); err != nil {
			s.t.Errorf("encode list: %v", err)
		}
		return
	}

	from, _ := strconv.ParseInt(q.Get("resourceVersion"), 10, 64)
	bookmarks := q.Get("allowWatchBookmarks") == "true"
	streamType := mediaType
	if mediaType != jsonType {
		streamType += ";stream=watch"
	}
	s.mu.Lock()
	gone, expired, goneStatus, cut := from < s.compacted, s.expired, s.goneStatus, s.cutWatches
	s.mu.Unlock()
	if cut {
		answer(http.StatusOK, streamType)
		return
	}
	if gone && goneStatus {
		fail(apierrors.NewResourceExpired("too old resource version"))
		return
	}
	answer(http.StatusOK, streamType)
	frames := info.StreamSerializer.Framer.NewFrameWriter(w)
	streamEnc := s.codecs.EncoderForVersion(info.StreamSerializer.Serializer, gv)
	send := func(typ watch.EventType, obj runtime.Object) bool {
		var raw bytes.Buffer
		if err := enc.Encode(obj, &raw); err != nil {
			s.t.Errorf("encode %s event: %v", typ, err)
			return false
		}
		if err := streamEnc.Encode(&metav1.WatchEvent{Type: string(typ), Object: runtime.RawExtension{Raw: raw.Bytes()}}, frames); err != nil {
			return false // the client went away
		}
		w.(http.Flusher).Flush()
		return true
	}
	sendGone := func() {
		st := apierrors.NewResourceExpired("too old resource version").ErrStatus
		send(watch.Error, &st)
	}
	if gone {
		sendGone()
		return
	}
	w.(http.Flusher).Flush()
	last := from
	for {
		s.mu.Lock()
		if s.down {
			s.mu.Unlock()
			return
		}
		if s.expired != expired {
			s.mu.Unlock()
			sendGone()
			return
		}
		var evs []logEvent
		for _, ev := range s.log {
			if ev.rv > last {
				evs = append(evs, ev)
			}
		}
		changed := s.changed
		s.mu.Unlock()
		for _, ev := range evs {
			last = ev.rv
			if (ev.typ == watch.Bookmark && !bookmarks) || !onNode(ev.obj) {
				continue
			}
			if !send(ev.typ, toVersion(version, ev.obj)) {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
	}
}

func (s *apiServer) record(rec apiRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, rec)
}

type errorString string

func (e errorString) Error() string { return string(e) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// toVersion returns a v1 slice as the API server sends it in version.
func toVersion(version string, sl *resourcev1.ResourceSlice) runtime.Object {
	switch version {
	case "v1beta2":
		out := &resourcev1beta2.ResourceSlice{ObjectMeta: sl.ObjectMeta, Spec: resourcev1beta2.ResourceSliceSpec{
			Driver: sl.Spec.Driver, Pool: resourcev1beta2.ResourcePool(sl.Spec.Pool), NodeName: sl.Spec.NodeName,
		}}
		for _, d := range sl.Spec.Devices {
			dev := resourcev1beta2.Device{Name: d.Name, Attributes: map[resourcev1beta2.QualifiedName]resourcev1beta2.DeviceAttribute{}}
			for k, a := range d.Attributes {
				dev.Attributes[resourcev1beta2.QualifiedName(k)] = resourcev1beta2.DeviceAttribute(a)
			}
			out.Spec.Devices = append(out.Spec.Devices, dev)
		}
		return out
	case "v1beta1":
		out := &resourcev1beta1.ResourceSlice{ObjectMeta: sl.ObjectMeta, Spec: resourcev1beta1.ResourceSliceSpec{
			Driver: sl.Spec.Driver, Pool: resourcev1beta1.ResourcePool(sl.Spec.Pool),
		}}
		if sl.Spec.NodeName != nil {
			out.Spec.NodeName = *sl.Spec.NodeName
		}
		for _, d := range sl.Spec.Devices {
			dev := resourcev1beta1.Device{Name: d.Name, Basic: &resourcev1beta1.BasicDevice{
				Attributes: map[resourcev1beta1.QualifiedName]resourcev1beta1.DeviceAttribute{}}}
			for k, a := range d.Attributes {
				dev.Basic.Attributes[resourcev1beta1.QualifiedName(k)] = resourcev1beta1.DeviceAttribute(a)
			}
			out.Spec.Devices = append(out.Spec.Devices, dev)
		}
		return out
	}
	return sl
}

func toVersionList(version string, list *resourcev1.ResourceSliceList) runtime.Object {
	switch version {
	case "v1beta2":
		out := &resourcev1beta2.ResourceSliceList{ListMeta: list.ListMeta}
		for i := range list.Items {
			out.Items = append(out.Items, *toVersion(version, &list.Items[i]).(*resourcev1beta2.ResourceSlice))
		}
		return out
	case "v1beta1":
		out := &resourcev1beta1.ResourceSliceList{ListMeta: list.ListMeta}
		for i := range list.Items {
			out.Items = append(out.Items, *toVersion(version, &list.Items[i]).(*resourcev1beta1.ResourceSlice))
		}
		return out
	}
	return list
}
