package proc_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuxray/gpuxray/collector/proc"
)

const (
	uid       = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	uidU      = "0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d" // as systemd writes it
	staticUID = "6f4b2a6b8e0e5f1c3a9d7e2b1c0f4a5d"     // a static pod's: the MD5 of its manifest
	outerUID  = "f0e1d2c3-b4a5-4968-8776-5a4b3c2d1e0f"
	innerUIDU = "11111111_2222_4333_8444_555555555555"
	innerUID  = "11111111-2222-4333-8444-555555555555"
	cid       = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
	outerCID  = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
)

// v1 renders a cgroup v1 file with twelve hierarchies plus the empty
// unified one of a hybrid host, every hierarchy at path except rdma, which
// container runtimes leave at the root.
func v1(path string) string {
	ctrls := []string{"pids", "hugetlb", "net_cls,net_prio", "perf_event", "memory", "devices",
		"cpuset", "blkio", "freezer", "cpu,cpuacct", "rdma", "name=systemd"}
	var b strings.Builder
	for i, c := range ctrls {
		p := path
		if c == "rdma" {
			p = "/"
		}
		b.WriteString(strconv.Itoa(12-i) + ":" + c + ":" + p + "\n")
	}
	b.WriteString("0::/\n")
	return b.String()
}

func TestParseCgroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content string
		uid, cid      string
		ok            bool
	}{
		// cgroup v2, systemd driver.
		{"v2 systemd containerd besteffort",
			"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
			uid, cid, true},
		{"v2 systemd containerd guaranteed",
			"0::/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
			uid, cid, true},
		{"v2 systemd crio burstable",
			"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + cid + ".scope\n",
			uid, cid, true},
		{"v2 systemd crio with crun's container sub-cgroup",
			"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-" + cid + ".scope/container\n",
			uid, cid, true},
		{"crio conmon is the pod's, not the container's",
			"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope\n",
			uid, "", true},
		{"v2 systemd docker (cri-dockerd)",
			"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/docker-" + cid + ".scope\n",
			uid, cid, true},
		// cgroup v2, cgroupfs driver.
		{"v2 cgroupfs containerd burstable", "0::/kubepods/burstable/pod" + uid + "/" + cid + "\n", uid, cid, true},
		{"v2 cgroupfs guaranteed", "0::/kubepods/pod" + uid + "/" + cid + "\n", uid, cid, true},
		{"v2 cgroupfs crio", "0::/kubepods/besteffort/pod" + uid + "/crio-" + cid + "\n", uid, cid, true},
		// cgroup v1.
		{"v1 cgroupfs docker", v1("/kubepods/besteffort/pod" + uid + "/" + cid), uid, cid, true},
		{"v1 systemd docker",
			v1("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/docker-" + cid + ".scope"),
			uid, cid, true},
		{"v1 systemd containerd guaranteed",
			v1("/kubepods.slice/kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope"), uid, cid, true},
		{"v1 with the container on a later line",
			"3:cpu,cpuacct:/kubepods/besteffort/pod" + uid + "\n2:memory:/kubepods/besteffort/pod" + uid + "/" + cid + "\n1:name=systemd:/\n",
			uid, cid, true},
		{"v1 CRLF line ends", "1:name=systemd:/kubepods/pod" + uid + "/" + cid + "\r\n0::/\r\n", uid, cid, true},
		// kind and nesting.
		{"kind",
			"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
			uid, cid, true},
		{"kind inside a pod: the inner pod wins",
			"0::/kubepods/besteffort/pod" + outerUID + "/" + outerCID + "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod" + innerUIDU + ".slice/cri-containerd-" + cid + ".scope\n",
			innerUID, cid, true},
		// Seen from a private cgroup namespace.
		{"private namespace besteffort",
			"0::/../../kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n", uid, cid, true},
		{"private namespace burstable",
			"0::/../../../kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
			uid, cid, true},
		{"private namespace guaranteed",
			"0::/../../../kubepods-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n", uid, cid, true},
		// In a pod, no container.
		{"pod-level cgroup",
			"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice\n", uid, "", true},
		{"container ID one digit short", "0::/kubepods/besteffort/pod" + uid + "/" + cid[1:] + "\n", uid, "", true},
		{"container ID in upper case", "0::/kubepods/besteffort/pod" + uid + "/" + strings.ToUpper(cid) + "\n", uid, "", true},
		// Not in a pod.
		{"empty", "", "", "", false},
		{"root", "0::/\n", "", "", false},
		{"docker outside kubernetes", "0::/system.slice/docker-" + cid + ".scope\n", "", "", false},
		{"systemd service", "0::/system.slice/leak.service\n", "", "", false},
		{"user session", "0::/user.slice/user-1000.slice/session-3.scope\n", "", "", false},
		{"podman", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + cid + ".scope\n", "", "", false},
		{"v1 host service", v1("/system.slice/containerd.service"), "", "", false},
		{"QoS level only", "0::/kubepods.slice/kubepods-besteffort.slice\n", "", "", false},
		{"pod UID too short", "0::/kubepods/besteffort/pod" + uid[1:] + "/" + cid + "\n", "", "", false},
		{"pod UID glued to a word", "0::/kubepods.slice/kubepods-besteffortpod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n", "", "", false},
		{"pod UID with another separator", "0::/kubepods/pod" + strings.ReplaceAll(uid, "-", ".") + "/" + cid + "\n", "", "", false},
		{"no path field", "0:\n", "", "", false},
		// A static pod: the kubelet's 32-hex hash of its manifest is its UID.
		{"static pod, v2 systemd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + staticUID + ".slice/cri-containerd-" + cid + ".scope\n",
			staticUID, cid, true},
		{"static pod, v2 cgroupfs guaranteed", "0::/kubepods/pod" + staticUID + "/" + cid + "\n", staticUID, cid, true},
		{"static pod, private namespace", "0::/../../kubepods-besteffort-pod" + staticUID + ".slice/cri-containerd-" + cid + ".scope\n",
			staticUID, cid, true},
		{"static pod UID one digit short", "0::/kubepods/pod" + staticUID[1:] + "/" + cid + "\n", "", "", false},
		{"static pod UID in upper case", "0::/kubepods/pod" + strings.ToUpper(staticUID) + "/" + cid + "\n", "", "", false},
		{"static pod UID glued to a word", "0::/kubepods.slice/kubepods-besteffortpod" + staticUID + ".slice\n", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gotUID, gotCID, ok := proc.ParseCgroup(tt.content)
			if gotUID != tt.uid || gotCID != tt.cid || ok != tt.ok {
				t.Errorf("ParseCgroup(%q) = %q, %q, %v; want %q, %q, %v", tt.content, gotUID, gotCID, ok, tt.uid, tt.cid, tt.ok)
			}
		})
	}
}

var (
	canonicalUID = regexp.MustCompile(`^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$`)
	canonicalCID = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func FuzzParseCgroup(f *testing.F) {
	for _, s := range []string{
		"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope\n",
		"0::/../../kubepods-besteffort-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope\n",
		v1("/kubepods/besteffort/pod" + uid + "/" + cid),
		"0::/system.slice/docker-" + cid + ".scope\n",
		"0::/kubepods/pod" + uid + "/docker-" + cid + ".scope/x\n",
		"0::/pod" + uid + "\n",
		"0::/kubepods/pod" + staticUID + "/" + cid + "\n",
		"::\n:",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, content string) {
		uid, cid, ok := proc.ParseCgroup(content)
		if !ok {
			if uid != "" || cid != "" {
				t.Errorf("not ok, but uid %q, container %q", uid, cid)
			}
			return
		}
		if !canonicalUID.MatchString(uid) {
			t.Errorf("pod UID %q is neither a canonical UUID nor a static pod's 32-hex hash", uid)
		}
		if cid != "" && !canonicalCID.MatchString(cid) {
			t.Errorf("container ID %q is not 64 lowercase hex digits", cid)
		}
	})
}
