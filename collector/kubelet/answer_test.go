package kubelet_test

import (
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/kubelet"
)

// rawCodec sends a *[]byte as it is: a server that can write what the
// kubelet's protobuf encoder would refuse to.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }

func (rawCodec) Name() string { return "proto" }

// serveRaw starts a gRPC server on a fresh socket that answers every call
// with the bytes answer holds at the time.
func serveRaw(t *testing.T, answer *atomic.Pointer[[]byte]) string {
	t.Helper()
	path := socketPath(t)
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			var req []byte
			if err := stream.RecvMsg(&req); err != nil {
				return err
			}
			return stream.SendMsg(answer.Load())
		}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return path
}

// onePod is the wire bytes of a List answer with one GPU pod named name,
// written field by field so that name may be any bytes.
func onePod(name string) []byte {
	devs := protowire.AppendTag(nil, 1, protowire.BytesType) // resource_name
	devs = protowire.AppendString(devs, "nvidia.com/gpu")
	devs = protowire.AppendTag(devs, 2, protowire.BytesType) // device_ids
	devs = protowire.AppendString(devs, uuidA)
	ctr := protowire.AppendTag(nil, 1, protowire.BytesType) // name
	ctr = protowire.AppendString(ctr, "main")
	ctr = protowire.AppendTag(ctr, 2, protowire.BytesType) // devices
	ctr = protowire.AppendBytes(ctr, devs)
	p := protowire.AppendTag(nil, 1, protowire.BytesType) // name
	p = protowire.AppendString(p, name)
	p = protowire.AppendTag(p, 2, protowire.BytesType) // namespace
	p = protowire.AppendString(p, "ml")
	p = protowire.AppendTag(p, 3, protowire.BytesType) // containers
	p = protowire.AppendBytes(p, ctr)
	b := protowire.AppendTag(nil, 1, protowire.BytesType) // pod_resources
	return protowire.AppendBytes(b, p)
}

// TestListUndecodableAnswer: an answer the generated types reject (a name
// that is not UTF-8, which the kubelet's own protobuf encoder refuses to
// send, or truncated bytes) fails the call as ReasonOther and serves the
// last good list, stale.
func TestListUndecodableAnswer(t *testing.T) {
	t.Parallel()
	good := onePod("good")
	if err := proto.Unmarshal(good, &podresourcesv1.ListPodResourcesResponse{}); err != nil {
		t.Fatalf("the good answer does not decode: %v", err)
	}
	for name, bad := range map[string][]byte{
		"not UTF-8": append(onePod("bad-\xff"), good...),
		"truncated": good[:len(good)-3],
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var answer atomic.Pointer[[]byte]
			answer.Store(&good)
			c, _ := newClient(t, serveRaw(t, &answer), nil)
			first, err := c.List(t.Context())
			if err != nil || len(first.Allocations) != 1 || first.Allocations[0].Pod != "good" {
				t.Fatalf("first List: %+v, %v; want pod good's GPU", first.Allocations, err)
			}
			answer.Store(&bad)
			list, err := c.List(t.Context())
			if err == nil {
				t.Fatal("List took an undecodable answer")
			}
			if got := sourceReason(t, err); got != kubelet.ReasonOther {
				t.Errorf("reason %q, want %q", got, kubelet.ReasonOther)
			}
			if !list.Stale || len(list.Allocations) != 1 || list.Allocations[0].Pod != "good" {
				t.Errorf("after the bad answer: Stale %v, %+v; want the good list, stale", list.Stale, list.Allocations)
			}
		})
	}
}

// TestListInvalidNames: a namespace, pod or container name longer than
// any Kubernetes name costs that container's entries only, as a counted
// problem.
func TestListInvalidNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 254)
	_, path := serve(t, answer(
		pod("ml", long, container("main", devices("nvidia.com/gpu", uuidA))),
		pod(long, "p", container("main", devices("nvidia.com/gpu", uuidB))),
		pod("ml", "p", container(long, devices("nvidia.com/gpu", uuidC))),
		pod("ml", "good", container("main", devices("nvidia.com/gpu", uuidD))),
	))
	c, _ := newClient(t, path, nil)
	list, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Allocations) != 1 || list.Allocations[0].Pod != "good" {
		t.Errorf("allocations %+v, want pod good's only", list.Allocations)
	}
	if len(list.Problems) != 3 {
		t.Fatalf("problems %v, want 3", list.Problems)
	}
	for _, p := range list.Problems {
		var se *collector.SourceError
		if !errors.As(p, &se) || se.Reason != kubelet.ReasonInvalidName {
			t.Errorf("problem %v, want reason %s", p, kubelet.ReasonInvalidName)
		}
	}
}
