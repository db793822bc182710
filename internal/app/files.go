package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// maxConfigBytes bounds a configuration file read at start-up (kubeconfig,
// web and HTTP client configurations, the files they name): the largest
// real ones, a kubeconfig with a few clusters' certificates, are tens of
// KiB.
const maxConfigBytes = 4 << 20

// ReadFile reads path, the file of what ("kubeconfig"), up to max bytes,
// whatever kind of file it is (a pipe from <(...) is fine), until ctx is
// done: /dev/zero is refused at max bytes, and a FIFO nobody writes to
// does not keep SIGTERM and SIGINT from ending start-up. Its errors are
// usage errors naming the path as given.
func ReadFile(ctx context.Context, path, what string, max int64) ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	var (
		mu        sync.Mutex
		file      *os.File
		abandoned bool
	)
	go func() {
		// Opening a FIFO blocks until a writer opens it, in a system call
		// nothing interrupts: then this goroutine outlives start-up, and
		// closes the file when the open returns.
		f, err := os.Open(path)
		if err != nil {
			done <- result{err: usagef("reading %s: %v", what, err)}
			return
		}
		mu.Lock()
		if abandoned {
			mu.Unlock()
			f.Close()
			return
		}
		file = f
		mu.Unlock()
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, max+1))
		switch {
		case err != nil:
			done <- result{err: usagef("reading %s: %v", what, err)}
		case int64(len(data)) > max:
			done <- result{err: usagef("%s: %s is larger than %s", path, what, byteSize(max))}
		default:
			done <- result{data: data}
		}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		mu.Lock()
		abandoned = true
		if file != nil {
			file.Close() // a pipe is read through the poller: this ends the read
		}
		mu.Unlock()
		return nil, ctx.Err()
	}
}

// checkFile checks that path, a file of what that a library reads on its
// own (again at each connection or request: certificates, a password
// file), is a regular file of at most max bytes, without opening it: a
// FIFO would block that read and a device such as /dev/zero never end it.
func checkFile(path, what string, max int64) error {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return usagef("%s %q cannot be read: %v", what, path, err)
	case !st.Mode().IsRegular():
		return usagef("%s %q is not a regular file (a %s): it is read again at run time, which a pipe or a device cannot serve", what, path, fileKind(st.Mode()))
	case st.Size() > max:
		return usagef("%s %q is larger than %s", what, path, byteSize(max))
	}
	return nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeSocket != 0:
		return "socket"
	case m.IsDir():
		return "directory"
	}
	return "special file"
}

func byteSize(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// oneLine joins the lines of a message (errors.Join, a YAML decoder's list
// of problems) into one sentence.
func oneLine(msg string) string {
	if !strings.Contains(msg, "\n") {
		return msg
	}
	var parts []string
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, strings.TrimSuffix(l, ":"))
		}
	}
	return strings.Join(parts, "; ")
}
