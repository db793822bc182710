// Package kubelet reads which container holds which GPU from the kubelet's
// pod-resources API, on one long-lived gRPC connection to its unix socket.
package kubelet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector"
)

// Reasons of the *collector.SourceError values a Client returns, as they
// appear in gpuxray_source_errors_total{source="kubelet",reason}.
const (
	// ReasonUnavailable: the socket is absent or the connection is down.
	ReasonUnavailable = "unavailable"
	// ReasonDeadline: the kubelet did not answer within Config.Timeout.
	ReasonDeadline = "deadline"
	// ReasonExhausted: the kubelet's rate limit refused the call (or the
	// answer exceeded Config.MaxRecvBytes; the error text says which).
	ReasonExhausted = "exhausted"
	// ReasonOther: any other failure, including a cancelled context.
	ReasonOther = "other"
	// ReasonMalformedDeviceID: an answer listed a device ID that names no
	// device form gpuxray knows; the entry was skipped (AllocationList.Problems).
	ReasonMalformedDeviceID = "malformed_device_id"
	// ReasonInvalidName: an answer listed a namespace, pod or container name
	// that is not valid UTF-8 or longer than any Kubernetes name; the entry
	// was skipped.
	ReasonInvalidName = "invalid_name"
)

// maxNameBytes is the longest Kubernetes object name (a DNS subdomain).
const maxNameBytes = 253

// Backoff after ResourceExhausted: the kubelet's limit (QPS 100, burst 10) is
// shared by every client on the node, so pressing on only starves the others.
const (
	backoffInitial = time.Second
	backoffMax     = 30 * time.Second
)

// ErrBackoff is returned, as is and not as a *collector.SourceError, for a
// call that was not sent because the client is backing off after
// ResourceExhausted: the source is down, but no new attempt failed.
var ErrBackoff = errors.New("backing off after the kubelet's rate limit refused a call")

// Client reads GPU allocations from the kubelet. Its gRPC connection
// reconnects by itself, with backoff, when the kubelet restarts. A Client is
// safe for concurrent use.
type Client struct {
	cfg   Config
	clock Clock
	log   *zap.Logger
	conn  *grpc.ClientConn
	api   podresourcesv1.PodResourcesListerClient

	malformed atomic.Uint64

	// listMu serialises List calls, which share the allocation buffers.
	listMu sync.Mutex
	// bufs are the two allocation slices List fills in turn: one is the
	// last good list's, which a stale answer repeats, the other is the
	// next answer's.
	bufs [2][]collector.Allocation
	good int // the index in bufs of the last good list's

	mu       sync.Mutex
	lastGood collector.AllocationList
	backoff  time.Duration // length of the current window; 0 after a success
	retryAt  time.Time     // calls before this instant are not sent
}

// New validates cfg and returns a Client. It does not connect: the connection
// is made by the first call, so a node agent starts before its kubelet does.
func New(cfg Config, logger *zap.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clock := cfg.Clock
	if clock == nil {
		clock = realClock{}
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	// grpc's own unix resolver dials the socket and never goes through a
	// proxy; a custom dialer would be handed "unix://…" and have to strip it.
	conn, err := grpc.NewClient("unix://"+cfg.Socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxRecvBytes)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				// A restarted kubelet is found again within about a poll.
				MaxDelay: time.Second,
			},
			MinConnectTimeout: cfg.Timeout,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("kubelet client for %s: %w", cfg.Socket, err)
	}
	return &Client{
		cfg:   cfg,
		clock: clock,
		log:   logger,
		conn:  conn,
		api:   podresourcesv1.NewPodResourcesListerClient(conn),
	}, nil
}

// Close closes the connection. Calls after Close fail with ReasonOther.
func (c *Client) Close() error {
	return c.conn.Close()
}

// MalformedTotal is the number of device IDs that List and Allocatable have
// skipped because collector.ParseDeviceID rejected them (and of DRA devices
// with an unusable claim, driver, pool or device name), counted once per
// answer that listed them. A malformed ID does not fail the call.
func (c *Client) MalformedTotal() uint64 {
	return c.malformed.Load()
}

// List asks the kubelet, once, which GPU devices each container holds —
// through a device plugin (devices) or a DRA claim (dynamic_resources, as
// allocations of kind collector.RefDRA, any driver's) — and returns them
// sorted by namespace, pod, container and device ID. The
// Allocations slice is shared with later stale answers, and its memory is
// reused by the fresh answer after the next: treat it as read-only, and
// be done with it by then (the engine is, within its poll).
//
// The error contract lets a caller set gpuxray_source_up from err != nil and
// count gpuxray_source_errors_total from the *collector.SourceError values
// only, so that no failure is counted twice:
//   - success: a fresh list (Stale false, At now) and a nil error;
//   - the call failed: the last good list with Stale true and its own At (a
//     zero list if there never was one) and a *collector.SourceError whose
//     Reason is ReasonUnavailable, ReasonDeadline, ReasonExhausted or
//     ReasonOther;
//   - the call was not sent because a ResourceExhausted answer opened a
//     backoff window (1s, doubling to 30s, reset by a success): the last good
//     list with Stale true and ErrBackoff, which is not a SourceError since
//     the call that met the refusal already reported it.
//
// List never retries; the next poll is the retry.
func (c *Client) List(ctx context.Context) (collector.AllocationList, error) {
	if c.backingOff() {
		return c.stale(), ErrBackoff
	}
	c.listMu.Lock()
	defer c.listMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := c.api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return c.stale(), c.failed("list pod resources", err)
	}
	next := 1 - c.good
	allocs, problems := c.allocations(resp, c.bufs[next][:0])
	c.bufs[next], c.good = allocs, next
	list := collector.AllocationList{At: c.clock.Now(), Allocations: allocs, Problems: problems}
	c.mu.Lock()
	c.lastGood, c.backoff, c.retryAt = list, 0, time.Time{}
	c.mu.Unlock()
	return list, nil
}

// Allocatable asks the kubelet for the GPU devices it can assign, sorted by
// ID. Errors are *collector.SourceError values as for List, and a refusal
// opens the backoff window List observes too, since the kubelet's limit is
// shared; within a window the call is not sent and the error is ErrBackoff.
func (c *Client) Allocatable(ctx context.Context) ([]collector.DeviceRef, error) {
	if c.backingOff() {
		return nil, ErrBackoff
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := c.api.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return nil, c.failed("get allocatable resources", err)
	}
	var refs []collector.DeviceRef
	for _, dev := range resp.GetDevices() {
		if !c.cfg.matches(dev.GetResourceName()) {
			continue
		}
		for _, id := range dev.GetDeviceIds() {
			if ref, ok := c.parse(id, dev.GetResourceName(), "", ""); ok {
				refs = append(refs, ref)
			}
		}
	}
	slices.SortFunc(refs, func(a, b collector.DeviceRef) int { return strings.Compare(a.ID, b.ID) })
	return refs, nil
}

// allocations converts an answer, appending to out, keeping the devices
// of GPU resources and every device allocated through DRA (collector/dra
// resolves those and keeps its drivers' only). Entries it cannot use are
// skipped and returned as problems.
func (c *Client) allocations(resp *podresourcesv1.ListPodResourcesResponse, out []collector.Allocation) ([]collector.Allocation, []error) {
	var problems []error
	for _, pod := range resp.GetPodResources() {
		for _, ctr := range pod.GetContainers() {
			out, problems = c.container(pod, ctr, out, problems)
		}
	}
	markSharedClaims(out)
	slices.SortFunc(out, compareAllocations)
	return out, problems
}

// compareAllocations orders allocations by namespace, pod, container and
// device ID.
func compareAllocations(a, b collector.Allocation) int {
	return cmp.Or(
		strings.Compare(a.Namespace, b.Namespace),
		strings.Compare(a.Pod, b.Pod),
		strings.Compare(a.Container, b.Container),
		strings.Compare(a.Device.ID, b.Device.ID),
		strings.Compare(a.Resource, b.Resource),
		strings.Compare(a.DRA.Claim, b.DRA.Claim),
		strings.Compare(a.Device.UUID, b.Device.UUID),
	)
}

// container appends the allocations of one container of pod.
func (c *Client) container(pod *podresourcesv1.PodResources, ctr *podresourcesv1.ContainerResources, out []collector.Allocation, problems []error) ([]collector.Allocation, []error) {
	namespace, podName, name := pod.GetNamespace(), pod.GetName(), ctr.GetName()
	validNames := validName(namespace) && validName(podName) && validName(name)
	invalidName := func() error {
		return collector.NewSourceError(collector.SourceKubelet, ReasonInvalidName,
			fmt.Errorf("a pod with a namespace, name or container name of %d, %d and %d bytes, not all valid UTF-8 of at most %d",
				len(namespace), len(podName), len(name), maxNameBytes))
	}
	if len(ctr.GetDynamicResources()) > 0 {
		if !validNames {
			problems = append(problems, invalidName())
		} else {
			out, problems = c.dynamic(namespace, podName, ctr, out, problems)
		}
	}
	devices := ctr.GetDevices()
	for i, dev := range devices {
		resource := dev.GetResourceName()
		if !c.cfg.matches(resource) {
			continue
		}
		if !validNames {
			problems = append(problems, invalidName())
			continue
		}
		for _, id := range dev.GetDeviceIds() {
			if listedBefore(devices[:i], resource, id) {
				continue
			}
			ref, ok := c.parse(id, resource, namespace, podName)
			if !ok {
				problems = append(problems, collector.NewSourceError(collector.SourceKubelet, ReasonMalformedDeviceID,
					fmt.Errorf("pod %s/%s: device ID of %d bytes", namespace, podName, len(id))))
				continue
			}
			out = append(out, collector.Allocation{
				Namespace: namespace,
				Pod:       podName,
				Container: name,
				Resource:  resource,
				Device:    ref,
				Shared:    ref.Replicated || resource == ResourceGPUShared,
			})
		}
	}
	return out, problems
}

// dynamic appends the devices a container of pod namespace/podName holds
// through DRA claims, as allocations of kind collector.RefDRA whose
// resource is the driver's name. A device with a share ID is shared;
// markSharedClaims marks those of claims that several containers use.
func (c *Client) dynamic(namespace, podName string, ctr *podresourcesv1.ContainerResources, out []collector.Allocation, problems []error) ([]collector.Allocation, []error) {
	for _, dr := range ctr.GetDynamicResources() {
		// A claim lives in its pod's namespace; the kubelet names it anyway.
		claimNS := cmp.Or(dr.GetClaimNamespace(), namespace)
		claimName := dr.GetClaimName()
		for _, res := range dr.GetClaimResources() {
			driver, pool, device, share := res.GetDriverName(), res.GetPoolName(), res.GetDeviceName(), res.GetShareId()
			if !validName(claimNS) || !validName(claimName) || !validName(driver) ||
				!validName(pool) || !validName(device) || (share != "" && !validName(share)) {
				c.malformed.Add(1)
				c.log.Debug("skipping DRA device", zap.String("pod", namespace+"/"+podName),
					zap.Int("claim_bytes", len(claimName)), zap.Int("driver_bytes", len(driver)),
					zap.Int("pool_bytes", len(pool)), zap.Int("device_bytes", len(device)))
				problems = append(problems, collector.NewSourceError(collector.SourceKubelet, ReasonMalformedDeviceID,
					fmt.Errorf("pod %s/%s: a DRA device whose claim, driver, pool or device name is empty, not valid UTF-8 or longer than %d bytes",
						namespace, podName, maxNameBytes)))
				continue
			}
			d := collector.DRADevice{
				ClaimNamespace: claimNS, Claim: claimName,
				Driver: driver, Pool: pool, Device: device,
				ShareID: share,
			}
			out = append(out, collector.Allocation{
				Namespace: namespace,
				Pod:       podName,
				Container: ctr.GetName(),
				Resource:  d.Driver,
				Device:    collector.DeviceRef{ID: d.Driver + "/" + d.Pool + "/" + d.Device, Kind: collector.RefDRA},
				Shared:    share != "",
				DRA:       d,
			})
		}
	}
	return out, problems
}

// markSharedClaims marks as shared the DRA devices of every claim that
// several containers use (one pod's, or several pods'): like a time-slicing
// replica, each holder is credited with its own processes' use of the GPU.
func markSharedClaims(allocs []collector.Allocation) {
	type claim struct{ namespace, name string }
	type holder struct{ namespace, pod, container string }
	first := map[claim]holder{}
	shared := map[claim]bool{}
	for _, a := range allocs {
		if a.DRA.IsZero() {
			continue
		}
		k, h := claim{a.DRA.ClaimNamespace, a.DRA.Claim}, holder{a.Namespace, a.Pod, a.Container}
		if f, ok := first[k]; !ok {
			first[k] = h
		} else if f != h {
			shared[k] = true
		}
	}
	if len(shared) == 0 {
		return
	}
	for i := range allocs {
		if a := &allocs[i]; !a.DRA.IsZero() && shared[claim{a.DRA.ClaimNamespace, a.DRA.Claim}] {
			a.Shared = true
		}
	}
}

// validName reports whether a Kubernetes name from the kubelet can be a
// label value: valid UTF-8, not empty, no longer than any Kubernetes name.
func validName(s string) bool {
	return s != "" && len(s) <= maxNameBytes && utf8.ValidString(s)
}

// parse parses a device ID of pod namespace/name (none for an allocatable
// device), counting and logging one that gpuxray cannot map to a device:
// it is skipped rather than failing the whole answer.
func (c *Client) parse(id, resource, namespace, pod string) (collector.DeviceRef, bool) {
	ref, err := collector.ParseDeviceID(id)
	if err != nil {
		c.malformed.Add(1)
		where := zap.Skip()
		if pod != "" {
			where = zap.String("pod", namespace+"/"+pod)
		}
		c.log.Debug("skipping device ID", zap.String("resource", resource), where, zap.Error(err))
		return ref, false
	}
	return ref, true
}

// backingOff reports whether calls are held back after ResourceExhausted.
func (c *Client) backingOff() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clock.Now().Before(c.retryAt)
}

// stale returns the last good list marked stale.
func (c *Client) stale() collector.AllocationList {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.lastGood
	list.Stale = true
	return list
}

// failed classifies a failed call and, on ResourceExhausted, opens or widens
// the backoff window.
func (c *Client) failed(op string, err error) error {
	reason := ReasonOther
	switch status.Code(err) {
	case codes.Unavailable:
		reason = ReasonUnavailable
		// Try to reconnect now rather than after gRPC's backoff, so the
		// next poll finds a restarted kubelet.
		c.conn.ResetConnectBackoff()
	case codes.DeadlineExceeded:
		reason = ReasonDeadline
	case codes.ResourceExhausted:
		reason = ReasonExhausted
		c.mu.Lock()
		c.backoff = min(max(2*c.backoff, backoffInitial), backoffMax)
		c.retryAt = c.clock.Now().Add(c.backoff)
		window := c.backoff
		c.mu.Unlock()
		c.log.Debug("kubelet refused a call, backing off", zap.Duration("for", window))
	}
	return collector.NewSourceError(collector.SourceKubelet, reason, fmt.Errorf("%s: %w", op, err))
}

// WaitReady connects and waits until the connection is ready or ctx is
// done. List does not need it; replay calls it after restarting its
// simulated kubelet, so that the first poll after the restart on a virtual
// clock does not depend on how fast the real clock reconnects.
func (c *Client) WaitReady(ctx context.Context) error {
	c.conn.ResetConnectBackoff()
	c.conn.Connect()
	for {
		s := c.conn.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if s == connectivity.TransientFailure {
			c.conn.ResetConnectBackoff()
		}
		if !c.conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("kubelet connection to %s not ready: %w (%s)", c.cfg.Socket, ctx.Err(), s)
		}
	}
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// listedBefore reports whether one of a container's earlier device groups
// lists device id of resource: the kubelet lists a device once per NUMA
// node of its topology, each in a ContainerDevices of its own (kubernetes
// pkg/kubelet/cm/container_manager_linux.go
// containerDevicesFromResourceDeviceInstances), and those are one device.
func listedBefore(groups []*podresourcesv1.ContainerDevices, resource, id string) bool {
	for _, g := range groups {
		if g.GetResourceName() == resource && slices.Contains(g.GetDeviceIds(), id) {
			return true
		}
	}
	return false
}
