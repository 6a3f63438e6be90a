package history

import (
	"context"
	"net/http"

	"github.com/munnerz/goautoneg"
)

// A list asked for as a Table (kubectl get) prints a few columns and
// carries each record's metadata, not the record: the records' storage
// reads their summaries then (sqlstore.RecordSummary), not whole
// records. Whether the client asked for a Table is in the request's
// Accept header, which the storage does not see: withTableRequests notes
// it in the request's context.

type tableRowsKey struct{}

// withTableRequests marks the context of a GET that asks, first of all,
// for a JSON Table (meta.k8s.io v1 or v1beta1, both served) whose rows
// carry no whole object (includeObject None or Metadata, the default).
func withTableRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && wantsTableRows(req) {
			req = req.WithContext(context.WithValue(req.Context(), tableRowsKey{}, true))
		}
		h.ServeHTTP(w, req)
	})
}

// wantsTableRows reads the request as the API server's negotiation does:
// the most preferred media type of Accept wins.
func wantsTableRows(req *http.Request) bool {
	switch req.URL.Query().Get("includeObject") {
	case "", "None", "Metadata":
	default:
		return false
	}
	clauses := goautoneg.ParseAccept(req.Header.Get("Accept"))
	if len(clauses) == 0 {
		return false
	}
	c := clauses[0]
	v := c.Params["v"]
	return c.Type == "application" && c.SubType == "json" && c.Params["as"] == "Table" && c.Params["g"] == "meta.k8s.io" && (v == "v1" || v == "v1beta1")
}

// tableRows reports whether ctx's request asked for a Table without
// whole objects.
func tableRows(ctx context.Context) bool {
	v, _ := ctx.Value(tableRowsKey{}).(bool)
	return v
}
