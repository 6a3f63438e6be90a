package blueprint

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
)

// RegionNamePattern is what a region name must match, here and in
// spec.regions: lowercase so it reads as Leviath's `--<region>` flag, and
// short enough to be a label of its own.
const RegionNamePattern = `^[a-z][a-z0-9_-]{0,62}$`

var regionName = regexp.MustCompile(RegionNamePattern)

// ValidRegionName reports whether name may name a region.
func ValidRegionName(name string) bool { return regionName.MatchString(name) }

// QueryStageSuffix names the stage synthesised for a fan-out stage's
// worker_query: "<fan-out stage>-query".
const QueryStageSuffix = "-query"

// regionErr checks one region name a key gives.
func (p *parser) regionErr(line int, what, name string) *ParseError {
	if ValidRegionName(name) {
		return nil
	}
	return p.errf(line, "%s %q is not a region name (%s)", what, name, RegionNamePattern)
}

// stageRegion sets the stage's document_region.
func (p *parser) stageRegion(s *Stage, name string) *ParseError {
	if name == "" {
		return nil
	}
	if err := p.regionErr(p.line("stages", s.Name, "document_region"), fmt.Sprintf("stage %q: document_region", s.Name), name); err != nil {
		return err
	}
	s.DocumentRegion = name
	return nil
}

// transitionRegions merges a transition's require_regions and region (the
// one-region spelling) into the regions gating it, in the order given.
func (p *parser) transitionRegions(stage, target string, t rawTransition) ([]string, *ParseError) {
	what := fmt.Sprintf("stage %q: transition %q:", stage, target)
	var out []string
	for _, n := range t.RequireRegions {
		if err := p.regionErr(p.line("stages", stage, "transitions", target, "require_regions"), what+" require_regions entry", n); err != nil {
			return nil, err
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if n := t.Region; n != "" {
		if err := p.regionErr(p.line("stages", stage, "transitions", target, "region"), what+" region", n); err != nil {
			return nil, err
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// pointChoices checks a point's edit_options and directives: like
// abort_options they are among its options (when it lists any), a choice
// means one thing only, and editing needs a draft to edit.
func (p *parser) pointChoices(label string, at func(string) int, ip InteractionPoint, stageDoc string) *ParseError {
	if ip.DocumentRegion != "" {
		if err := p.regionErr(at("document_region"), label+": document_region", ip.DocumentRegion); err != nil {
			return err
		}
	}
	meaning := map[string]string{}
	for _, o := range ip.AbortOptions {
		meaning[o] = "abort_options"
	}
	for _, g := range []struct {
		key  string
		opts []string
	}{{"edit_options", ip.EditOptions}, {"directives", ip.Directives}} {
		for _, o := range g.opts {
			if len(ip.Options) > 0 && !slices.Contains(ip.Options, o) {
				return p.errf(at(g.key), "%s: %s entry %q is not one of options", label, g.key, o)
			}
			if other, ok := meaning[o]; ok && other != g.key {
				return p.errf(at(g.key), "%s: %q is in both %s and %s", label, o, other, g.key)
			}
			meaning[o] = g.key
		}
	}
	if len(ip.EditOptions) > 0 && ip.DocumentRegion == "" && stageDoc == "" {
		return p.errf(at("edit_options"), "%s: edit_options need a document_region (on the point or its stage) holding the draft to edit", label)
	}
	return nil
}

// fanOutRegions reads a fan_out stage's results_region, split_prompt and
// worker_query.
func (p *parser) fanOutRegions(s *Stage, fo *FanOutSpec, r rawStage) *ParseError {
	if r.ResultsRegion != "" {
		if err := p.regionErr(p.line("stages", s.Name, "results_region"), fmt.Sprintf("stage %q: results_region", s.Name), r.ResultsRegion); err != nil {
			return err
		}
	}
	fo.ResultsRegion, fo.SplitPrompt, fo.WorkerQuery = r.ResultsRegion, r.SplitPrompt, r.WorkerQuery
	return nil
}

// queryStages synthesises, for each fan-out stage with a worker_query, the
// stage its workers run: one model turn with the query as system prompt,
// the item as task, and the fan-out stage's models. Workers are AgentRuns
// of the run's own snapshot (as for worker_stage), so the query needs no
// blueprint of its own. Synthesised stages come after the declared ones.
func (p *parser) queryStages(bp *Blueprint) *ParseError {
	for _, s := range slices.Clone(bp.Stages) {
		fo := s.FanOut
		if fo == nil || fo.WorkerQuery == "" {
			continue
		}
		name := s.Name + QueryStageSuffix
		if _, _, taken := bp.Stage(name); taken {
			return p.errf(p.line("stages", s.Name, "worker_query"), "stage %q: worker_query needs the stage name %q for its workers, which the blueprint already uses", s.Name, name)
		}
		bp.Stages = append(bp.Stages, &Stage{
			Name: name, Mode: ModeAutonomous, SystemPrompt: fo.WorkerQuery, MaxIterations: 1,
			AllowComplete: true, Models: s.Models, AllowUserDefault: s.AllowUserDefault,
		})
		fo.WorkerStage = name
	}
	return nil
}

// countSet counts the non-empty strings.
func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}

// RegionNames are the regions the blueprint names (document, results and
// gating regions), sorted: the regions a run has even when its spec seeds
// none of them, empty until written.
func (b *Blueprint) RegionNames() []string {
	set := map[string]bool{}
	for _, s := range b.Stages {
		set[s.DocumentRegion] = true
		if s.FanOut != nil {
			set[s.FanOut.ResultsRegion] = true
		}
		for _, t := range s.Transitions {
			for _, r := range t.RequireRegions {
				set[r] = true
			}
		}
		for _, ip := range s.InteractionPoints {
			set[ip.DocumentRegion] = true
		}
	}
	delete(set, "")
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Prompt is the stage's system prompt as the model gets it: a fan-out
// stage's split_prompt follows the system prompt, since it tells the model
// how to produce the stage's answer, its items.
func (s *Stage) Prompt() string {
	if s.FanOut == nil || s.FanOut.SplitPrompt == "" {
		return s.SystemPrompt
	}
	if s.SystemPrompt == "" {
		return s.FanOut.SplitPrompt
	}
	return s.SystemPrompt + "\n\n" + s.FanOut.SplitPrompt
}

// PointDocument is the region an interaction point shows: its own
// document_region, else its stage's.
func (s *Stage) PointDocument(ip InteractionPoint) string {
	if ip.DocumentRegion != "" {
		return ip.DocumentRegion
	}
	return s.DocumentRegion
}
