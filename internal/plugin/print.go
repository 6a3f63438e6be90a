package plugin

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/wirestatus"
)

// The commands that print runs (ps, status), in the human form or through
// cli-runtime's printers (-o json, yaml, name, jsonpath, go-template).

// listScope is the namespace a listing covers: ns, or every one with -A.
func listScope(ns string, o options) []client.ListOption {
	if o.allNamespaces {
		return nil
	}
	return []client.ListOption{client.InNamespace(ns)}
}

func (a *app) ps(ctx context.Context, c client.Client, ns string, o options) error {
	var list arv1.AgentRunList
	if err := c.List(ctx, &list, listScope(ns, o)...); err != nil {
		return err
	}
	own := readOwnership(ctx, c, o)
	classes, unread := ReadPriorityClasses(ctx, c, o.leaseNamespace)
	if unread != nil && classesMatter(list.Items) {
		fmt.Fprintf(a.stderr, "Note: %v; places in line count spec.priority only, a class as 0\n", unread)
	}
	if o.watch {
		return a.watchRuns(ctx, ns, o, &list, own, classes)
	}
	if o.output != "" && o.output != "wide" {
		return a.printObjects(o, asList(list.Items))
	}
	if len(list.Items) == 0 {
		if o.allNamespaces {
			fmt.Fprintln(a.stderr, "No AgentRuns found.")
		} else {
			fmt.Fprintf(a.stderr, "No AgentRuns found in namespace %q.\n", ns)
		}
		return nil
	}
	return renderPs(a.stdout, list.Items, a.now(), psColumns{allNamespaces: o.allNamespaces, wide: o.output == "wide"}, own, classes)
}

// printObjects prints obj with the printer -o chose.
func (a *app) printObjects(o options, obj runtime.Object) error {
	p, err := o.print.ToPrinter()
	if err != nil {
		return err
	}
	return p.PrintObj(obj, a.stdout)
}

// withKind is a copy of run with its apiVersion and kind, which a typed
// client leaves empty and the printers need.
func withKind(run *arv1.AgentRun) *arv1.AgentRun {
	r := run.DeepCopy()
	r.SetGroupVersionKind(arv1.GroupVersion.WithKind("AgentRun"))
	return r
}

// asList is runs the way kubectl get prints several objects: a v1 List.
func asList(runs []arv1.AgentRun) *unstructured.UnstructuredList {
	list := &unstructured.UnstructuredList{Object: map[string]any{
		"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}}}
	for i := range runs {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(withKind(&runs[i]))
		if err != nil { // a typed AgentRun always converts
			panic(err)
		}
		list.Items = append(list.Items, unstructured.Unstructured{Object: u})
	}
	return list
}

func (a *app) status(ctx context.Context, c client.Client, ns string, o options) error {
	run, err := getRun(ctx, c, ns, o.args[0])
	if err != nil {
		return err
	}
	state := wirestatus.RunState(run, a.now())
	switch o.output {
	case "json": // two-space indented, as every agentrun surface returns it
		b, err := json.MarshalIndent(state, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	case "name":
		return a.printObjects(o, withKind(run))
	case "":
	default: // yaml, jsonpath, go-template: of the run state, not the AgentRun
		b, err := json.Marshal(state)
		if err != nil {
			return err
		}
		return a.printObjects(o, &runtime.Unknown{Raw: b, ContentType: runtime.ContentTypeJSON})
	}
	st := wirestatus.Status(run, a.now())
	fmt.Fprintf(a.stdout, "%s/%s: %s\n", run.Namespace, run.Name, st.String("state"))
	for _, f := range st[1:] {
		fmt.Fprintf(a.stdout, "  %s: %s\n", f.Key, plain(f.Value))
	}
	fmt.Fprintf(a.stdout, "pending: %s\n", plain(wirestatus.Pending(run)))
	return nil
}

// plain renders a wire value for a person: strings bare, the rest as JSON.
func plain(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
