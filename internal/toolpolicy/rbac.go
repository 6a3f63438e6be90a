package toolpolicy

// The manager reads the policies to evaluate them before each tool call,
// and writes their Ready condition (internal/policystatus: whether the
// rules compiled).
//
// +kubebuilder:rbac:groups=agentrun.dev,resources=agenttoolpolicies;clusteragenttoolpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=agentrun.dev,resources=agenttoolpolicies/status;clusteragenttoolpolicies/status,verbs=get;update;patch
