package proc_test

import (
	"testing"

	"github.com/gpuxray/gpuxray/collector/proc"
)

// A cgroup v2 file of a containerd container under systemd, as on most nodes.
const benchCgroup = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3b9f1e2a_7c4d_4e8f_9a1b_2c3d4e5f6a7b.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n"

func BenchmarkParseCgroup(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, ok := proc.ParseCgroup(benchCgroup); !ok {
			b.Fatal("not parsed")
		}
	}
}
