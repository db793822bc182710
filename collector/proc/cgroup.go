package proc

import "strings"

// ParseCgroup finds the pod UID and container ID in the content of a
// /proc/<pid>/cgroup file, cgroup v1 (one line per hierarchy) or v2
// ("0::<path>"). ok is false when no line names a pod; containerID is empty
// when the process is in a pod but not in a container's cgroup (CRI-O's
// conmon, a pod-level cgroup).
//
// It does not parse the path's prefix, which depends on the cgroup driver,
// the QoS class, nesting (kind) and the reader's cgroup namespace (paths
// such as "/../../kubepods-…" in a private one). It looks for the last path
// element that ends in "pod<uid>" (systemd writes "pod<uid_with_underscores>.slice";
// a static pod's UID may be a 32-hex hash instead of a UUID),
// then for the first element after it that ends in a 64-hex ID, with an
// optional runtime prefix ("cri-containerd-", "crio-", "docker-") and
// ".scope" suffix.
func ParseCgroup(content string) (podUID, containerID string, ok bool) {
	for line := range strings.Lines(content) {
		// hierarchy-ID:controller-list:path; the path may hold colons.
		_, rest, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		_, path, found := strings.Cut(rest, ":")
		if !found {
			continue
		}
		uid, cid, lineOK := parsePath(strings.TrimRight(path, "\r\n"))
		if !lineOK {
			continue
		}
		if cid != "" {
			return uid, cid, true
		}
		// A v1 file may name the pod on a line without the container (the
		// pod-level cgroup of one hierarchy); keep looking for a better one.
		if !ok {
			podUID, ok = uid, true
		}
	}
	return podUID, "", ok
}

// parsePath finds the pod UID and container ID in one cgroup path.
func parsePath(path string) (podUID, containerID string, ok bool) {
	elems := strings.Split(path, "/")
	pod := -1
	// The last pod wins: in nested clusters (kind in a pod) the outer pod
	// comes first and the kubelet we answer to is the inner one.
	for i := len(elems) - 1; i >= 0; i-- {
		if uid, found := podElem(elems[i]); found {
			podUID, pod = uid, i
			break
		}
	}
	if pod < 0 {
		return "", "", false
	}
	for _, e := range elems[pod+1:] {
		if id, found := containerElem(e); found {
			return podUID, id, true
		}
	}
	return podUID, "", true
}

// uuidLen is the length of a textual UUID, 8-4-4-4-12.
const uuidLen = 36

// hashUIDLen is the length of a static pod's UID as the kubelet makes it
// for a manifest that names none: the MD5 of the manifest in hex, with no
// dashes.
const hashUIDLen = 32

// podElem matches "pod<uid>" (cgroupfs) and "…-pod<uid>.slice" (systemd,
// which writes '_' for '-'), and returns the UID with dashes. The UID is a
// UUID, or a static pod's 32-hex hash.
func podElem(e string) (string, bool) {
	e = strings.TrimSuffix(e, ".slice")
	if uid, ok := podSuffix(e, uuidLen); ok {
		return canonicalUUID(uid)
	}
	if uid, ok := podSuffix(e, hashUIDLen); ok && isLowerHexString(uid) {
		return uid, true
	}
	return "", false
}

// podSuffix returns the n characters that end e after "pod", when e is
// "pod<n characters>" or ends in "-pod<n characters>".
func podSuffix(e string, n int) (string, bool) {
	i := len(e) - n - len("pod")
	if i < 0 || e[i:i+3] != "pod" || (i > 0 && e[i-1] != '-') {
		return "", false
	}
	return e[i+3:], true
}

func isLowerHexString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isLowerHex(s[i]) {
			return false
		}
	}
	return true
}

// canonicalUUID returns s, a lowercase UUID with '-' or '_' as separators,
// with dashes.
func canonicalUUID(s string) (string, bool) {
	if len(s) != uuidLen {
		return "", false
	}
	b := []byte(s)
	for i, c := range b {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' && c != '_' {
				return "", false
			}
			b[i] = '-'
		default:
			if !isLowerHex(c) {
				return "", false
			}
		}
	}
	return string(b), true
}

// containerIDLen is the length of a container runtime's ID in hex.
const containerIDLen = 64

// containerElem matches a container's cgroup: "<id>" (cgroupfs),
// "cri-containerd-<id>.scope", "crio-<id>.scope", "docker-<id>.scope", or
// any other "<prefix>-<id>"; not CRI-O's monitor, "crio-conmon-<id>.scope",
// whose ID is the container's but whose process is not.
func containerElem(e string) (string, bool) {
	e = strings.TrimSuffix(e, ".scope")
	i := len(e) - containerIDLen
	if i < 0 {
		return "", false
	}
	prefix, id := e[:i], e[i:]
	if prefix != "" && (!strings.HasSuffix(prefix, "-") || strings.Contains(prefix, "conmon")) {
		return "", false
	}
	if !isLowerHexString(id) {
		return "", false
	}
	return id, true
}

func isLowerHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
}
