package plugin

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/priority"
	"github.com/agentrun-dev/agentrun-operator/internal/runqueue"
	"github.com/agentrun-dev/agentrun-operator/internal/shards"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

// newTable is the tabwriter every listing uses: kubectl's three-space gap.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
}

// psNode is one run in the listing's forest.
type psNode struct {
	row      wirestatus.PsRow
	children []*psNode
	// needs: this run or one of its descendants needs a person, so its
	// tree sorts first.
	needs bool
}

// RenderPs writes the `ps` listing of runs at now: one tree per top-level
// run, children under their parent (status.parentRun, else the controller
// owner reference) drawn with box characters, then a footer counting the
// runs that need an answer. Among siblings, and among the trees, a run
// whose tree holds a run needing a person comes first, then the newest,
// then by namespace and name. A run whose parent is not in the list is
// shown as a top-level run; so is a run caught in a parent cycle.
//
// own is who holds the shards, from the operator's Leases (nil when they
// could not be read): the DRIVER column says which replica drives each
// unfinished run, and when its shard has no live holder, whether the shard
// is only changing hands or no replica is alive to take it. classes are
// the priority classes in force, by which the manager (and so the
// WAITING cell) orders the runs waiting in line.
func RenderPs(w io.Writer, runs []arv1.AgentRun, now time.Time, allNamespaces bool, own *shards.Ownership, classes priority.Classes) error {
	return renderPs(w, runs, now, psColumns{allNamespaces: allNamespaces}, own, classes)
}

// psColumns says which columns beyond the usual a listing has.
type psColumns struct {
	allNamespaces bool // NAMESPACE first
	wide          bool // -o wide: AGENT, PRIORITY, STATE and AGE last
}

// header is the listing's header line, tab-separated.
func (c psColumns) header() string {
	h := "RUN\tPHASE\tWAITING\tSTAGE\tTOKENS\tCOST\tWORKING\tLAST MOVED\tDRIVER"
	if c.allNamespaces {
		h = "NAMESPACE\t" + h
	}
	if c.wide {
		h += "\tAGENT\tPRIORITY\tSTATE\tAGE"
	}
	return h
}

// line is one run's row, tab-separated; name is its RUN cell (with the
// tree drawn before it).
func (c psColumns) line(run *arv1.AgentRun, r wirestatus.PsRow, name, driver string, now time.Time) string {
	l := fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s", name, r.Phase, r.Waiting, r.Stage, r.Tokens, r.Cost, r.Working, r.LastMoved, driver)
	if c.allNamespaces {
		l = r.Namespace + "\t" + l
	}
	if c.wide {
		l += fmt.Sprintf("\t%s\t%s\t%s\t%s", transcript.OrDash(run.Spec.Agent), priorityText(&run.Spec), r.State, duration.HumanDuration(now.Sub(r.Created)))
	}
	return l
}

// priorityText is the PRIORITY cell: the priority the run asks for, or
// its class's name, or "-" (the default class).
func priorityText(spec *arv1.AgentRunSpec) string {
	switch {
	case spec.Priority != nil:
		return strconv.Itoa(int(*spec.Priority))
	case spec.PriorityClassName != "":
		return spec.PriorityClassName
	}
	return wirestatus.Empty
}

// renderPs writes the runs as a forest of run trees, with the footer.
func renderPs(w io.Writer, runs []arv1.AgentRun, now time.Time, cols psColumns, own *shards.Ownership, classes priority.Classes) error {
	l := newPsListing(runs, now, own, classes)
	l.markNeeds()
	tw := newTable(w)
	fmt.Fprintln(tw, cols.header())
	l.write(tw, cols, now)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", Footer(l.needing))
	return err
}

// psListing is the runs of a listing as a forest: each run under its
// parent when the parent is listed too.
type psListing struct {
	order, roots []*psNode
	objs         map[*psNode]*arv1.AgentRun
	drivers      map[*psNode]string
	// needing counts the runs that need a person.
	needing int
}

// newPsListing makes the forest of runs, in their listed order.
func newPsListing(runs []arv1.AgentRun, now time.Time, own *shards.Ownership, classes priority.Classes) *psListing {
	l := &psListing{
		objs: make(map[*psNode]*arv1.AgentRun, len(runs)), drivers: make(map[*psNode]string, len(runs)),
		order: make([]*psNode, 0, len(runs)),
	}
	nodes := make(map[string]*psNode, len(runs))
	key := func(ns, name string) string { return ns + "/" + name }
	for i := range runs {
		n := &psNode{row: wirestatus.NewPsRow(&runs[i], now)}
		l.drivers[n] = DriverText(&runs[i], own)
		l.objs[n] = &runs[i]
		nodes[key(n.row.Namespace, n.row.Name)] = n
		l.order = append(l.order, n)
		if n.row.NeedsAPerson {
			l.needing++
		}
	}
	markLine(l.order, l.objs, classes)
	for _, n := range l.order {
		if p, ok := nodes[key(n.row.Namespace, n.row.Parent)]; ok && n.row.Parent != "" && p != n {
			p.children = append(p.children, n)
		} else {
			l.roots = append(l.roots, n)
		}
	}
	return l
}

// markNeeds marks every run that needs a person or has a descendant that
// does. needs is computed over the forest reachable from the roots; a run
// in a parent cycle is unreachable, and is listed at the top instead.
func (l *psListing) markNeeds() {
	var mark func(n *psNode, seen map[*psNode]bool) bool
	mark = func(n *psNode, seen map[*psNode]bool) bool {
		if seen[n] {
			return n.needs
		}
		seen[n] = true
		n.needs = n.row.NeedsAPerson
		for _, c := range n.children {
			if mark(c, seen) {
				n.needs = true
			}
		}
		return n.needs
	}
	seen := map[*psNode]bool{}
	for _, r := range l.roots {
		mark(r, seen)
	}
	for _, n := range l.order {
		if !seen[n] { // in a cycle: break it by listing the run at the top
			n.row.Parent = ""
			l.roots = append(l.roots, n)
			mark(n, seen)
		}
	}
}

// write writes each tree's lines, children under their parent, with the
// tree drawn in the NAME column.
func (l *psListing) write(tw io.Writer, cols psColumns, now time.Time) {
	l.walk(func(n *psNode, prefix, connector string, _ int) {
		fmt.Fprintln(tw, cols.line(l.objs[n], n.row, prefix+connector+n.row.Name, l.drivers[n], now))
	})
}

// walk visits every run in listing order (trees needing a person first,
// each child after its parent) with the tree drawing before its name and
// its depth in the tree.
func (l *psListing) walk(visit func(n *psNode, prefix, connector string, depth int)) {
	printed := map[*psNode]bool{}
	var emit func(n *psNode, prefix, connector string, depth int)
	emit = func(n *psNode, prefix, connector string, depth int) {
		if printed[n] {
			return
		}
		printed[n] = true
		visit(n, prefix, connector, depth)
		sortNodes(n.children)
		childPrefix := prefix
		switch connector {
		case "├─ ":
			childPrefix += "│  "
		case "└─ ":
			childPrefix += "   "
		}
		for i, c := range n.children {
			conn := "├─ "
			if i == len(n.children)-1 {
				conn = "└─ "
			}
			emit(c, childPrefix, conn, depth+1)
		}
	}
	sortNodes(l.roots)
	for _, r := range l.roots {
		emit(r, "", "", 0)
	}
}

// TreeRun is one run of an ordered listing (OrderTrees).
type TreeRun struct {
	Run *arv1.AgentRun
	Row wirestatus.PsRow
	// Depth is 0 for a top-level run, 1 for its children, and so on.
	Depth int
	// Driver is the DRIVER cell (DriverText).
	Driver string
	// TreeNeedsAPerson: this run or one below it needs a person.
	TreeNeedsAPerson bool
}

// OrderTrees orders runs as `ps` lists them: one tree per top-level run,
// each child right after its parent, trees holding a run that needs a
// person first, then the newest. The web console lists runs through it, so
// both surfaces agree. It returns how many runs need a person too.
func OrderTrees(runs []arv1.AgentRun, now time.Time, own *shards.Ownership, classes priority.Classes) ([]TreeRun, int) {
	l := newPsListing(runs, now, own, classes)
	l.markNeeds()
	out := make([]TreeRun, 0, len(runs))
	l.walk(func(n *psNode, _, _ string, depth int) {
		out = append(out, TreeRun{Run: l.objs[n], Row: n.row, Depth: depth, Driver: l.drivers[n], TreeNeedsAPerson: n.needs})
	})
	return out, l.needing
}

// markLine fills the WAITING cell of each run still in line with how
// many listed runs are ahead of it, in the manager's order: runqueue.RunOf
// with the priority classes in force (priority, a child's taken from its
// tree's root, then the root's creation, then the run's own). Counting the
// listing costs nothing: the manager writes no position. Among namespaces
// the manager also shares slots fairly, so across a -A listing, which
// counts every namespace's runs as one line, the count is not a promise.
func markLine(order []*psNode, objs map[*psNode]*arv1.AgentRun, classes priority.Classes) {
	byName := make(map[string]*arv1.AgentRun, len(order))
	for _, n := range order {
		byName[objs[n].Namespace+"/"+objs[n].Name] = objs[n]
	}
	rootOf := func(ns, name string) *arv1.AgentRun { return byName[ns+"/"+name] }
	var line []*psNode
	places := map[*psNode]runqueue.Place{}
	for _, n := range order {
		if r := objs[n]; waitsInLine(r) {
			line = append(line, n)
			places[n] = runqueue.RunOf(r, classes, rootOf).Place
		}
	}
	sort.SliceStable(line, func(i, j int) bool { return places[line[i]].Before(places[line[j]]) })
	for i, n := range line {
		n.row.Waiting = "next in line"
		if i > 0 {
			n.row.Waiting = strconv.Itoa(i) + " ahead in line"
		}
	}
}

// classesMatter says whether the priority classes can change the order
// of the runs waiting in line: the spec that sets one's priority (its
// tree root's, when listed) names a class, or some set spec.priority and
// some do not (the default class's value then counts).
func classesMatter(runs []arv1.AgentRun) bool {
	byName := make(map[string]*arv1.AgentRun, len(runs))
	for i := range runs {
		byName[runs[i].Namespace+"/"+runs[i].Name] = &runs[i]
	}
	numbered, unnumbered := false, false
	for i := range runs {
		if !waitsInLine(&runs[i]) {
			continue
		}
		spec := &runs[i].Spec
		if root, ok := byName[runs[i].Namespace+"/"+runqueue.PlaceOf(&runs[i]).RootName]; ok {
			spec = &root.Spec
		}
		switch {
		case spec.Priority != nil:
			numbered = true
		case spec.PriorityClassName != "":
			return true
		default:
			unnumbered = true
		}
	}
	return numbered && unnumbered
}

// waitsInLine: the run has not been taken up (phase Queued), is not
// parked and is not being deleted.
func waitsInLine(run *arv1.AgentRun) bool {
	return run.Status.Phase.IsUnstarted() && run.Status.WaitingOn == nil && run.DeletionTimestamp == nil
}

// Footer is the listing's last line: how many runs need an answer.
func Footer(needing int) string {
	switch needing {
	case 0:
		return "no run needs an answer"
	case 1:
		return "1 run needs an answer"
	}
	return fmt.Sprintf("%d runs need an answer", needing)
}

func sortNodes(ns []*psNode) {
	sort.SliceStable(ns, func(i, j int) bool {
		a, b := ns[i], ns[j]
		if a.needs != b.needs {
			return a.needs
		}
		if !a.row.Created.Equal(b.row.Created) {
			return a.row.Created.After(b.row.Created)
		}
		if a.row.Namespace != b.row.Namespace {
			return a.row.Namespace < b.row.Namespace
		}
		return a.row.Name < b.row.Name
	})
}

// DriverText says who drives a run: the replica holding its shard's Lease
// (status.driver when the Leases could not be read or runs are not
// sharded); for a shard without a live holder, whether it is only
// changing hands (some replica is alive to take it) or has no live
// replica at all. A finished run has no driver.
func DriverText(run *arv1.AgentRun, own *shards.Ownership) string {
	if run.Status.Phase.IsTerminal() {
		return wirestatus.Empty
	}
	if own == nil || !own.Sharded {
		if run.Status.Driver == "" {
			return wirestatus.Empty
		}
		return run.Status.Driver
	}
	shard, err := strconv.Atoi(run.Labels[shards.LabelShard])
	switch {
	case err != nil && own.LiveMembers > 0:
		return "(getting its shard)"
	case err != nil:
		return "none (no live replica)"
	}
	if h, ok := own.Holders[shard]; ok {
		return h
	}
	if own.LiveMembers > 0 {
		return fmt.Sprintf("(shard %d changing hands)", shard)
	}
	return fmt.Sprintf("none (shard %d: no live replica)", shard)
}
