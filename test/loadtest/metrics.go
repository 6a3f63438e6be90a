package loadtest

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Sample is one line of the Prometheus text exposition format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Scrape is one read of a metrics endpoint.
type Scrape []Sample

// ParseMetrics reads the Prometheus text exposition format (version 0.0.4,
// what controller-runtime's endpoint serves when asked plainly). Comments
// and blank lines are skipped; timestamps are ignored.
func ParseMetrics(text []byte) (Scrape, error) {
	var out Scrape
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n, line, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		rest, err := parseLabels(line[1:], s.Labels)
		if err != nil {
			return s, err
		}
		line = rest
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := parseFloat(fields[0])
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}

// parseLabels reads `k="v",k2="v2"}` and returns what follows the brace.
func parseLabels(in string, into map[string]string) (string, error) {
	for {
		in = strings.TrimLeft(in, " \t,")
		if in == "" {
			return "", fmt.Errorf("unterminated labels")
		}
		if in[0] == '}' {
			return in[1:], nil
		}
		eq := strings.IndexByte(in, '=')
		if eq <= 0 || len(in) < eq+2 || in[eq+1] != '"' {
			return "", fmt.Errorf("malformed label at %q", in)
		}
		key := strings.TrimSpace(in[:eq])
		in = in[eq+2:]
		var val strings.Builder
		closed := false
		for j := 0; j < len(in); j++ {
			ch := in[j]
			if ch == '\\' && j+1 < len(in) {
				j++
				switch in[j] {
				case 'n':
					val.WriteByte('\n')
				default: // \\ and \"
					val.WriteByte(in[j])
				}
				continue
			}
			if ch == '"' {
				in, closed = in[j+1:], true
				break
			}
			val.WriteByte(ch)
		}
		if !closed {
			return "", fmt.Errorf("unterminated label value for %s", key)
		}
		into[key] = val.String()
	}
}

func parseFloat(s string) (float64, error) {
	switch s {
	case "+Inf", "Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

func (s Sample) matches(name string, labels map[string]string) bool {
	if s.Name != name {
		return false
	}
	for k, v := range labels {
		if s.Labels[k] != v {
			return false
		}
	}
	return true
}

// Value sums the samples named name whose labels include labels; ok is false
// when there is none.
func (sc Scrape) Value(name string, labels map[string]string) (v float64, ok bool) {
	for _, s := range sc {
		if s.matches(name, labels) {
			v, ok = v+s.Value, true
		}
	}
	return v, ok
}

// Bucket is one cumulative histogram bucket: Count observations were at most
// UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Histogram is a classic Prometheus histogram, its buckets sorted by upper
// bound and ending with +Inf.
type Histogram struct {
	Buckets []Bucket
	Count   float64
	Sum     float64
}

// Histogram gathers the histogram family name (its _bucket, _count and _sum
// samples) over every series whose labels include labels, adding up series
// bucket by bucket (as sum by (le) does).
func (sc Scrape) Histogram(name string, labels map[string]string) (Histogram, bool) {
	byLE := map[float64]float64{}
	var h Histogram
	found := false
	for _, s := range sc {
		switch {
		case s.matches(name+"_bucket", labels):
			le, err := parseFloat(s.Labels["le"])
			if err != nil {
				continue
			}
			byLE[le] += s.Value
			found = true
		case s.matches(name+"_count", labels):
			h.Count += s.Value
		case s.matches(name+"_sum", labels):
			h.Sum += s.Value
		}
	}
	for le, c := range byLE {
		h.Buckets = append(h.Buckets, Bucket{UpperBound: le, Count: c})
	}
	sort.Slice(h.Buckets, func(i, j int) bool { return h.Buckets[i].UpperBound < h.Buckets[j].UpperBound })
	return h, found
}

// Sub is the histogram of the observations made between prev and h (two
// scrapes of the same counters, prev first). Buckets missing from prev count
// as zero there.
func (h Histogram) Sub(prev Histogram) Histogram {
	old := map[float64]float64{}
	for _, b := range prev.Buckets {
		old[b.UpperBound] = b.Count
	}
	out := Histogram{Count: h.Count - prev.Count, Sum: h.Sum - prev.Sum}
	for _, b := range h.Buckets {
		out.Buckets = append(out.Buckets, Bucket{UpperBound: b.UpperBound, Count: b.Count - old[b.UpperBound]})
	}
	return out
}

// Quantile estimates the q-quantile (0 <= q <= 1) as PromQL's
// histogram_quantile does: find the bucket holding the rank q*total and
// interpolate linearly inside it, the first bucket starting at 0; a rank in
// the +Inf bucket returns the highest finite bound. NaN when the histogram
// has no observations or no finite bucket.
func (h Histogram) Quantile(q float64) float64 {
	b := h.Buckets
	if len(b) < 2 || !math.IsInf(b[len(b)-1].UpperBound, 1) || q < 0 || q > 1 {
		return math.NaN()
	}
	total := b[len(b)-1].Count
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	i := sort.Search(len(b), func(i int) bool { return b[i].Count >= rank })
	if i >= len(b)-1 {
		return b[len(b)-2].UpperBound
	}
	if i == 0 && b[0].UpperBound <= 0 {
		return b[0].UpperBound
	}
	lower, prev := 0.0, 0.0
	if i > 0 {
		lower, prev = b[i-1].UpperBound, b[i-1].Count
	}
	in := b[i].Count - prev
	if in <= 0 {
		return b[i].UpperBound
	}
	return lower + (b[i].UpperBound-lower)*(rank-prev)/in
}
