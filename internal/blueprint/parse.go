package blueprint

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/agentrun-dev/agentrun-operator/internal/blueprint/tomlpos"
	"github.com/agentrun-dev/agentrun-operator/internal/money"
)

// The raw* types mirror the TOML layout. Optional scalars whose zero value is
// meaningful are pointers so defaults apply only when a key is absent.
type rawManifest struct {
	Agent        rawAgent                  `toml:"agent"`
	Stages       map[string]rawStage       `toml:"stages"`
	MCPServers   map[string]rawMCPServer   `toml:"mcp_servers"`
	Tools        map[string]rawToolConfig  `toml:"tools"`
	YoloProfiles map[string]rawYoloProfile `toml:"yolo_profiles"`
	Limits       rawLimits                 `toml:"limits"`
	// ToolPermissions and ReadPaths are Leviath's top-level tables (see
	// permissions.go).
	ToolPermissions map[string]string `toml:"tool_permissions"`
	ReadPaths       *rawReadPaths     `toml:"read_paths"`
	// A2AAgents are remote A2A agents offered as tools (a2a.go).
	A2AAgents map[string]rawA2AAgent `toml:"a2a_agents"`
}

type rawAgent struct {
	Name            string            `toml:"name"`
	Version         string            `toml:"version"`
	Description     string            `toml:"description"`
	EntryStage      string            `toml:"entry_stage"`
	MaxChildDepth   *int32            `toml:"max_child_depth"`
	Output          *rawOutput        `toml:"output"`
	ToolPermissions map[string]string `toml:"tool_permissions"`
	Title           *rawTitle         `toml:"title"`
	Clearance       string            `toml:"clearance"`
	A2A             *rawA2A           `toml:"a2a"`
}

type rawOutput struct {
	Format       string `toml:"format"`
	Instructions string `toml:"instructions"`
	Example      string `toml:"example"`
	Schema       string `toml:"schema"`
	Validator    string `toml:"validator"`
}

type rawTitle struct {
	Enabled *bool  `toml:"enabled"`
	Model   string `toml:"model"`
}

type rawStage struct {
	Mode              string                   `toml:"mode"`
	SystemPrompt      *string                  `toml:"system_prompt"`
	SystemPromptFile  *string                  `toml:"system_prompt_file"`
	TransitionPrompt  string                   `toml:"transition_prompt"`
	MaxIterations     *int                     `toml:"max_iterations"`
	MaxRevisits       *int                     `toml:"max_revisits"`
	AllowComplete     bool                     `toml:"allow_complete"`
	RequireOutput     bool                     `toml:"require_output"`
	RequiresChildren  bool                     `toml:"requires_children"`
	AvailableTools    []string                 `toml:"available_tools"`
	Model             *rawModel                `toml:"model"`
	Transitions       map[string]rawTransition `toml:"transitions"`
	InteractionPoints []rawInteractionPoint    `toml:"interaction_points"`
	WorkerAgent       string                   `toml:"worker_agent"`
	WorkerStage       string                   `toml:"worker_stage"`
	MergeStage        string                   `toml:"merge_stage"`
	MaxWorkers        *int                     `toml:"max_workers"`
	MaxItems          *int                     `toml:"max_items"`
	OnWorkerFailure   string                   `toml:"on_worker_failure"`
	MaxAttempts       *int                     `toml:"max_attempts"`
	Script            []rawScriptStep          `toml:"script"`
	// The tool area's stage keys (see stagetools.go).
	RequiredTools      []string          `toml:"required_tools"`
	AllowBlockingTools *bool             `toml:"allow_blocking_tools"`
	ToolRouting        map[string]string `toml:"tool_routing"`
	ToolPermissions    map[string]string `toml:"tool_permissions"`
	AllowAsWorker      *bool             `toml:"allow_as_worker"`
	AcceptsMessages    bool              `toml:"accepts_messages"`
	DocumentRegion     string            `toml:"document_region"`
	ResultsRegion      string            `toml:"results_region"`
	SplitPrompt        string            `toml:"split_prompt"`
	WorkerQuery        string            `toml:"worker_query"`
}

type rawModel struct {
	Models           []rawModelRef `toml:"models"`
	AllowUserDefault bool          `toml:"allow_user_default"`
}

type rawModelRef struct {
	Provider string `toml:"provider"`
	Model    string `toml:"model"`
}

type rawTransition struct {
	Condition               string              `toml:"condition"`
	Hint                    string              `toml:"hint"`
	RequireRegions          []string            `toml:"require_regions"`
	Region                  string              `toml:"region"`
	StuckAfterIterations    *int                `toml:"stuck_after_iterations"`
	StuckAfterToolCalls     *int                `toml:"stuck_after_tool_calls"`
	StuckAfterMinutes       *int                `toml:"stuck_after_minutes"`
	StuckAfterSameFileEdits *int                `toml:"stuck_after_same_file_edits"`
	Transform               string              `toml:"transform"`
	TransformConfig         *rawTransformConfig `toml:"transform_config"`
}

type rawTransformConfig struct {
	Carry         []string `toml:"carry"`
	Compact       []string `toml:"compact"`
	Clear         []string `toml:"clear"`
	CompactPrompt string   `toml:"compact_prompt"`
}

type rawInteractionPoint struct {
	Name           string   `toml:"name"`
	Prompt         string   `toml:"prompt"`
	Required       bool     `toml:"required"`
	Unattended     string   `toml:"unattended"`
	Style          string   `toml:"style"`
	Options        []string `toml:"options"`
	AbortOptions   []string `toml:"abort_options"`
	EditOptions    []string `toml:"edit_options"`
	Directives     []string `toml:"directives"`
	DocumentRegion string   `toml:"document_region"`
}

type rawScriptStep struct {
	Text      string          `toml:"text"`
	Next      string          `toml:"next"`
	Complete  bool            `toml:"complete"`
	Output    string          `toml:"output"`
	Usage     *rawUsage       `toml:"usage"`
	CostUSD   *string         `toml:"cost_usd"`
	Error     *rawScriptError `toml:"error"`
	DelayMS   int             `toml:"delay_ms"`
	ToolCalls []rawToolCall   `toml:"tool_calls"`
	Items     []string        `toml:"items"`
	SleepSecs int             `toml:"sleep_seconds"`
	Spawn     []rawSpawn      `toml:"spawn"`
}

type rawSpawn struct {
	Agent string `toml:"agent"`
	Task  string `toml:"task"`
}

type rawUsage struct {
	Prompt     int64 `toml:"prompt"`
	Completion int64 `toml:"completion"`
	Cached     int64 `toml:"cached"`
	CacheWrite int64 `toml:"cache_write"`
}

type rawScriptError struct {
	Status  int    `toml:"status"`
	Message string `toml:"message"`
	Times   int    `toml:"times"`
	// WhenTask makes the error fire only for runs whose task contains it.
	WhenTask string `toml:"when_task"`
	Type     string `toml:"type"`
}

type rawToolCall struct {
	Name      string `toml:"name"`
	Arguments string `toml:"arguments"`
}

// parser carries what every validation error needs: the manifest key and
// the source index that turns key paths into lines.
type parser struct {
	files map[string]string
	key   string
	idx   *tomlpos.Index
	md    toml.MetaData
}

func (p *parser) errf(line int, format string, args ...any) *ParseError {
	return &ParseError{Key: p.key, Line: line, Message: fmt.Sprintf(format, args...)}
}

// line locates a key path, falling back to its enclosing table.
func (p *parser) line(key ...string) int { return p.idx.Line(key...) }

// Parse reads a blueprint from the data of its ConfigMap. Every error is a
// *ParseError naming the key and, where it can be found, the line.
func Parse(files map[string]string) (*Blueprint, error) {
	key := ManifestKey
	src, ok := files[key]
	if !ok {
		key = LegacyManifestKey
		if src, ok = files[key]; !ok {
			return nil, &ParseError{Key: ManifestKey, Message: fmt.Sprintf("blueprint has no %q key (nor %q)", ManifestKey, LegacyManifestKey)}
		}
	}
	p := &parser{files: files, key: key, idx: tomlpos.New(src)}
	bp, perr := p.parse(src)
	if perr != nil {
		return nil, perr
	}
	return bp, nil
}

func (p *parser) parse(src string) (*Blueprint, *ParseError) {
	var raw rawManifest
	md, line, msg, ok := p.idx.DecodeStrict(src, &raw)
	if !ok {
		return nil, p.errf(line, "%s", msg)
	}
	p.md = md

	bp := &Blueprint{ManifestKey: p.key}
	if err := p.agent(&raw.Agent, &bp.Agent); err != nil {
		return nil, err
	}
	if err := p.tools(&raw, bp); err != nil {
		return nil, err
	}
	if err := p.a2a(&raw, bp); err != nil {
		return nil, err
	}
	if err := p.topLevel(&raw, bp); err != nil {
		return nil, err
	}

	names := p.stageOrder(raw.Stages)
	if len(names) == 0 {
		return nil, p.errf(0, "blueprint declares no stages; add a [stages.<name>] table")
	}
	for _, name := range names {
		st, err := p.stage(name, raw.Stages[name])
		if err != nil {
			return nil, err
		}
		bp.Stages = append(bp.Stages, st)
	}
	if err := p.queryStages(bp); err != nil {
		return nil, err
	}
	if err := p.crossCheck(bp, raw.Stages); err != nil {
		return nil, err
	}
	if err := p.crossCheckTools(bp); err != nil {
		return nil, err
	}
	if bp.Agent.EntryStage == "" {
		bp.Agent.EntryStage = bp.Stages[0].Name
	} else if _, _, ok := bp.Stage(bp.Agent.EntryStage); !ok {
		return nil, p.errf(p.line("agent", "entry_stage"), "entry_stage %q is not a stage", bp.Agent.EntryStage)
	}
	return bp, nil
}

func (p *parser) agent(r *rawAgent, a *AgentSection) *ParseError {
	if strings.TrimSpace(r.Name) == "" {
		return p.errf(p.line("agent"), "agent.name is required")
	}
	*a = AgentSection{
		Name:            r.Name,
		Version:         r.Version,
		Description:     r.Description,
		EntryStage:      r.EntryStage,
		MaxChildDepth:   r.MaxChildDepth,
		ToolPermissions: r.ToolPermissions,
		Title:           Title{Enabled: true},
	}
	if d := r.MaxChildDepth; d != nil && *d < 0 {
		return p.errf(p.line("agent", "max_child_depth"), "max_child_depth must be >= 0, got %d", *d)
	}
	if o := r.Output; o != nil {
		out := Output(*o)
		if out.Format == "" {
			out.Format = OutputText
		}
		if err := p.enum(p.line("agent", "output", "format"), "agent.output.format", out.Format, OutputText, OutputMarkdown, OutputJSON); err != nil {
			return err
		}
		if out.Schema != "" {
			if out.Format != OutputJSON {
				return p.errf(p.line("agent", "output", "schema"), "agent.output.schema requires format = %q", OutputJSON)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(out.Schema), &v); err != nil {
				return p.errf(p.line("agent", "output", "schema"), "agent.output.schema is not a JSON object: %v", err)
			}
		}
		if v := out.Validator; v != "" {
			if _, ok := p.files[v]; !ok {
				return p.errf(p.line("agent", "output", "validator"), "agent.output.validator %q is not a key of the blueprint ConfigMap%s", v, flatHint(v))
			}
		}
		a.Output = &out
	}
	for _, tool := range sortedKeys(r.ToolPermissions) {
		if err := p.enum(p.line("agent", "tool_permissions", tool), fmt.Sprintf("tool_permissions.%s", tool), r.ToolPermissions[tool], PermAllow, PermAsk, PermDeny); err != nil {
			return err
		}
	}
	if t := r.Title; t != nil {
		if t.Enabled != nil {
			a.Title.Enabled = *t.Enabled
		}
		if t.Model != "" {
			prov, model, ok := strings.Cut(t.Model, "/")
			if !ok || prov == "" || model == "" {
				return p.errf(p.line("agent", "title", "model"), "agent.title.model %q must be \"provider/model\"", t.Model)
			}
			a.Title.Model = t.Model
		}
	}
	return nil
}

// stageOrder lists stage names in the order their tables first appear, which
// the decoded map has lost. Names the key list misses (not expected) follow
// in name order so the result is always deterministic.
func (p *parser) stageOrder(stages map[string]rawStage) []string {
	var names []string
	for _, k := range p.md.Keys() {
		if len(k) >= 2 && k[0] == "stages" && !slices.Contains(names, k[1]) {
			if _, ok := stages[k[1]]; ok {
				names = append(names, k[1])
			}
		}
	}
	for _, n := range sortedKeys(stages) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// transitionOrder is stageOrder for one stage's transitions.
func (p *parser) transitionOrder(stage string, ts map[string]rawTransition) []string {
	var names []string
	for _, k := range p.md.Keys() {
		if len(k) >= 4 && k[0] == "stages" && k[1] == stage && k[2] == "transitions" && !slices.Contains(names, k[3]) {
			names = append(names, k[3])
		}
	}
	for _, n := range sortedKeys(ts) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// stage validates one stage of the blueprint.
func (p *parser) stage(name string, r rawStage) (*Stage, *ParseError) {
	at := func(key ...string) int { return p.stageLine(name, key...) }
	if strings.TrimSpace(name) == "" {
		return nil, p.errf(at(), "stage name must not be empty")
	}
	s := &Stage{
		Name:             name,
		Mode:             r.Mode,
		TransitionPrompt: r.TransitionPrompt,
		MaxIterations:    DefaultMaxIterations,
		AllowComplete:    r.AllowComplete,
		RequireOutput:    r.RequireOutput,
		RequiresChildren: r.RequiresChildren,
		AvailableTools:   r.AvailableTools,
	}
	if s.Mode == "" {
		s.Mode = ModeAutonomous
	}
	if err := p.enum(at("mode"), fmt.Sprintf("stage %q: mode", name), s.Mode, ModeAutonomous, ModeInteractivePoints, ModeFanOut); err != nil {
		return nil, err
	}

	if err := p.stagePrompt(s, r); err != nil {
		return nil, err
	}
	if err := p.stageBounds(s, r); err != nil {
		return nil, err
	}
	if err := p.stageTools(s, r); err != nil {
		return nil, err
	}
	if err := p.stageRegion(s, r.DocumentRegion); err != nil {
		return nil, err
	}
	if err := p.stageModels(s, r); err != nil {
		return nil, err
	}
	if err := p.stageTransitions(s, r); err != nil {
		return nil, err
	}
	if err := p.interactionPoints(s, r.InteractionPoints); err != nil {
		return nil, err
	}
	if err := p.fanOut(s, r); err != nil {
		return nil, err
	}
	if err := p.script(s, r.Script); err != nil {
		return nil, err
	}
	return s, nil
}

// stageLine is the line of a key of stage name.
func (p *parser) stageLine(name string, key ...string) int {
	return p.line(append([]string{"stages", name}, key...)...)
}

// stageErr is a problem with stage name, at line.
func (p *parser) stageErr(name string, line int, format string, args ...any) *ParseError {
	return p.errf(line, "stage %q: %s", name, fmt.Sprintf(format, args...))
}

// stagePrompt reads the stage's system prompt, inline or from a file of
// the blueprint ConfigMap.
func (p *parser) stagePrompt(s *Stage, r rawStage) *ParseError {
	switch {
	case r.SystemPrompt != nil && r.SystemPromptFile != nil:
		return p.stageErr(s.Name, p.stageLine(s.Name, "system_prompt_file"), "set system_prompt or system_prompt_file, not both")
	case r.SystemPrompt != nil:
		s.SystemPrompt = *r.SystemPrompt
	case r.SystemPromptFile != nil:
		f := *r.SystemPromptFile
		text, ok := p.files[f]
		if !ok {
			return p.stageErr(s.Name, p.stageLine(s.Name, "system_prompt_file"), "system_prompt_file %q is not a key of the blueprint ConfigMap%s", f, flatHint(f))
		}
		s.SystemPrompt, s.SystemPromptFile = text, f
	}
	return nil
}

// stageBounds reads max_iterations and max_revisits, and checks that no
// available_tools entry is empty.
func (p *parser) stageBounds(s *Stage, r rawStage) *ParseError {
	at := func(key string) int { return p.stageLine(s.Name, key) }
	if r.MaxIterations != nil {
		if *r.MaxIterations < 1 {
			return p.stageErr(s.Name, at("max_iterations"), "max_iterations must be >= 1, got %d", *r.MaxIterations)
		}
		s.MaxIterations = *r.MaxIterations
	}
	if r.MaxRevisits != nil {
		if *r.MaxRevisits < 0 {
			return p.stageErr(s.Name, at("max_revisits"), "max_revisits must be >= 0, got %d", *r.MaxRevisits)
		}
		s.MaxRevisits = r.MaxRevisits
	}
	for i, tool := range r.AvailableTools {
		if strings.TrimSpace(tool) == "" {
			return p.stageErr(s.Name, at("available_tools"), "available_tools[%d] is empty", i)
		}
	}
	return nil
}

// stageModels reads the models the stage may call.
func (p *parser) stageModels(s *Stage, r rawStage) *ParseError {
	if r.Model == nil {
		return nil
	}
	s.AllowUserDefault = r.Model.AllowUserDefault
	for i, m := range r.Model.Models {
		if m.Provider == "" || m.Model == "" {
			return p.stageErr(s.Name, p.stageLine(s.Name, "model", "models"), "model.models[%d] needs both provider and model", i)
		}
		s.Models = append(s.Models, ModelRef(m))
	}
	return nil
}

// stageTransitions reads the stage's edges, in the blueprint's order.
func (p *parser) stageTransitions(s *Stage, r rawStage) *ParseError {
	for _, target := range p.transitionOrder(s.Name, r.Transitions) {
		t, err := p.transition(s.Name, target, r.Transitions[target])
		if err != nil {
			return err
		}
		if t.RequireRegions, err = p.transitionRegions(s.Name, target, r.Transitions[target]); err != nil {
			return err
		}
		s.Transitions = append(s.Transitions, t)
	}
	return nil
}

// transition validates one edge. As in Leviath, a stuck edge needs at
// least one threshold and thresholds need a stuck edge: either half alone
// would be an edge that never fires or keys nothing reads.
func (p *parser) transition(stage, target string, r rawTransition) (Transition, *ParseError) {
	at := func(key ...string) int {
		return p.line(append([]string{"stages", stage, "transitions", target}, key...)...)
	}
	label := fmt.Sprintf("stage %q: transition %q", stage, target)
	t := Transition{Target: target, Condition: r.Condition, Hint: r.Hint, Transform: r.Transform}
	if t.Condition == "" {
		t.Condition = CondLLMChoice
	}
	if err := p.enum(at("condition"), label+": condition", t.Condition,
		CondAlways, CondLLMChoice, CondError, CondMaxIterations, CondStuck, CondDeadEnd); err != nil {
		return t, err
	}
	stuck, err := p.stuckThresholds(at, label, r)
	if err != nil {
		return t, err
	}
	switch {
	case t.Condition == CondStuck && stuck == nil:
		return t, p.errf(at("condition"), "%s: condition stuck needs at least one of stuck_after_iterations, stuck_after_tool_calls, stuck_after_minutes, stuck_after_same_file_edits", label)
	case t.Condition != CondStuck && stuck != nil:
		return t, p.errf(at(), "%s: stuck_after_* thresholds need condition = %q; they would never be read", label, CondStuck)
	}
	t.Stuck = stuck
	if err := p.transform(at, label, &t, r.TransformConfig); err != nil {
		return t, err
	}
	return t, nil
}

// stuckThresholds reads the stuck_after_* keys (each >= 1); nil when none
// is set.
func (p *parser) stuckThresholds(at func(...string) int, label string, r rawTransition) (*StuckThresholds, *ParseError) {
	var th StuckThresholds
	set := false
	for _, f := range []struct {
		key string
		v   *int
		dst *int
	}{
		{"stuck_after_iterations", r.StuckAfterIterations, &th.Iterations},
		{"stuck_after_tool_calls", r.StuckAfterToolCalls, &th.ToolCalls},
		{"stuck_after_minutes", r.StuckAfterMinutes, &th.Minutes},
		{"stuck_after_same_file_edits", r.StuckAfterSameFileEdits, &th.SameFileEdits},
	} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			return nil, p.errf(at(f.key), "%s: %s must be >= 1, got %d", label, f.key, *f.v)
		}
		*f.dst, set = *f.v, true
	}
	if !set {
		return nil, nil
	}
	return &th, nil
}

// transform validates an edge's transform and its transform_config, which
// only a custom transform reads.
func (p *parser) transform(at func(...string) int, label string, t *Transition, raw *rawTransformConfig) *ParseError {
	if t.Transform == "" {
		t.Transform = TransformDirect
	}
	if err := p.enum(at("transform"), label+": transform", t.Transform,
		TransformDirect, TransformClear, TransformCompact, TransformSummarize, TransformCustom); err != nil {
		return err
	}
	switch {
	case raw != nil && t.Transform != TransformCustom:
		return p.errf(at("transform_config"), "%s: transform_config needs transform = %q; it would never be read", label, TransformCustom)
	case raw == nil && t.Transform == TransformCustom:
		return p.errf(at("transform"), "%s: transform = %q needs a transform_config table", label, TransformCustom)
	case raw == nil:
		return nil
	}
	cfg := TransformConfig(*raw)
	seen := map[string]string{}
	for _, list := range []struct {
		key   string
		names []string
	}{{"carry", cfg.Carry}, {"compact", cfg.Compact}, {"clear", cfg.Clear}} {
		for _, n := range list.names {
			if prev, dup := seen[n]; dup {
				return p.errf(at("transform_config", list.key), "%s: transform_config names region %q in both %s and %s", label, n, prev, list.key)
			}
			seen[n] = list.key
		}
	}
	t.TransformConfig = &cfg
	return nil
}

func (p *parser) interactionPoints(s *Stage, raw []rawInteractionPoint) *ParseError {
	table := []string{"stages", s.Name, "interaction_points"}
	seen := map[string]bool{}
	for i, r := range raw {
		at := func(key string) int { return p.idx.Elem(table, i, key) }
		label := fmt.Sprintf("stage %q: interaction point %d", s.Name, i+1)
		if r.Name == "" {
			return p.errf(at("name"), "%s: name is required", label)
		}
		label = fmt.Sprintf("stage %q: interaction point %q", s.Name, r.Name)
		if seen[r.Name] {
			return p.errf(at("name"), "%s: duplicate name", label)
		}
		seen[r.Name] = true
		ip := InteractionPoint(r)
		if ip.Unattended == "" {
			ip.Unattended = UnattendedAutoApprove
		}
		if ip.Style == "" {
			ip.Style = StyleConfirm
		}
		if err := p.enum(at("unattended"), label+": unattended", ip.Unattended, UnattendedAutoApprove, UnattendedAsk); err != nil {
			return err
		}
		if err := p.enum(at("style"), label+": style", ip.Style, StyleFreeText, StyleMultipleChoice, StyleConfirm); err != nil {
			return err
		}
		if ip.Style == StyleMultipleChoice && len(ip.Options) == 0 {
			return p.errf(at("options"), "%s: style multiple_choice needs options", label)
		}
		for _, o := range ip.AbortOptions {
			if len(ip.Options) > 0 && !slices.Contains(ip.Options, o) {
				return p.errf(at("abort_options"), "%s: abort option %q is not one of options", label, o)
			}
		}
		if err := p.pointChoices(label, at, ip, s.DocumentRegion); err != nil {
			return err
		}
		s.InteractionPoints = append(s.InteractionPoints, ip)
	}
	if s.Mode == ModeInteractivePoints && len(s.InteractionPoints) == 0 {
		return p.errf(p.line("stages", s.Name, "mode"), "stage %q: mode interactive_points needs at least one [[stages.%s.interaction_points]]", s.Name, s.Name)
	}
	return nil
}

func (p *parser) fanOut(s *Stage, r rawStage) *ParseError {
	at := func(key string) int { return p.line("stages", s.Name, key) }
	if s.Mode != ModeFanOut {
		for _, f := range []struct {
			key string
			set bool
		}{
			{"worker_agent", r.WorkerAgent != ""}, {"worker_stage", r.WorkerStage != ""},
			{"merge_stage", r.MergeStage != ""}, {"max_workers", r.MaxWorkers != nil},
			{"max_items", r.MaxItems != nil}, {"on_worker_failure", r.OnWorkerFailure != ""},
			{"max_attempts", r.MaxAttempts != nil}, {"results_region", r.ResultsRegion != ""},
			{"split_prompt", r.SplitPrompt != ""}, {"worker_query", r.WorkerQuery != ""},
		} {
			if f.set {
				return p.errf(at(f.key), "stage %q: %s is only valid with mode = %q", s.Name, f.key, ModeFanOut)
			}
		}
		return nil
	}
	if n := countSet(r.WorkerAgent, r.WorkerStage, r.WorkerQuery); n != 1 {
		return p.errf(at("worker_stage"), "stage %q: a fan_out stage needs exactly one of worker_agent, worker_stage and worker_query", s.Name)
	}
	fo := &FanOutSpec{
		WorkerAgent:     r.WorkerAgent,
		WorkerStage:     r.WorkerStage,
		MergeStage:      r.MergeStage,
		MaxWorkers:      DefaultMaxWorkers,
		OnWorkerFailure: r.OnWorkerFailure,
		MaxAttempts:     DefaultMaxAttempts,
	}
	if r.MaxWorkers != nil {
		if *r.MaxWorkers < 0 {
			return p.errf(at("max_workers"), "stage %q: max_workers must be >= 0 (0 = unlimited), got %d", s.Name, *r.MaxWorkers)
		}
		fo.MaxWorkers = *r.MaxWorkers
	}
	if r.MaxItems != nil {
		if *r.MaxItems < 0 {
			return p.errf(at("max_items"), "stage %q: max_items must be >= 0 (0 = unlimited), got %d", s.Name, *r.MaxItems)
		}
		fo.MaxItems = *r.MaxItems
	}
	if r.MaxAttempts != nil {
		if *r.MaxAttempts < 1 {
			return p.errf(at("max_attempts"), "stage %q: max_attempts must be >= 1, got %d", s.Name, *r.MaxAttempts)
		}
		fo.MaxAttempts = *r.MaxAttempts
	}
	if err := p.fanOutRegions(s, fo, r); err != nil {
		return err
	}
	if fo.OnWorkerFailure == "" {
		fo.OnWorkerFailure = OnWorkerFailureContinue
	}
	if err := p.enum(at("on_worker_failure"), fmt.Sprintf("stage %q: on_worker_failure", s.Name), fo.OnWorkerFailure, OnWorkerFailureContinue, OnWorkerFailureFailAll); err != nil {
		return err
	}
	s.FanOut = fo
	return nil
}

func (p *parser) script(s *Stage, raw []rawScriptStep) *ParseError {
	table := []string{"stages", s.Name, "script"}
	for i, r := range raw {
		at := func(key string) int { return p.idx.Elem(table, i, key) }
		fail := func(line int, format string, args ...any) *ParseError {
			return p.errf(line, "stage %q: script step %d: %s", s.Name, i+1, fmt.Sprintf(format, args...))
		}
		step := ScriptStep{
			Text: r.Text, Next: r.Next, Complete: r.Complete, Output: r.Output,
			DelayMS: r.DelayMS, Items: r.Items, SleepSeconds: r.SleepSecs,
		}
		if r.Next != "" {
			if _, ok := s.Transition(r.Next); !ok {
				return fail(at("next"), "next %q is not a transition of this stage", r.Next)
			}
		}
		if r.Complete {
			if r.Next != "" {
				return fail(at("complete"), "set next or complete, not both")
			}
			if !s.AllowComplete && len(s.Transitions) > 0 {
				return fail(at("complete"), "complete needs allow_complete = true on a stage with transitions")
			}
		}
		if r.Usage != nil {
			u := ScriptUsage(*r.Usage)
			if u.Prompt < 0 || u.Completion < 0 || u.Cached < 0 || u.CacheWrite < 0 {
				return fail(at("usage"), "usage token counts must be >= 0")
			}
			step.Usage = u
		}
		if r.CostUSD != nil {
			c, err := money.ParseUSD(*r.CostUSD)
			if err != nil {
				return fail(at("cost_usd"), "cost_usd: %v", err)
			}
			step.CostUSD = &c
		}
		if r.SleepSecs < 0 {
			return fail(at("sleep_seconds"), "sleep_seconds must be >= 0, got %d", r.SleepSecs)
		}
		if r.DelayMS < 0 {
			return fail(at("delay_ms"), "delay_ms must be >= 0, got %d", r.DelayMS)
		}
		if e := r.Error; e != nil {
			if e.Status < 0 || (e.Status == 0 && e.Message == "") {
				return fail(at("error"), "error needs a status >= 0 and a message, or a non-zero status")
			}
			if e.Times < 0 {
				return fail(at("error"), "error.times must be >= 0, got %d", e.Times)
			}
			if e.Times == 0 && e.WhenTask == "" && (r.Next != "" || r.Complete || r.Output != "" || len(r.ToolCalls) > 0 || len(r.Items) > 0) {
				return fail(at("error"), "an error step that always fails (no times) cannot also set next, complete, output, tool_calls or items")
			}
			step.Error = &ScriptError{Status: e.Status, Type: e.Type, Message: e.Message, Times: e.Times, WhenTask: e.WhenTask}
		}
		for j, tc := range r.ToolCalls {
			if tc.Name == "" {
				return fail(at("tool_calls"), "tool_calls[%d] needs a name", j)
			}
			if tc.Arguments != "" {
				var v map[string]any
				if err := json.Unmarshal([]byte(tc.Arguments), &v); err != nil {
					return fail(at("tool_calls"), "tool_calls[%d] (%s): arguments are not a JSON object: %v", j, tc.Name, err)
				}
			}
			step.ToolCalls = append(step.ToolCalls, ScriptToolCall(tc))
		}
		if r.Items != nil && s.Mode != ModeFanOut {
			return fail(at("items"), "items are only valid in a stage with mode = %q", ModeFanOut)
		}
		for j, sp := range r.Spawn {
			if sp.Agent == "" || sp.Task == "" {
				return fail(at("spawn"), "spawn[%d] needs an agent (a blueprint ConfigMap) and a task", j)
			}
			step.Spawn = append(step.Spawn, ScriptSpawn(sp))
		}
		s.Script = append(s.Script, step)
	}
	return nil
}

// crossCheck validates references between stages, which needs every stage.
func (p *parser) crossCheck(bp *Blueprint, _ map[string]rawStage) *ParseError {
	for _, s := range bp.Stages {
		for _, t := range s.Transitions {
			if _, _, ok := bp.Stage(t.Target); !ok {
				return p.errf(p.line("stages", s.Name, "transitions", t.Target), "stage %q: transition target %q is not a stage", s.Name, t.Target)
			}
		}
		if fo := s.FanOut; fo != nil {
			if fo.WorkerStage != "" {
				if fo.WorkerStage == s.Name {
					return p.errf(p.line("stages", s.Name, "worker_stage"), "stage %q: worker_stage cannot be the fan_out stage itself", s.Name)
				}
				if _, _, ok := bp.Stage(fo.WorkerStage); !ok {
					return p.errf(p.line("stages", s.Name, "worker_stage"), "stage %q: worker_stage %q is not a stage", s.Name, fo.WorkerStage)
				}
			}
			if fo.MergeStage != "" {
				if _, _, ok := bp.Stage(fo.MergeStage); !ok {
					return p.errf(p.line("stages", s.Name, "merge_stage"), "stage %q: merge_stage %q is not a stage", s.Name, fo.MergeStage)
				}
			}
		}
	}
	return nil
}

// flatHint explains a file reference with a directory in it: ConfigMap
// keys are flat.
func flatHint(name string) string {
	if strings.Contains(name, "/") {
		return "; ConfigMap keys are flat, so name the file by its base name"
	}
	return ""
}

// enum reports a value outside the allowed set, listing the choices so the
// message alone is enough to fix the manifest.
func (p *parser) enum(line int, what, value string, allowed ...string) *ParseError {
	if slices.Contains(allowed, value) {
		return nil
	}
	return p.errf(line, "%s %q is not one of %s", what, value, strings.Join(allowed, ", "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Hash identifies a blueprint snapshot: a sha256 over the sorted keys and
// values, each length-prefixed so that moving bytes between a key and its
// value (or between entries) always changes the hash.
func Hash(files map[string]string) string {
	h := sha256.New()
	var n [8]byte
	write := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, k := range sortedKeys(files) {
		write(k)
		write(files[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}
