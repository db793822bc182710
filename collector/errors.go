package collector

import "fmt"

// SourceError is a failure of one source call, with a short machine-readable
// reason used as the `reason` label of gpuxray_source_errors_total.
type SourceError struct {
	Source string // one of Source*
	Reason string // e.g. "init", "samples", "list", "unavailable", "exhausted"
	Err    error
}

func (e *SourceError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Source, e.Reason, e.Err)
}

func (e *SourceError) Unwrap() error { return e.Err }

// NewSourceError wraps err as a SourceError.
func NewSourceError(source, reason string, err error) *SourceError {
	return &SourceError{Source: source, Reason: reason, Err: err}
}
