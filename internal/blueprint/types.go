// Package blueprint parses an agent blueprint: Leviath's TOML manifest plus
// the prompt files stored beside it in one ConfigMap. It is pure (no
// Kubernetes client) so the reconciler, a validating webhook and the CLI
// can all share the same rules and error positions.
package blueprint

import (
	"github.com/agentrun-dev/agentrun-operator/internal/blueprint/tomlpos"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
)

// Manifest keys, in order of preference. agent.leviath is accepted so a
// Leviath blueprint directory works unchanged.
const (
	ManifestKey       = "agent.toml"
	LegacyManifestKey = "agent.leviath"
)

// Defaults applied when the manifest leaves a field out.
const (
	DefaultMaxIterations = 25
	DefaultMaxWorkers    = 30
	DefaultMaxAttempts   = 3
)

// Stage modes.
const (
	ModeAutonomous        = "autonomous"
	ModeInteractivePoints = "interactive_points"
	ModeFanOut            = "fan_out"
)

// Transition conditions.
const (
	CondAlways        = "always"
	CondLLMChoice     = "llm_choice"
	CondError         = "error"
	CondMaxIterations = "max_iterations"
	CondStuck         = "stuck"
	CondDeadEnd       = "dead_end"
)

// Tool permission policies.
const (
	PermAllow = "allow"
	PermAsk   = "ask"
	PermDeny  = "deny"
)

// Interaction point behaviour when nobody is attending the run.
const (
	UnattendedAutoApprove = "auto_approve"
	UnattendedAsk         = "ask"
)

// Interaction point styles.
const (
	StyleFreeText       = "free_text"
	StyleMultipleChoice = "multiple_choice"
	StyleConfirm        = "confirm"
)

// Fan-out worker failure policies.
const (
	OnWorkerFailureContinue = "continue"
	OnWorkerFailureFailAll  = "fail_all"
)

// Output formats; the same strings as v1alpha1.OutputFormat.
const (
	OutputText     = "text"
	OutputMarkdown = "markdown"
	OutputJSON     = "json"
)

// ParseError is a blueprint problem located in one ConfigMap key, so the
// message a user sees in status names the file and line to fix.
type ParseError = tomlpos.Error

// Blueprint is a parsed and validated blueprint.
type Blueprint struct {
	// ManifestKey is the ConfigMap key the manifest was read from.
	ManifestKey string
	Agent       AgentSection
	// Stages are in the order their [stages.X] tables appear in the file,
	// which is what users expect status "stage i/n" to follow.
	Stages []*Stage
	// MCPServers are where the run's tools come from, in name order.
	MCPServers []MCPServer
	// Tools are per-tool overrides by tool name.
	Tools map[string]ToolConfig
	// YoloProfiles are the named unattended profiles.
	YoloProfiles map[string]YoloProfile
	Limits       Limits
	// A2AAgents are the remote A2A agents offered as tools, in name order.
	A2AAgents []A2AAgent
	// ReadPaths are Leviath's [read_paths] allow entries, kept as written.
	// There is no workdir for them to grant: see permissions.go.
	ReadPaths []string
}

// AgentSection is the manifest's [agent] table.
type AgentSection struct {
	Name        string
	Version     string
	Description string
	// EntryStage is the stage a run starts in, defaulted to the first stage.
	EntryStage string
	// MaxChildDepth is nil when unset so the run's own limit applies.
	MaxChildDepth *int32
	// Output is nil when the blueprint does not ask for structured output.
	Output *Output
	// ToolPermissions maps a tool name to allow, ask or deny.
	ToolPermissions map[string]string
	Title           Title
	// Clearance is the highest sensitivity the run may read without its
	// context being tainted (default private: nothing taints).
	Clearance string
	// A2A is nil when the blueprint has no [agent.a2a] table.
	A2A *A2A
}

// Output mirrors v1alpha1.OutputSpec field for field. It is declared here so
// this package need not import the API package, which pulls in
// controller-runtime.
type Output struct {
	Format       string
	Instructions string
	Example      string
	Schema       string
	Validator    string
}

// Title controls the short run title generated for listings.
type Title struct {
	Enabled bool
	// Model is "provider/model", or empty to use the run's model.
	Model string
}

// Stage is one [stages.X] table.
type Stage struct {
	Name string
	Mode string
	// SystemPrompt is the resolved prompt text, whether written inline or
	// read from SystemPromptFile.
	SystemPrompt     string
	SystemPromptFile string
	TransitionPrompt string
	// Models is the ordered failover list; empty means the run's model.
	Models        []ModelRef
	MaxIterations int
	// MaxRevisits bounds how many times the stage may be re-entered after
	// its first visit; nil is unlimited.
	MaxRevisits      *int
	AllowComplete    bool
	RequireOutput    bool
	RequiresChildren bool
	AvailableTools   []string
	// Transitions are in file order so "first matching condition" is what
	// the author sees.
	Transitions       []Transition
	InteractionPoints []InteractionPoint
	// FanOut is set exactly when Mode is fan_out.
	FanOut *FanOutSpec
	// Script holds the scripted provider's responses, one per model call.
	Script []ScriptStep
	// StageTools are the tool area's keys (required_tools,
	// allow_blocking_tools, tool_routing, allow_as_worker,
	// accepts_messages).
	StageTools
	// DocumentRegion names the region the stage works on: its content is
	// part of every model call of the stage (see regions.go).
	DocumentRegion string
	// AllowUserDefault lets the stage fall back to the run's default model
	// (spec.model, else the provider config's default) once every model of
	// Models is out of service (model.allow_user_default).
	AllowUserDefault bool
}

// ModelRef names one model of a failover list.
type ModelRef struct {
	Provider string
	Model    string
}

func (m ModelRef) String() string { return m.Provider + "/" + m.Model }

// Transition is an edge to another stage.
type Transition struct {
	Target    string
	Condition string
	Hint      string
	// RequireRegions gate the transition: it is taken only once each of
	// these regions holds content (require_regions plus region).
	RequireRegions []string
	// Stuck holds the thresholds of a stuck edge (set exactly when
	// Condition is stuck).
	Stuck *StuckThresholds
	// Transform says what the target stage receives of this one's
	// conversation (default direct).
	Transform string
	// TransformConfig is the region list of a custom transform.
	TransformConfig *TransformConfig
}

// StuckThresholds arm a stuck edge: the first one reached fires it. Each
// counts within the current visit of the stage (the counters reset on
// entry), so measured progress, not the model's word, decides. A zero
// field is unset.
type StuckThresholds struct {
	// Iterations: model turns in this visit.
	Iterations int
	// ToolCalls: tool calls the model made in this visit.
	ToolCalls int
	// Minutes: wall-clock minutes since the visit began, read from the
	// journal's own times.
	Minutes int
	// SameFileEdits: successful write_file/edit_file calls against one
	// path in this visit.
	SameFileEdits int
}

// TransformConfig is a custom transform: each named region is carried,
// compacted or cleared. The operator's only region today is
// "conversation" (the stage's turns).
type TransformConfig struct {
	Carry         []string
	Compact       []string
	Clear         []string
	CompactPrompt string
}

// Edge transforms.
const (
	TransformDirect    = "direct"
	TransformClear     = "clear"
	TransformCompact   = "compact"
	TransformSummarize = "summarize"
	TransformCustom    = "custom"
)

// RegionConversation is the region a transform config names for the
// stage's turns.
const RegionConversation = "conversation"

// InteractionPoint is a question the stage puts to a person.
type InteractionPoint struct {
	Name         string
	Prompt       string
	Required     bool
	Unattended   string
	Style        string
	Options      []string
	AbortOptions []string
	// EditOptions are the choices under which the person edits the draft
	// the point shows (its DocumentRegion); Directives those under which
	// the person sends the stage back with instructions.
	EditOptions    []string
	Directives     []string
	DocumentRegion string
}

// FanOutSpec configures a fan_out stage.
type FanOutSpec struct {
	// Exactly one of WorkerAgent (another blueprint) and WorkerStage (a
	// stage of this blueprint) is set.
	WorkerAgent string
	WorkerStage string
	MergeStage  string
	// MaxWorkers bounds concurrent workers; 0 means unlimited.
	MaxWorkers int
	// MaxItems bounds the number of items; 0 means unlimited.
	MaxItems        int
	OnWorkerFailure string
	MaxAttempts     int
	// ResultsRegion is where the merged worker outputs are written when
	// the fan-out resolves; SplitPrompt tells the model how to split the
	// work into items; WorkerQuery, when the blueprint gave it, is the
	// prompt of the single-turn stage synthesised for the workers (named
	// in WorkerStage).
	ResultsRegion string
	SplitPrompt   string
	WorkerQuery   string
}

// ScriptStep is one scripted model response.
type ScriptStep struct {
	Text string
	// Next is the transition target the model chooses, if any.
	Next string
	// Complete means the model finishes the run.
	Complete bool
	// Output is submitted as the run's output; "{task}" in it is replaced
	// by the run's task.
	Output string
	Usage  ScriptUsage
	// CostUSD is the provider-reported cost; nil means price from rates.
	CostUSD *money.NanoUSD
	// Error, when set, makes the call fail as a provider error would.
	Error     *ScriptError
	DelayMS   int
	ToolCalls []ScriptToolCall
	// Items are the fan-out items the model produces.
	Items []string
	// Spawn starts sub-agents (the spawn_agent tool, scripted).
	Spawn []ScriptSpawn
	// SleepSeconds calls the sleep tool: the run parks on a durable timer
	// for that long before its next turn.
	SleepSeconds int
}

// ScriptSpawn is a sub-agent a scripted step starts: a child run of the
// blueprint ConfigMap Agent with Task.
type ScriptSpawn struct {
	Agent string
	Task  string
}

// ScriptUsage is the token usage a scripted call reports.
type ScriptUsage struct {
	Prompt     int64
	Completion int64
	Cached     int64
	CacheWrite int64
}

// ScriptError is a simulated provider error, e.g. status 401 to exercise
// the NeedsSetup path without a network.
type ScriptError struct {
	Status int
	// Type is the provider's machine-readable error type or code (OpenAI's
	// "insufficient_quota", Anthropic's "billing_error"), classified as a
	// real provider's would be.
	Type    string
	Message string
	// Times makes the error fire only on the first Times attempts of the
	// call (0: every attempt), so a test can fix the cause and see the run
	// continue.
	Times int
	// WhenTask makes the error fire only for runs whose task contains it
	// (so one fan-out item can fail while the others succeed).
	WhenTask string
}

// ScriptToolCall is a tool call the scripted model makes.
type ScriptToolCall struct {
	Name string
	// Arguments is the call's JSON arguments.
	Arguments string
}

// Stage returns the named stage and its index in file order.
func (b *Blueprint) Stage(name string) (*Stage, int, bool) {
	for i, s := range b.Stages {
		if s.Name == name {
			return s, i, true
		}
	}
	return nil, -1, false
}

// EntryStage returns the stage a run starts in.
func (b *Blueprint) EntryStage() *Stage {
	if s, _, ok := b.Stage(b.Agent.EntryStage); ok {
		return s
	}
	if len(b.Stages) > 0 {
		return b.Stages[0]
	}
	return nil
}

// TransitionFor returns the first transition with the given condition, e.g.
// where to go when max_iterations is reached or a call fails.
func (s *Stage) TransitionFor(cond string) (Transition, bool) {
	for _, t := range s.Transitions {
		if t.Condition == cond {
			return t, true
		}
	}
	return Transition{}, false
}

// Transition returns the transition to target.
func (s *Stage) Transition(target string) (Transition, bool) {
	for _, t := range s.Transitions {
		if t.Target == target {
			return t, true
		}
	}
	return Transition{}, false
}
