package listwatch

import (
	"fmt"
	"strconv"
	"sync"

	"k8s.io/client-go/tools/cache"

	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// store is the reflector's store: it applies each list and event under
// its lock as the reflector delivers them, so that a resource version the
// source reports is one its values reflect, and it keeps at most max
// values.
type store[V any] struct {
	max    int
	index  func(V) []string
	health *apihealth.Tracker
	what   string

	mu     sync.RWMutex
	items  map[string]entry[V] // by namespace/name
	byIdx  map[string]string   // index key → item key
	synced bool
	rv     string
	// changed is closed, and replaced, whenever rv, the items or synced
	// change.
	changed chan struct{}
}

type entry[V any] struct {
	uid string
	v   V
}

func newStore[V any](max int, index func(V) []string, health *apihealth.Tracker, what string) *store[V] {
	return &store[V]{
		max: max, index: index, health: health, what: what,
		items: map[string]entry[V]{}, byIdx: map[string]string{}, changed: make(chan struct{}),
	}
}

func keyOf[V any](o *Object[V]) string {
	if o.Namespace == "" {
		return o.Name
	}
	return o.Namespace + "/" + o.Name
}

func objectOf[V any](obj any) (*Object[V], bool) {
	switch o := obj.(type) {
	case *Object[V]:
		return o, o != nil
	case cache.DeletedFinalStateUnknown:
		return objectOf[V](o.Obj)
	}
	return nil, false
}

func (s *store[V]) Add(obj any) error    { return s.put(obj) }
func (s *store[V]) Update(obj any) error { return s.put(obj) }

func (s *store[V]) put(obj any) error {
	o, ok := objectOf[V](obj)
	if !ok {
		return nil
	}
	key := keyOf(o)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setRVLocked(o.ResourceVersion)
	defer s.notifyLocked()
	if !o.Keep {
		s.deleteLocked(key)
		return nil
	}
	if _, ok := s.items[key]; !ok && len(s.items) >= s.max {
		s.health.Refuse(fmt.Errorf("%s %s: %d kept already: %w", s.what, key, s.max, apihealth.ErrTooMany))
		return nil
	}
	s.deleteLocked(key)
	s.addLocked(key, entry[V]{uid: string(o.UID), v: o.Value})
	return nil
}

func (s *store[V]) Delete(obj any) error {
	o, ok := objectOf[V](obj)
	if !ok {
		return nil
	}
	key := keyOf(o)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setRVLocked(o.ResourceVersion)
	defer s.notifyLocked()
	// A StatefulSet's pod comes back under its name with a new UID: the
	// old one's deletion does not forget the new one.
	if old, ok := s.items[key]; ok && (o.UID == "" || old.uid == "" || old.uid == string(o.UID)) {
		s.deleteLocked(key)
	}
	return nil
}

// Replace keeps the listed objects, the first max of them in the list's
// order, refusing the rest.
func (s *store[V]) Replace(list []any, rv string) error {
	items := make(map[string]entry[V], min(len(list), s.max))
	refused := 0
	for _, obj := range list {
		o, ok := objectOf[V](obj)
		if !ok || !o.Keep {
			continue
		}
		key := keyOf(o)
		if _, dup := items[key]; !dup && len(items) >= s.max {
			refused++
			continue
		}
		items[key] = entry[V]{uid: string(o.UID), v: o.Value}
	}
	if refused > 0 {
		s.health.Refuse(fmt.Errorf("%s: %d listed beyond the %d kept: %w", s.what, refused, s.max, apihealth.ErrTooMany))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items, s.byIdx = items, map[string]string{}
	for key, e := range items {
		s.indexLocked(key, e.v)
	}
	s.rv, s.synced = rv, true
	s.notifyLocked()
	return nil
}

// clear forgets every object and marks the store synced: the API server
// serves no such objects.
func (s *store[V]) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items, s.byIdx, s.synced = map[string]entry[V]{}, map[string]string{}, true
	s.notifyLocked()
}

func (s *store[V]) Resync() error { return nil }

// UpdateResourceVersion is called by the reflector with each resource
// version it moves to.
func (s *store[V]) UpdateResourceVersion(rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setRVLocked(rv)
	s.notifyLocked()
}

// Bookmark is called with a bookmark's resource version.
func (s *store[V]) Bookmark(rv string) error {
	s.UpdateResourceVersion(rv)
	return nil
}

func (s *store[V]) setRVLocked(rv string) {
	if rv != "" {
		s.rv = rv
	}
}

func (s *store[V]) addLocked(key string, e entry[V]) {
	s.items[key] = e
	s.indexLocked(key, e.v)
}

func (s *store[V]) indexLocked(key string, v V) {
	if s.index == nil {
		return
	}
	for _, k := range s.index(v) {
		if k != "" {
			s.byIdx[k] = key
		}
	}
}

func (s *store[V]) deleteLocked(key string) {
	old, ok := s.items[key]
	if !ok {
		return
	}
	delete(s.items, key)
	if s.index == nil {
		return
	}
	for _, k := range s.index(old.v) {
		if s.byIdx[k] == key {
			delete(s.byIdx, k)
		}
	}
}

func (s *store[V]) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// reached reports whether resource version have is want or later. Resource
// versions are opaque: two that both parse as integers are compared as
// such (as the API server's are), others must be equal.
func reached(have, want string) bool {
	if have == "" {
		return false
	}
	h, err1 := strconv.ParseUint(have, 10, 64)
	w, err2 := strconv.ParseUint(want, 10, 64)
	if err1 == nil && err2 == nil {
		return h >= w
	}
	return have == want
}
