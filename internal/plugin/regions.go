package plugin

import (
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun-dev/agentrun-operator/internal/journal"
	"github.com/agentrun-dev/agentrun-operator/internal/transcript"
)

// regionArgs takes a run NAME and, optionally, one REGION.
func regionArgs(_ *cobra.Command, o options) error {
	if len(o.args) != 1 && len(o.args) != 2 {
		return usagef("regions takes a run NAME and, optionally, a REGION")
	}
	return nil
}

// regions shows what the run's journal holds of its regions: the content
// lives there, never in the AgentRun.
func (a *app) regions(ctx context.Context, c client.Client, ns string, o options) error {
	run, err := getRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	entries, err := RunJournal(ctx, c, a.cfg, run)
	if err != nil {
		return err
	}
	held := journal.Regions(entries)
	if len(o.args) == 2 {
		r, ok := held[o.args[1]]
		if !ok {
			return fmt.Errorf("agentrun %q holds no region %q (it holds %d: kubectl agentrun regions %s -n %s)", run.Name, o.args[1], len(held), run.Name, ns)
		}
		_, err := io.WriteString(a.stdout, r.Content)
		return err
	}
	if len(held) == 0 {
		fmt.Fprintf(a.stdout, "agentrun %s/%s holds no regions yet\n", ns, run.Name)
		return nil
	}
	return RenderRegions(a.stdout, held)
}

// RenderRegions writes a table of the regions (name, bytes, last writer,
// journal seq), then each region's content under a header line.
func RenderRegions(w io.Writer, held map[string]journal.Region) error {
	names := make([]string, 0, len(held))
	for n := range held {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := newTable(w)
	fmt.Fprintln(tw, "REGION\tBYTES\tWRITTEN BY\tSEQ")
	for _, n := range names {
		r := held[n]
		fmt.Fprintf(tw, "%s\t%d\t%s\t#%d\n", n, len(r.Content), transcript.OrDash(r.By), r.Seq)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range names {
		content := held[n].Content
		if content != "" && content[len(content)-1] != '\n' {
			content += "\n"
		}
		fmt.Fprintf(w, "\n--- %s ---\n%s", n, content)
	}
	return nil
}
