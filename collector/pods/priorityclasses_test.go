package pods

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zaptest"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuxray/gpuxray/internal/testtool"
)

func priorityClass(name string, v int32) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v}
}

// runClasses runs a PriorityClasses watch of c until the test ends.
func runClasses(t *testing.T, c *fake.Clientset) *PriorityClasses {
	t.Helper()
	p, err := NewPriorityClasses(fakeClasses{c.SchedulingV1().PriorityClasses()}, 0, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// TestPriorityClasses: the watch knows every class's value from its first
// list, follows classes made and deleted, and is up.
func TestPriorityClasses(t *testing.T) {
	t.Parallel()
	c := fake.NewClientset(priorityClass("train-high", 100000), priorityClass("notebook", 10))
	p := runClasses(t, c)
	if !p.WaitForSync(context.Background()) {
		t.Fatal("no sync")
	}
	if got, want := p.PriorityClasses(), map[string]int32{"train-high": 100000, "notebook": 10}; !maps.Equal(got, want) {
		t.Errorf("classes %v, want %v", got, want)
	}
	if up, errs := p.Health(); !up || len(errs) > 0 {
		t.Errorf("health %v %v, want up", up, errs)
	}
	ctx := context.Background()
	if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, priorityClass("batch", 1000), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.SchedulingV1().PriorityClasses().Delete(ctx, "notebook", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testtool.Eventually(t, "the watch sees the new class and the deleted one", func() bool {
		return maps.Equal(p.PriorityClasses(), map[string]int32{"train-high": 100000, "batch": 1000})
	})
	// The map is the caller's.
	p.PriorityClasses()["train-high"] = 0
	if p.PriorityClasses()["train-high"] != 100000 {
		t.Error("a caller's change reached the table")
	}
}

// TestPriorityClassesForbidden: RBAC that denies priorityclasses (an agent
// upgraded without its ClusterRole) makes the watch down, with each failure
// a pods SourceError of reason forbidden; once allowed, it lists and is up.
func TestPriorityClassesForbidden(t *testing.T) {
	t.Parallel()
	c := fake.NewClientset(priorityClass("train-high", 100000))
	var deny atomic.Bool
	deny.Store(true)
	c.PrependReactor("list", "priorityclasses", func(k8stesting.Action) (bool, runtime.Object, error) {
		if deny.Load() {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "scheduling.k8s.io", Resource: "priorityclasses"}, "",
				errors.New(`User "system:serviceaccount:gpuxray:gpuxray" cannot list resource "priorityclasses"`))
		}
		return false, nil, nil
	})
	p := runClasses(t, c)
	var all []error
	testtool.Eventually(t, "a failure is reported", func() bool {
		up, errs := p.Health()
		all = append(all, errs...)
		return !up && len(all) > 0
	})
	if r := reasons(all); r[ReasonForbidden] == 0 || len(r) != 1 {
		t.Errorf("reasons %v, want only forbidden", r)
	}
	if len(p.PriorityClasses()) != 0 {
		t.Error("classes known before any list succeeded")
	}
	deny.Store(false)
	testtool.Eventually(t, "the watch recovers", func() bool {
		up, _ := p.Health()
		return up && p.PriorityClasses()["train-high"] == 100000
	})
}

// TestPriorityClassesBounded: a cluster with more PriorityClasses than the
// bound (742,266 in an attack, each a series) keeps the bound, the first
// by name, and counts the rest as too_many; the source is down while it
// refuses. Before, every class was kept and exported.
func TestPriorityClassesBounded(t *testing.T) {
	t.Parallel()
	var objs []runtime.Object
	for i := range 250 {
		objs = append(objs, priorityClass(fmt.Sprintf("class-%03d", i), int32(i)))
	}
	c := fake.NewClientset(objs...)
	p, err := NewPriorityClasses(fakeClasses{c.SchedulingV1().PriorityClasses()}, 100, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !p.WaitForSync(ctx) {
		t.Fatal("no sync")
	}
	got := p.PriorityClasses()
	if len(got) != 100 || got["class-099"] != 99 {
		t.Errorf("%d classes kept (class-099: %d), want the first 100", len(got), got["class-099"])
	}
	up, errs := p.Health()
	if r := reasons(errs); up || r[ReasonTooMany] == 0 || len(r) != 1 {
		t.Errorf("health %v, reasons %v; want down with too_many", up, r)
	}
	// A class made beyond the bound is refused too.
	if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, priorityClass("zz-late", 5), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var all []error
	testtool.Eventually(t, "the late class is refused", func() bool {
		_, errs := p.Health()
		all = append(all, errs...)
		return reasons(all)[ReasonTooMany] > 0
	})
	if _, ok := p.PriorityClasses()["zz-late"]; ok || len(p.PriorityClasses()) != 100 {
		t.Error("a class beyond the bound is kept")
	}
}
