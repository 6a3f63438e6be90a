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
	return RequestsOf(sc), nil
}

// RequestsOf counts the requests in one scrape of the API server.
func RequestsOf(sc Scrape) Requests {
	out := Requests{}
	for _, s := range sc {
		if s.Name != "apiserver_request_total" {
			continue
		}
		key := requestKey(s)
		if code := s.Labels["code"]; code != "" && !strings.HasPrefix(code, "2") {
			key += " " + code
		}
		out[key] += s.Value
	}
	return out
}

// requestKey is "VERB resource[/subresource]".
func requestKey(s Sample) string {
	res := s.Labels["resource"]
	if sub := s.Labels["subresource"]; sub != "" {
		res += "/" + sub
	}
	return s.Labels["verb"] + " " + res
}

// ServerTimes is where the API server's own time answering requests went:
// the sums and counts of its request-duration histogram by request (the
// same keys as Requests, errors included), and of its priority-and-fairness
// queue wait by priority level. A client that waits long on requests the
// server answered fast waits on something else (its connection, its own
// CPU); a long queue wait is the server holding requests back.
type ServerTimes struct {
	Request, QueueWait map[string]SumCount
}

// SumCount is a histogram's _sum and _count.
type SumCount struct{ Sum, Count float64 }

// Mean is Sum / Count (0 when empty).
func (s SumCount) Mean() float64 {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / s.Count
}

// ServerTimesOf reads the API server's request and queue-wait times from
// one scrape.
func ServerTimesOf(sc Scrape) ServerTimes {
	t := ServerTimes{Request: map[string]SumCount{}, QueueWait: map[string]SumCount{}}
	add := func(m map[string]SumCount, key string, s Sample, isSum bool) {
		v := m[key]
		if isSum {
			v.Sum += s.Value
		} else {
			v.Count += s.Value
		}
		m[key] = v
	}
	for _, s := range sc {
		switch s.Name {
		case "apiserver_request_duration_seconds_sum", "apiserver_request_duration_seconds_count":
			add(t.Request, requestKey(s), s, strings.HasSuffix(s.Name, "_sum"))
		case "apiserver_flowcontrol_request_wait_duration_seconds_sum", "apiserver_flowcontrol_request_wait_duration_seconds_count":
			add(t.QueueWait, s.Labels["priority_level"], s, strings.HasSuffix(s.Name, "_sum"))
		}
	}
	return t
}

// Sub is the times of the requests answered between prev and t.
func (t ServerTimes) Sub(prev ServerTimes) ServerTimes {
	sub := func(now, before map[string]SumCount) map[string]SumCount {
		out := map[string]SumCount{}
		for k, v := range now {
			if d := (SumCount{v.Sum - before[k].Sum, v.Count - before[k].Count}); d.Count > 0 {
				out[k] = d
			}
		}
		return out
	}
	return ServerTimes{Request: sub(t.Request, prev.Request), QueueWait: sub(t.QueueWait, prev.QueueWait)}
}

// Summary gives the mean time of each request kind answered at least
// minCount times, slowest first, then each priority level's mean queue
// wait.
func (t ServerTimes) Summary(minCount float64) string {
	var parts []string
	for _, k := range slowestFirst(t.Request, minCount) {
		parts = append(parts, fmt.Sprintf("%s %.1fms", k, 1000*t.Request[k].Mean()))
	}
	out := "answered in (mean) " + strings.Join(parts, ", ")
	var waits []string
	for _, k := range slowestFirst(t.QueueWait, 1) {
		waits = append(waits, fmt.Sprintf("%s %.1fms over %.0f", k, 1000*t.QueueWait[k].Mean(), t.QueueWait[k].Count))
	}
	if len(waits) > 0 {
		out += "; queued by priority and fairness (mean) " + strings.Join(waits, ", ")
	}
	return out
}

// slowestFirst is m's keys with at least minCount requests, the slowest
// on the mean first.
func slowestFirst(m map[string]SumCount, minCount float64) []string {
	var keys []string
	for k, v := range m {
		if v.Count >= minCount {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := m[keys[i]].Mean(), m[keys[j]].Mean()
		return a > b || (a == b && keys[i] < keys[j])
	})
	return keys
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
