package history

import (
	"reflect"

	extopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
)

// openAPIDefinitions are the schemas the API server publishes (and its
// server-side apply machinery requires): the meta/v1 types from the
// apiextensions module's generated definitions, and the history kinds
// described by their top-level fields (spec and status are the AgentRun's,
// whose full schema is the CRD's; here they are kept as given).
func openAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := extopenapi.GetOpenAPIDefinitions(ref)
	meta := ref(metav1.ObjectMeta{}.OpenAPIModelName())
	listMeta := ref(metav1.ListMeta{}.OpenAPIModelName())
	object := func(desc string, props map[string]spec.Schema, deps ...string) common.OpenAPIDefinition {
		props["apiVersion"] = *spec.StringProperty()
		props["kind"] = *spec.StringProperty()
		return common.OpenAPIDefinition{
			Schema:       spec.Schema{SchemaProps: spec.SchemaProps{Description: desc, Type: []string{"object"}, Properties: props}},
			Dependencies: deps,
		}
	}
	free := func() spec.Schema {
		s := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}}}
		s.AddExtension("x-kubernetes-preserve-unknown-fields", true)
		return s
	}
	metaOf := func(r spec.Ref) spec.Schema { return spec.Schema{SchemaProps: spec.SchemaProps{Ref: r}} }
	itemsOf := func(name string) spec.Schema {
		return *spec.ArrayProperty(&spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(name)}})
	}
	om, lm := metav1.ObjectMeta{}.OpenAPIModelName(), metav1.ListMeta{}.OpenAPIModelName()
	record, costReport := typeName(hv1.AgentRunRecord{}), typeName(hv1.AgentRunCostReport{})
	defs[record] = object("A finished AgentRun as the archive keeps it.",
		map[string]spec.Schema{"metadata": metaOf(meta), "spec": free(), "status": free(), "archive": free()}, om)
	defs[typeName(hv1.AgentRunRecordList{})] = object("A page of records.",
		map[string]spec.Schema{"metadata": metaOf(listMeta), "items": itemsOf(record)}, lm, record)
	defs[typeName(hv1.AgentRunTranscript{})] = object("A record's transcript.",
		map[string]spec.Schema{"metadata": metaOf(meta), "lines": *spec.ArrayProperty(func() *spec.Schema { s := free(); return &s }())}, om)
	defs[typeName(hv1.AgentRunJournal{})] = object("A run's journal entries as stored.",
		map[string]spec.Schema{"metadata": metaOf(meta), "entries": *spec.ArrayProperty(func() *spec.Schema { s := free(); return &s }())}, om)
	defs[typeName(hv1.AgentRunOutput{})] = object("A record's final output.",
		map[string]spec.Schema{"metadata": metaOf(meta), "stored": *spec.BoolProperty(), "output": *spec.StringProperty()}, om)
	defs[costReport] = object("One group of the cost report.",
		map[string]spec.Schema{"metadata": metaOf(meta), "spec": free(), "status": free()}, om)
	defs[typeName(hv1.AgentRunCostReportList{})] = object("The cost report.",
		map[string]spec.Schema{"metadata": metaOf(listMeta), "items": itemsOf(costReport)}, lm, costReport)
	return defs
}

// typeName is a Go type's canonical name, the key OpenAPI definitions
// are found by.
func typeName(v any) string {
	t := reflect.TypeOf(v)
	return t.PkgPath() + "." + t.Name()
}
