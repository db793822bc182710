package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
	"github.com/gpuxray/gpuxray/collector/internal/listwatch"
)

// ClaimClient lists and watches the ResourceClaims of a namespace. Client
// is one.
type ClaimClient interface {
	ListClaims(ctx context.Context, namespace string, opts metav1.ListOptions) (*ResourceClaimList, error)
	WatchClaims(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
}

// ClaimKey names a ResourceClaim.
type ClaimKey struct{ Namespace, Name string }

func (k ClaimKey) String() string { return k.Namespace + "/" + k.Name }

// Claim is what the agent keeps of one ResourceClaim: its allocated
// devices, and the UIDs of the pods it is reserved for.
type Claim struct {
	Results     []ClaimResult
	ReservedFor []string
}

// ClaimResult is one allocated device of a claim.
type ClaimResult struct {
	// Request is the claim's request the device was allocated for, without
	// a prioritized list's "/<subrequest>".
	Request              string
	Driver, Pool, Device string
	ShareID              string
	// AdminAccess: allocated with admin access (KEP-5018), which gives a
	// monitor access to a device without holding it.
	AdminAccess bool
}

// result returns the claim's result for a device, if it lists it.
func (c *Claim) result(driver, pool, device, share string) (ClaimResult, bool) {
	for _, r := range c.Results {
		if r.Driver == driver && r.Pool == pool && r.Device == device && r.ShareID == share {
			return r, true
		}
	}
	return ClaimResult{}, false
}

// Bounds of what is kept of claims: the API allocates at most 32 devices
// a claim (resource/v1 AllocationResultsMaxSize) and reserves it for at
// most 256 consumers (ResourceClaimReservedForMaxSize).
const (
	MaxClaims          = 1024
	maxClaimResults    = 32
	maxClaimReservedBy = 256
)

// Claims is the source of the ResourceClaims that the node's pods use. The
// API selects claims by nothing but name and namespace
// (kubernetes/kubernetes pkg/registry/resource/resourceclaim/strategy.go
// toSelectableFields, at 0021a864), so each wanted claim is listed and
// watched on its own, with the field selector metadata.name=<claim> in its
// namespace, through collector/internal/listwatch: what reaches the node
// is its own pods' claims, never the cluster's. Want says which claims
// are wanted; a claim no longer wanted is no longer watched.
//
// The agent's service account needs get, list and watch on resourceclaims
// (group resource.k8s.io): RBAC cannot narrow that to a node's claims.
// Its methods are safe for concurrent use and never block on the API
// server, but for WaitSynced.
type Claims struct {
	client ClaimClient
	log    *zap.Logger
	health *apihealth.Tracker
	cfg    Config

	mu      sync.Mutex
	ctx     context.Context // Run's; nil before
	wanted  map[ClaimKey]bool
	watches map[ClaimKey]*claimWatch
	refused bool
	wg      sync.WaitGroup
}

type claimWatch struct {
	lw   *listwatch.Source[*Claim]
	stop context.CancelFunc
}

// NewClaims returns the claim source of cfg's node, reading through client.
func NewClaims(cfg Config, client ClaimClient, logger *zap.Logger) (*Claims, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("dra: no Kubernetes client")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Claims{client: client, cfg: cfg, log: logger,
		health: apihealth.New(collector.SourceDRA, "ResourceClaim API",
			"claims are read as last seen; a claim not seen yet leaves its GPUs unattributed", logger),
		wanted: map[ClaimKey]bool{}, watches: map[ClaimKey]*claimWatch{}}, nil
}

// Run watches the wanted claims until ctx is done, then stops every watch
// and returns nil.
func (c *Claims) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.ctx != nil {
		c.mu.Unlock()
		return errors.New("dra: claims already running")
	}
	c.ctx = ctx
	c.syncLocked()
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	for k, w := range c.watches {
		w.stop()
		delete(c.watches, k)
	}
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// Want makes keys the claims watched: new ones are listed and watched,
// those not in keys are no longer.
func (c *Claims) Want(keys map[ClaimKey]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wanted = keys
	c.syncLocked()
}

func (c *Claims) syncLocked() {
	if c.ctx == nil {
		return
	}
	for k, w := range c.watches {
		if !c.wanted[k] {
			w.stop()
			delete(c.watches, k)
		}
	}
	// In a stable order, so that the bound refuses the same claims.
	keys := make([]ClaimKey, 0, len(c.wanted))
	for k := range c.wanted {
		if c.watches[k] == nil {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b ClaimKey) int { return strings.Compare(a.String(), b.String()) })
	refused := 0
	for _, k := range keys {
		if len(c.watches) >= MaxClaims {
			refused++
			continue
		}
		lw, err := c.newWatch(k)
		if err != nil {
			c.log.Error("cannot watch a ResourceClaim", zap.Stringer("claim", k), zap.Error(err))
			continue
		}
		ctx, stop := context.WithCancel(c.ctx)
		c.watches[k] = &claimWatch{lw: lw, stop: stop}
		c.wg.Go(func() { _ = lw.Run(ctx) })
	}
	if refused > 0 && !c.refused {
		c.health.Refuse(fmt.Errorf("%d ResourceClaims beyond the %d watched: %w", refused, MaxClaims, apihealth.ErrTooMany))
	}
	c.refused = refused > 0
}

func (c *Claims) newWatch(k ClaimKey) (*listwatch.Source[*Claim], error) {
	return listwatch.New(listwatch.Config[*Claim]{
		What: "ResourceClaim " + k.String(),
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.client.ListClaims(ctx, k.Namespace, opts)
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.client.WatchClaims(ctx, k.Namespace, opts)
		},
		FieldSelector: fields.OneTermEqualSelector("metadata.name", k.Name).String(),
		Convert: func(obj runtime.Object) (*Claim, bool, error) {
			return convertClaim(obj, k)
		},
		MaxObjects:  1,
		NotServed:   func(err error) bool { return errors.Is(err, ErrNotServed) },
		CallTimeout: c.cfg.APITimeout,
		Health:      c.health,
		Logger:      c.log,
	})
}

// convertClaim keeps what attribution needs of claim k.
func convertClaim(obj runtime.Object, k ClaimKey) (*Claim, bool, error) {
	rc, ok := obj.(*ResourceClaim)
	if !ok || rc == nil || rc.Name != k.Name || rc.Namespace != k.Namespace {
		return nil, false, nil
	}
	out := &Claim{}
	if a := rc.Status.Allocation; a != nil {
		if len(a.Devices.Results) > maxClaimResults {
			return nil, false, &apihealth.TooLargeError{What: "a ResourceClaim's allocation", Limit: maxClaimResults, Unit: "devices"}
		}
		for _, r := range a.Devices.Results {
			req, _, _ := strings.Cut(r.Request, "/")
			res := ClaimResult{Request: req, Driver: r.Driver, Pool: r.Pool, Device: r.Device, AdminAccess: r.AdminAccess != nil && *r.AdminAccess}
			if r.ShareID != nil {
				res.ShareID = *r.ShareID
			}
			out.Results = append(out.Results, res)
		}
	}
	if len(rc.Status.ReservedFor) > maxClaimReservedBy {
		return nil, false, &apihealth.TooLargeError{What: "a ResourceClaim's reservedFor", Limit: maxClaimReservedBy, Unit: "consumers"}
	}
	for _, r := range rc.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			out.ReservedFor = append(out.ReservedFor, r.UID)
		}
	}
	return out, true, nil
}

// Get returns claim k as last seen, and whether it is known: watched, and
// listed (a claim listed as absent is not known either).
func (c *Claims) Get(k ClaimKey) (*Claim, bool) {
	c.mu.Lock()
	w := c.watches[k]
	c.mu.Unlock()
	if w == nil {
		return nil, false
	}
	return w.lw.Get(k.String())
}

// WaitSynced waits until every wanted claim has been listed, or ctx is
// done. A replay calls it before each poll, so that the poll's answer does
// not depend on how fast the loopback API server answered.
func (c *Claims) WaitSynced(ctx context.Context) error {
	c.mu.Lock()
	ws := make([]*listwatch.Source[*Claim], 0, len(c.watches))
	for _, w := range c.watches {
		ws = append(ws, w.lw)
	}
	c.mu.Unlock()
	for _, lw := range ws {
		if !lw.WaitForSync(ctx) {
			return fmt.Errorf("ResourceClaims not listed: %w", ctx.Err())
		}
	}
	return nil
}

// Health reports whether every call to the API server since the previous
// Health succeeded, and returns the failures, each a
// *collector.SourceError of source "dra".
func (c *Claims) Health() (up bool, errs []error) { return c.health.Take(true) }

// waitSyncedFor bounds WaitSynced for a replay's Resolver.
const waitSyncedFor = 30 * time.Second
