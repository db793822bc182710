package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mkfifo makes a named pipe in a test directory; when the test ends it
// opens and closes the write end, so that a read left blocked on it
// returns.
func mkfifo(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	t.Cleanup(func() {
		if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	return p
}

// TestStartupFiles: every file flag, and every file a configuration
// names, is bounded at start-up: /dev/zero, a FIFO or a device is one
// sentence and exit 2, at once; so are a port out of range, an empty
// resource name, YAML errors of the web and HTTP configurations, and an
// argument to version. Before, --kubeconfig=/dev/zero grew to 24 GB, a
// FIFO hung start-up, several of these printed log lines or several lines
// first, and version took any argument.
func TestStartupFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := mkfifo(t, "pipe")
	kc := func(user string) string {
		return "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n" +
			"users: [{name: u, user: " + user + "}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	}
	tokenZero := write("kc-token-zero", kc("{tokenFile: /dev/zero}"))
	tokenFIFO := write("kc-token-fifo", kc("{tokenFile: "+fifo+"}"))
	badKC := write("kc-bad", "apiVersion: v1\nkind: Config\nclusters: 3\nusers: [\n")
	webTwo := write("web-two.yml", "basic_auth_user:\n  a: b\nhttp_server_confi:\n  x: 1\n")
	httpBad := write("http-bad.yml", "basic_auth:\n  usernme: a\nauthorizaton: {}\n")
	httpZero := write("http-zero.yml", "basic_auth:\n  username: a\n  password_file: /dev/zero\n")
	agent := func(args ...string) []string {
		return append([]string{"agent", "--web.listen-address=127.0.0.1:0", "--node.name=n1"}, args...)
	}
	report := func(args ...string) []string {
		return append([]string{"report", "--prometheus=http://127.0.0.1:1"}, args...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"kubeconfig /dev/zero", agent("--kubeconfig=/dev/zero"), "/dev/zero: kubeconfig is larger than 4 MiB"},
		{"kubeconfig naming /dev/zero as its token file", agent("--kubeconfig=" + tokenZero), `"/dev/zero" is not a regular file (a character device)`},
		{"kubeconfig naming a FIFO", agent("--kubeconfig=" + tokenFIFO), `pipe" is not a regular file (a FIFO)`},
		{"kubeconfig not YAML", agent("--kubeconfig=" + badKC), `--kubeconfig "` + badKC + `"`},
		{"web config /dev/zero", agent("--web.config.file=/dev/zero"), `web config file "/dev/zero" is not a regular file`},
		{"web config a FIFO", agent("--web.config.file=" + fifo), "is not a regular file"},
		{"web config YAML errors", agent("--web.config.file=" + webTwo), "field basic_auth_user not found"},
		{"port out of range", agent("--web.listen-address=127.0.0.1:99999"), `port "99999" is not a number from 0 to 65535`},
		{"empty resource names", agent("--kubelet.resource-names=,,"), `--kubelet.resource-names ",,": an empty name`},
		{"version with an argument", []string{"version", "extra"}, `unexpected argument "extra": version takes none`},
		{"HTTP config /dev/zero", report("--prometheus.http-config-file=/dev/zero"), "/dev/zero: Prometheus HTTP configuration is larger than 4 MiB"},
		{"HTTP config YAML errors", report("--prometheus.http-config-file=" + httpBad), "--prometheus.http-config-file"},
		{"HTTP config naming /dev/zero", report("--prometheus.http-config-file=" + httpZero), `"/dev/zero" is not a regular file`},
		{"bearer token file a FIFO", report("--prometheus.bearer-token-file=" + fifo), "is not a regular file (a FIFO)"},
		{"password file /dev/zero", report("--prometheus.basic-auth.username=a", "--prometheus.basic-auth.password-file=/dev/zero"), "is not a regular file"},
		{"CA file a FIFO", report("--prometheus.tls.ca-file=" + fifo), "is not a regular file (a FIFO)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCmdWithin(t, 30*time.Second, tc.args...)
			if code != 2 || !strings.Contains(errs, tc.want) {
				t.Errorf("gpuxray %v = %d, %q; want 2 containing %q", tc.args, code, errs, tc.want)
			}
			if strings.Count(strings.TrimSpace(errs), "\n") > 0 || out != "" {
				t.Errorf("want one line on stderr and nothing on stdout, got %q, %q", out, errs)
			}
		})
	}
}

// TestKubeconfigFIFOCancel: a --kubeconfig that is a FIFO nobody writes to
// blocks start-up in open or read; cancelling (what SIGTERM and SIGINT do)
// ends it promptly, and the agent stops cleanly. Before, start-up hung
// with the signals ignored.
func TestKubeconfigFIFOCancel(t *testing.T) {
	t.Parallel()
	p := mkfifo(t, "kubeconfig")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"agent", "--web.listen-address=127.0.0.1:0", "--node.name=n1", "--kubeconfig=" + p}, &out, &errb)
	}()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("agent after cancel = %d, %q; want 0", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent still reading the kubeconfig FIFO 10s after cancel")
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"one": "one",
		"yaml: unmarshal errors:\n  line 2: a\n  line 4: b": "yaml: unmarshal errors; line 2: a; line 4: b",
		"first\nsecond\n": "first; second",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}
