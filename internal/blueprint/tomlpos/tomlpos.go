// Package tomlpos finds the line of a key or table in TOML source text.
// BurntSushi/toml records key positions but does not export them, and
// configuration errors are only actionable when they point at a line, so
// this package re-scans the source with a small, tolerant lexer.
package tomlpos

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// sep joins key parts; it cannot appear in a TOML key written in a file
// without escapes, which keeps paths unambiguous.
const sep = "\x1f"

// Index maps key paths to 1-based line numbers.
type Index struct {
	// first holds the first line of every key and table header, with
	// array-of-tables indices removed (the shape of MetaData keys).
	first map[string]int
	// indexed holds lines by path where each array-of-tables part carries
	// its element index, e.g. "stages␟plan␟script[1]␟next".
	indexed map[string]int
	// arrays counts the elements seen so far for each indexed array path.
	arrays map[string]int
	// size is the source length, to tell a real byte offset from an unset one.
	size int
	// newlines holds the byte offset of every '\n', to map offsets to lines.
	newlines []int
}

// New scans src. It never fails: text it cannot follow (the decoder reports
// real syntax errors) simply yields no positions.
func New(src string) *Index {
	x := &Index{first: map[string]int{}, indexed: map[string]int{}, arrays: map[string]int{}, size: len(src)}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			x.newlines = append(x.newlines, i)
		}
	}
	var (
		table []string // current table, indexed parts
		plain []string // current table, plain parts
		st    scanState
	)
	for i, line := range strings.Split(src, "\n") {
		n := i + 1
		rest := line
		if st.inML != "" {
			var ok bool
			if rest, ok = st.closeML(rest); !ok {
				continue
			}
			st.scanValue(rest)
			continue
		}
		if st.depth > 0 {
			st.scanValue(rest)
			continue
		}
		rest = strings.TrimLeft(rest, " \t")
		switch {
		case rest == "" || rest[0] == '#':
			continue
		case strings.HasPrefix(rest, "[["):
			parts, after, ok := parseKey(rest[2:])
			if !ok || !strings.HasPrefix(strings.TrimLeft(after, " \t"), "]]") {
				continue
			}
			parent := x.indexPath(parts[:len(parts)-1])
			arr := join(append(parent, parts[len(parts)-1]))
			x.arrays[arr]++
			parent = append(parent, parts[len(parts)-1]+"["+strconv.Itoa(x.arrays[arr]-1)+"]")
			table = parent
			plain = parts
			x.record(plain, table, n)
		case rest[0] == '[':
			parts, after, ok := parseKey(rest[1:])
			if !ok || !strings.HasPrefix(strings.TrimLeft(after, " \t"), "]") {
				continue
			}
			table = x.indexPath(parts)
			plain = parts
			x.record(plain, table, n)
		default:
			parts, after, ok := parseKey(rest)
			after = strings.TrimLeft(after, " \t")
			if !ok || !strings.HasPrefix(after, "=") {
				continue
			}
			x.record(concat(plain, parts), concat(table, parts), n)
			st.scanValue(after[1:])
		}
	}
	return x
}

func (x *Index) record(plain, indexed []string, line int) {
	if p := join(plain); x.first[p] == 0 {
		x.first[p] = line
	}
	if p := join(indexed); x.indexed[p] == 0 {
		x.indexed[p] = line
	}
}

// indexPath annotates each part that names an array of tables with the index
// of its latest element, which is what a following header or key refers to.
func (x *Index) indexPath(parts []string) []string {
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		out = append(out, p)
		if n := x.arrays[join(out)]; n > 0 {
			out[len(out)-1] = p + "[" + strconv.Itoa(n-1) + "]"
		}
	}
	return out
}

// Line returns the line where key was first defined, falling back to its
// closest enclosing table or key (keys inside inline tables are not
// tracked). It returns 0 when nothing matches.
func (x *Index) Line(key ...string) int {
	for k := len(key); k > 0; k-- {
		if n := x.first[join(key[:k])]; n > 0 {
			return n
		}
	}
	return 0
}

// lineAt maps a byte offset to its 1-based line; a newline belongs to the
// line it ends.
func (x *Index) lineAt(off int) int {
	return 1 + sort.SearchInts(x.newlines, off)
}

// Exact returns the line of key only if that exact key was seen, so callers
// can tell a key that is present from one that is defaulted.
func (x *Index) Exact(key ...string) int {
	return x.first[join(key)]
}

// Elem returns the line of key inside element i of the array of tables at
// table (whose enclosing parts must not be arrays themselves), falling back
// to the element's header and then to Line(table...).
func (x *Index) Elem(table []string, i int, key ...string) int {
	if len(table) > 0 {
		base := concat(table[:len(table)-1], []string{table[len(table)-1] + "[" + strconv.Itoa(i) + "]"})
		for k := len(key); k >= 0; k-- {
			if n := x.indexed[join(concat(base, key[:k]))]; n > 0 {
				return n
			}
		}
	}
	return x.Line(table...)
}

// scanState follows strings and brackets across lines so that text inside
// multi-line strings and arrays is not mistaken for keys or headers.
type scanState struct {
	depth int    // open [ and { in the current value
	inML  string // `"""` or `'''` while inside a multi-line string
}

// closeML consumes s up to the end of the open multi-line string. It returns
// the remainder and whether the string closed on this line.
func (st *scanState) closeML(s string) (string, bool) {
	for i := 0; i < len(s); i++ {
		if st.inML == `"""` && s[i] == '\\' {
			i++
			continue
		}
		if strings.HasPrefix(s[i:], st.inML) {
			q := st.inML[0]
			j := i + 3
			// Up to two quotes may directly precede the closing delimiter.
			for k := 0; k < 2 && j < len(s) && s[j] == q; k++ {
				j++
			}
			st.inML = ""
			return s[j:], true
		}
	}
	return "", false
}

// scanValue consumes the value text on one line, tracking nesting and
// multi-line strings, and stops at a comment.
func (st *scanState) scanValue(s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '#':
			return
		case '[', '{':
			st.depth++
		case ']', '}':
			if st.depth > 0 {
				st.depth--
			}
		case '"', '\'':
			delim := strings.Repeat(string(c), 3)
			if strings.HasPrefix(s[i:], delim) {
				st.inML = delim
				rest, ok := st.closeML(s[i+3:])
				if !ok {
					return
				}
				s, i = rest, -1
				continue
			}
			for i++; i < len(s) && s[i] != c; i++ {
				if c == '"' && s[i] == '\\' {
					i++
				}
			}
		}
	}
}

// parseKey reads a dotted key (bare, "basic" or 'literal' parts) from the
// start of s and returns its parts and the text after it.
func parseKey(s string) ([]string, string, bool) {
	var parts []string
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			return nil, "", false
		}
		var part string
		switch s[0] {
		case '"':
			end := 1
			for end < len(s) && s[end] != '"' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				return nil, "", false
			}
			u, err := strconv.Unquote(s[:end+1])
			if err != nil {
				u = s[1:end]
			}
			part, s = u, s[end+1:]
		case '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, "", false
			}
			part, s = s[1:end+1], s[end+2:]
		default:
			end := 0
			for end < len(s) && isBare(s[end]) {
				end++
			}
			if end == 0 {
				return nil, "", false
			}
			part, s = s[:end], s[end:]
		}
		parts = append(parts, part)
		t := strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(t, ".") {
			return parts, s, true
		}
		s = t[1:]
	}
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

func join(parts []string) string { return strings.Join(parts, sep) }

func concat(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

// decodeErrRE matches the type-mismatch errors BurntSushi/toml returns as
// plain errors, e.g. `toml: line 4 (last key "a.b"): incompatible types: ...`.
var decodeErrRE = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key "(.*?)"\): (.*)$`)

// DecodeError turns an error from toml.Decode into a line (0 if unknown) and
// a message without the "toml:" prefix, so callers can wrap it in their own
// positioned error type.
func DecodeError(err error, x *Index) (int, string) {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		// The decoder counts a newline that ends an unterminated construct
		// as the next line ("[agent\n" is reported on line 2), so the line
		// is recomputed from the byte offset when there is one.
		line := pe.Position.Line
		if x != nil && pe.Position.Len > 0 && pe.Position.Start < x.size {
			line = x.lineAt(pe.Position.Start)
		}
		// LastKey is only the last key parsed before a syntax error, which
		// misleads more than it helps, so the message stands alone.
		return line, pe.Message
	}
	if m := decodeErrRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		if line == 0 && x != nil {
			line = x.Line(strings.Split(m[2], ".")...)
		}
		return line, "key " + strconv.Quote(m[2]) + ": " + m[3]
	}
	return 0, strings.TrimPrefix(err.Error(), "toml: ")
}

// UnknownKeys reports the undecoded keys of md, dropping keys nested under
// another undecoded key so that an unknown table is reported once.
func UnknownKeys(md toml.MetaData) []toml.Key {
	var out []toml.Key
	seen := map[string]bool{}
	for _, k := range md.Undecoded() {
		nested := false
		for i := 1; i < len(k); i++ {
			if seen[join(k[:i])] {
				nested = true
				break
			}
		}
		seen[join(k)] = true
		if !nested {
			out = append(out, k)
		}
	}
	return out
}

// DecodeStrict decodes src into v and refuses unknown keys. On failure it
// returns the 1-based line (0 when unknown) and a message; ok is true when
// src decoded cleanly.
func (x *Index) DecodeStrict(src string, v any) (md toml.MetaData, line int, msg string, ok bool) {
	md, err := toml.Decode(src, v)
	if err != nil {
		line, msg = DecodeError(err, x)
		return md, line, msg, false
	}
	if unknown := UnknownKeys(md); len(unknown) > 0 {
		names := make([]string, len(unknown))
		for i, k := range unknown {
			names[i] = strconv.Quote(k.String())
		}
		word := "key"
		if len(names) > 1 {
			word = "keys"
		}
		return md, x.Line(unknown[0]...), fmt.Sprintf("unknown %s %s", word, strings.Join(names, ", ")), false
	}
	return md, 0, "", true
}

// Error is a problem in a TOML document held under a ConfigMap key, with
// its position, so a message a user sees names the key and line to fix.
type Error struct {
	Key     string // the ConfigMap key (file) the problem is in
	Line    int    // 1-based; 0 when unknown
	Message string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s line %d: %s", e.Key, e.Line, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Key, e.Message)
}
