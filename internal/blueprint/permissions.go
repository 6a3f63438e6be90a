package blueprint

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// rawReadPaths is Leviath's [read_paths] table: the paths an agent declares
// it reads. Declaring is not granting there (the user's config grants), and
// here there is no workdir at all: a run reads only what its tools return,
// and a tool server grants what it serves. The entries are checked, so a
// Leviath blueprint with a typo still fails with its line, and kept; they
// change nothing (docs/blueprints.md says so).
type rawReadPaths struct {
	Allow []string `toml:"allow"`
}

// Read path entry prefixes; an entry without one is a literal path.
const (
	readPathGlob  = "glob:"
	readPathRegex = "regex:"
)

// topLevel reads Leviath's top-level tables: [tool_permissions], the same
// table as [agent.tool_permissions] (one tool may not be given two
// policies), and [read_paths].
func (p *parser) topLevel(raw *rawManifest, bp *Blueprint) *ParseError {
	for _, tool := range sortedKeys(raw.ToolPermissions) {
		v := raw.ToolPermissions[tool]
		at := p.line("tool_permissions", tool)
		if err := p.enum(at, "tool_permissions."+tool, v, PermAllow, PermAsk, PermDeny); err != nil {
			return err
		}
		if old, ok := bp.Agent.ToolPermissions[tool]; ok && old != v {
			return p.errf(at, "tool_permissions.%s is %q here and %q in [agent.tool_permissions]; give the tool one policy", tool, v, old)
		}
		if bp.Agent.ToolPermissions == nil {
			bp.Agent.ToolPermissions = map[string]string{}
		}
		bp.Agent.ToolPermissions[tool] = v
	}
	if raw.ReadPaths == nil {
		return nil
	}
	at := p.line("read_paths", "allow")
	for i, entry := range raw.ReadPaths.Allow {
		if err := readPathError(entry); err != "" {
			return p.errf(at, "read_paths.allow[%d] %q: %s", i, entry, err)
		}
	}
	bp.ReadPaths = raw.ReadPaths.Allow
	return nil
}

// readPathError is what is wrong with a read_paths entry, or "".
func readPathError(entry string) string {
	switch {
	case strings.TrimSpace(entry) == "":
		return "is empty"
	case strings.HasPrefix(entry, readPathRegex):
		if _, err := regexp.Compile(strings.TrimPrefix(entry, readPathRegex)); err != nil {
			return fmt.Sprintf("is not a regular expression: %v", err)
		}
	case strings.HasPrefix(entry, readPathGlob):
		if _, err := path.Match(strings.TrimPrefix(entry, readPathGlob), ""); err != nil {
			return "is not a glob pattern"
		}
	}
	return ""
}
