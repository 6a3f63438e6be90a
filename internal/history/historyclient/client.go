// Package historyclient reads the history API (history.agentrun.dev,
// served by internal/history) through the API server, as the user of a
// rest.Config: the kubectl plugin, the console and tests use it. It is
// apart from the server so that they do not link k8s.io/apiserver.
package historyclient

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	hv1 "github.com/agentrun-dev/agentrun-operator/api/history/v1alpha1"
)

// scheme holds the history API's types; codecs decode its answers.
var (
	scheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		if err := hv1.AddToScheme(s); err != nil {
			panic(err)
		}
		metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
		return s
	}()
	codecs     = serializer.NewCodecFactory(scheme)
	paramCodec = runtime.NewParameterCodec(scheme)
)

// Client reads the history API through the API server, as the user of
// its rest.Config: a small typed client for the kubectl plugin and the
// console. Errors are the API's (apierrors.IsNotFound, IsForbidden,
// IsResourceExpired, IsBadRequest).
type Client struct{ rc rest.Interface }

// New is a Client for cfg (the same config as any client-go
// client; the request goes to the API server, which proxies it).
func New(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &hv1.GroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: codecs}
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &Client{rc: rc}, nil
}

// ListRecords lists a page of records of ns ("" for every namespace),
// newest finished first: opts carry the label and field selectors
// (RecordFields), Limit and Continue.
func (c *Client) ListRecords(ctx context.Context, ns string, opts metav1.ListOptions) (*hv1.AgentRunRecordList, error) {
	out := &hv1.AgentRunRecordList{}
	err := c.rc.Get().NamespaceIfScoped(ns, ns != "").Resource(hv1.ResourceRecords).
		VersionedParams(&opts, paramCodec).Do(ctx).Into(out)
	return out, err
}

// WatchRecords watches records archived after opts.ResourceVersion (a
// list's), with the list's selectors.
func (c *Client) WatchRecords(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rc.Get().NamespaceIfScoped(ns, ns != "").Resource(hv1.ResourceRecords).
		VersionedParams(&opts, paramCodec).Watch(ctx)
}

// GetRecord reads the newest record of the run name in ns.
func (c *Client) GetRecord(ctx context.Context, ns, name string) (*hv1.AgentRunRecord, error) {
	out := &hv1.AgentRunRecord{}
	err := c.rc.Get().Namespace(ns).Resource(hv1.ResourceRecords).Name(name).Do(ctx).Into(out)
	return out, err
}

// Transcript reads a record's transcript.
func (c *Client) Transcript(ctx context.Context, ns, name string) (*hv1.AgentRunTranscript, error) {
	out := &hv1.AgentRunTranscript{}
	err := c.rc.Get().Namespace(ns).Resource(hv1.ResourceRecords).Name(name).SubResource(hv1.SubresourceTranscript).Do(ctx).Into(out)
	return out, err
}

// Output reads a record's final output.
func (c *Client) Output(ctx context.Context, ns, name string) (*hv1.AgentRunOutput, error) {
	out := &hv1.AgentRunOutput{}
	err := c.rc.Get().Namespace(ns).Resource(hv1.ResourceRecords).Name(name).SubResource(hv1.SubresourceOutput).Do(ctx).Into(out)
	return out, err
}

// Journal reads the journal's entries, as stored, of a record or of a
// live run whose journal is in the database (metadata.uid says whose).
func (c *Client) Journal(ctx context.Context, ns, name string) (*hv1.AgentRunJournal, error) {
	out := &hv1.AgentRunJournal{}
	err := c.rc.Get().Namespace(ns).Resource(hv1.ResourceRecords).Name(name).SubResource(hv1.SubresourceJournal).Do(ctx).Into(out)
	return out, err
}

// DeleteRecord purges a record (its journal and ledger rows with it).
func (c *Client) DeleteRecord(ctx context.Context, ns, name string) error {
	return c.rc.Delete().Namespace(ns).Resource(hv1.ResourceRecords).Name(name).Do(ctx).Error()
}

// CostReport lists the cost report of ns ("" for every namespace); opts'
// field selector carries its parameters (CostFields: spec.since or
// spec.from, spec.to, spec.groupBy, spec.agent, spec.model).
func (c *Client) CostReport(ctx context.Context, ns string, opts metav1.ListOptions) (*hv1.AgentRunCostReportList, error) {
	out := &hv1.AgentRunCostReportList{}
	err := c.rc.Get().NamespaceIfScoped(ns, ns != "").Resource(hv1.ResourceCostReports).
		VersionedParams(&opts, paramCodec).Do(ctx).Into(out)
	return out, err
}
