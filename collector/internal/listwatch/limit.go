package listwatch

import (
	"io"
	"net/http"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// Bounds on what is read from the API server.
const (
	// MaxEventBytes bounds one watch event. The API server decodes no
	// request body above 3 MiB (k8s.io/apiserver v0.37.0,
	// pkg/server/config.go: MaxRequestBodyBytes, twice etcd's default
	// 1.5 MiB request limit, because JSON is larger than the protobuf
	// stored), so no object it stores is larger; the event's wrapper adds
	// a few bytes.
	MaxEventBytes = 4 << 20
	// MaxListBytes bounds one list answer (a page): a node's 250 pods at
	// 40 KiB each are 10 MiB, and the same bound holds the kubelet's
	// pod-resources answers (collector/kubelet).
	MaxListBytes = 16 << 20
)

// LimitResponses returns a copy of rc whose responses are read within
// bounds: a watch stream's events up to MaxEventBytes each, any other
// answer up to MaxListBytes. Beyond, the read fails with a
// *apihealth.TooLargeError before more is buffered, and the source counts
// it as too_large.
func LimitResponses(rc *rest.Config) *rest.Config {
	rc = rest.CopyConfig(rc)
	rc.WrapTransport = transport.Wrappers(rc.WrapTransport, func(rt http.RoundTripper) http.RoundTripper {
		return limitTransport{rt: rt, maxEvent: MaxEventBytes, maxList: MaxListBytes}
	})
	return rc
}

type limitTransport struct {
	rt                http.RoundTripper
	maxEvent, maxList int64
}

func (l limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
		resp.Body = &eventLimit{r: resp.Body, max: l.maxEvent}
	} else {
		resp.Body = &totalLimit{r: resp.Body, left: l.maxList, max: l.maxList}
	}
	return resp, nil
}

// totalLimit fails a read past max bytes.
type totalLimit struct {
	r         io.ReadCloser
	left, max int64
}

func (t *totalLimit) Read(p []byte) (int, error) {
	if t.left < 0 {
		return 0, &apihealth.TooLargeError{What: "an answer of the API server", Limit: t.max}
	}
	if int64(len(p)) > t.left+1 {
		p = p[:t.left+1]
	}
	n, err := t.r.Read(p)
	t.left -= int64(n)
	if t.left < 0 {
		return n, &apihealth.TooLargeError{What: "an answer of the API server", Limit: t.max}
	}
	return n, err
}

func (t *totalLimit) Close() error { return t.r.Close() }

// eventLimit fails a read once one JSON value of the stream — a watch
// event — passes max bytes, so that the decoder, which buffers a whole
// value, never holds more. It follows JSON's nesting and strings, nothing
// else: the decoder still judges the syntax.
type eventLimit struct {
	r   io.ReadCloser
	max int64
	err error

	depth            int
	inString, escape bool
	size             int64 // bytes of the current value
}

func (e *eventLimit) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.r.Read(p)
	for i, c := range p[:n] {
		switch {
		case e.inString:
			switch {
			case e.escape:
				e.escape = false
			case c == '\\':
				e.escape = true
			case c == '"':
				e.inString = false
			}
		case c == '"':
			e.inString = true
		case c == '{' || c == '[':
			e.depth++
		case c == '}' || c == ']':
			if e.depth > 0 {
				e.depth--
			}
		case e.depth == 0 && (c == ' ' || c == '\n' || c == '\r' || c == '\t'):
			e.size = 0 // between values
			continue
		}
		e.size++
		if e.size > e.max {
			e.err = &apihealth.TooLargeError{What: "a watch event", Limit: e.max}
			return i, e.err
		}
		if e.depth == 0 && !e.inString && (c == '}' || c == ']' || c == '"') {
			e.size = 0 // a value ended
		}
	}
	return n, err
}

func (e *eventLimit) Close() error { return e.r.Close() }
