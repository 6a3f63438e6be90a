package loadtest

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// Requests counts the API server's requests by verb and resource (with the
// subresource, e.g. "PATCH agentruns/status", "WATCH configmaps"), from its
// own apiserver_request_total counter: what every client asked of it, the
// manager's reads included. Requests answered with an error are counted
// apart, their code after the resource ("POST configmaps 409"): they cost
// the API server and store nothing.
type Requests map[string]float64

// APIRequests scrapes the API server's request counters.
func (c *Cluster) APIRequests(ctx context.Context) (Requests, error) {
	sc, err := c.APIServerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	out := Requests{}
	for _, s := range sc {
		if s.Name != "apiserver_request_total" {
			continue
		}
		res := s.Labels["resource"]
		if sub := s.Labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		if code := s.Labels["code"]; code != "" && !strings.HasPrefix(code, "2") {
			res += " " + code
		}
		out[s.Labels["verb"]+" "+res] += s.Value
	}
	return out, nil
}

// APIServerMetrics scrapes the API server's own /metrics.
func (c *Cluster) APIServerMetrics(ctx context.Context) (Scrape, error) {
	body, err := c.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scraping the API server's /metrics: %w", err)
	}
	return ParseMetrics(body)
}

// Sub is the requests made between prev and r.
func (r Requests) Sub(prev Requests) Requests {
	out := Requests{}
	for k, v := range r {
		if d := v - prev[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// PerRun formats the counts per run of n, largest first, leaving out
// those under 0.05 per run.
func (r Requests) PerRun(n int) string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return r[keys[i]] > r[keys[j]] || (r[keys[i]] == r[keys[j]] && keys[i] < keys[j]) })
	var parts []string
	for _, k := range keys {
		if per := r[k] / float64(n); per >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, per))
		}
	}
	return strings.Join(parts, ", ")
}
