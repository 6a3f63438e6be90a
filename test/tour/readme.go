package tour

import (
	"bufio"
	"fmt"
	"strings"
)

// Block is one fenced shell block of the README with the tour marker that
// precedes it: `<!-- tour -->` (run in the second terminal), `<!-- tour:
// terminal 1 -->` (make run, in the first), `<!-- tour: krew -->` (run in
// the second terminal, krew installed), or `<!-- tour: not run (why) -->`.
type Block struct {
	// Kind is the marker's text after "tour", without the colon: "",
	// "terminal 1", "krew" or "not run (...)".
	Kind string
	// Line is the README line of the opening fence, for messages.
	Line int
	// Commands are the block's lines, as written, blank lines left out.
	Commands []string
}

// Skipped reports whether the block is marked as not run by the test.
func (b Block) Skipped() bool { return strings.HasPrefix(b.Kind, "not run") }

// Blocks returns the marked shell blocks of readme, in order. Every ```sh
// block before the heading stopAt must carry a marker, so no command of the
// tour is left out of the test unseen; a marker not followed by a ```sh
// block is an error too.
func Blocks(readme, stopAt string) ([]Block, error) {
	var (
		blocks  []Block
		marker  *string
		current *Block
		inTour  = true
		inFence bool
	)
	sc := bufio.NewScanner(strings.NewReader(readme))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case current != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, *current)
			current, inFence = nil, false
		case current != nil:
			if strings.TrimSpace(line) != "" {
				current.Commands = append(current.Commands, line)
			}
		case inFence:
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inFence = false
			}
		case strings.HasPrefix(line, "<!-- tour") && strings.HasSuffix(line, "-->"):
			if marker != nil {
				return nil, fmt.Errorf("README.md:%d: tour marker not followed by a ```sh block", n-1)
			}
			kind := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "<!-- tour"), "-->"))
			kind = strings.TrimSpace(strings.TrimPrefix(kind, ":"))
			marker = &kind
		case strings.HasPrefix(line, "```"):
			lang := strings.TrimPrefix(line, "```")
			if lang != "sh" {
				if marker != nil {
					return nil, fmt.Errorf("README.md:%d: a tour marker before a ```%s block, not ```sh", n, lang)
				}
				inFence = true
				continue
			}
			if marker == nil {
				if inTour {
					return nil, fmt.Errorf("README.md:%d: a ```sh block of the tour without a tour marker", n)
				}
				inFence = true
				continue
			}
			current, marker = &Block{Kind: *marker, Line: n}, nil
		case strings.TrimSpace(line) == "":
		default:
			if marker != nil {
				return nil, fmt.Errorf("README.md:%d: tour marker not followed by a ```sh block", n-1)
			}
			if line == stopAt {
				inTour = false
			}
		}
	}
	if current != nil || marker != nil {
		return nil, fmt.Errorf("README.md ends inside a tour block")
	}
	return blocks, sc.Err()
}
