package pods

import (
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// Reasons of gpuxray_source_errors_total{source="pods"}.
const (
	ReasonForbidden    = apihealth.ReasonForbidden    // RBAC denies list or watch on pods
	ReasonUnauthorized = apihealth.ReasonUnauthorized // the credentials are refused (an expired token)
	ReasonUnavailable  = apihealth.ReasonUnavailable  // the API server cannot be reached, is overloaded, or stalls
	ReasonTooLarge     = apihealth.ReasonTooLarge     // an answer or a pod larger than the API server stores
	ReasonTooMany      = apihealth.ReasonTooMany      // a pod or PriorityClass beyond the bound kept
	ReasonOther        = apihealth.ReasonOther
)
