package pods

import (
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// Reasons of gpuxray_source_errors_total{source="pods"}.
const (
	ReasonForbidden    = apihealth.ReasonForbidden    // RBAC denies list or watch on pods
	ReasonUnauthorized = apihealth.ReasonUnauthorized // the credentials are refused (an expired token)
	ReasonUnavailable  = apihealth.ReasonUnavailable  // the API server cannot be reached or is overloaded
	ReasonOther        = apihealth.ReasonOther
)
