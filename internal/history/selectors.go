package history

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// Record fields a field selector may name. The finish time takes a bound
// on either side (a field selector has no < or >): status.finishedAfter
// and status.finishedBefore, each an RFC 3339 time, a date (YYYY-MM-DD,
// UTC midnight) or an age (30m, 12h, 7d: that long before now).
const (
	fieldName           = "metadata.name"
	fieldNamespace      = "metadata.namespace"
	fieldPhase          = "status.phase"
	fieldAgent          = "spec.agent"
	fieldFinishedAfter  = "status.finishedAfter"
	fieldFinishedBefore = "status.finishedBefore"
)

// RecordFields are the fields agentrunrecords may be selected by.
var RecordFields = []string{fieldName, fieldNamespace, fieldAgent, fieldPhase, fieldFinishedAfter, fieldFinishedBefore}

// recordQuery turns a list's namespace and selectors into the archive's
// query; a field or operator it does not support is a 400 naming what is.
func recordQuery(namespace string, ls labels.Selector, fs fields.Selector, now time.Time) (sqlstore.RecordQuery, bool, error) {
	q := sqlstore.RecordQuery{Namespace: namespace}
	empty := false
	if fs != nil {
		for _, r := range fs.Requirements() {
			not, err := fieldOperator(r)
			if err != nil {
				return q, false, err
			}
			t := sqlstore.FieldTerm{Value: r.Value, Not: not}
			switch r.Field {
			case fieldName:
				q.Name = append(q.Name, t)
			case fieldNamespace:
				switch {
				case not && r.Value == namespace:
					empty = true
				case !not && namespace != "" && r.Value != namespace:
					empty = true
				case !not:
					q.Namespace = r.Value
				}
			case fieldPhase:
				q.Phase = append(q.Phase, t)
			case fieldAgent:
				q.Agent = append(q.Agent, t)
			case fieldFinishedAfter, fieldFinishedBefore:
				if not {
					return q, false, apierrors.NewBadRequest(fmt.Sprintf("field selector %s takes = only (a bound on the finish time)", r.Field))
				}
				at, err := parseTime(r.Field, r.Value, now)
				if err != nil {
					return q, false, err
				}
				if r.Field == fieldFinishedAfter {
					q.FinishedAfter = at.UnixMicro()
				} else {
					q.FinishedBefore = at.UnixMicro()
				}
			default:
				return q, false, unsupportedField(r.Field, RecordFields)
			}
		}
	}
	terms, err := labelTerms(ls)
	q.Labels = terms
	return q, empty, err
}

func fieldOperator(r fields.Requirement) (not bool, err error) {
	switch r.Operator {
	case selection.Equals, selection.DoubleEquals:
		return false, nil
	case selection.NotEquals:
		return true, nil
	}
	return false, apierrors.NewBadRequest(fmt.Sprintf("field selector %s: operator %q is not supported (=, == and != are)", r.Field, r.Operator))
}

func unsupportedField(field string, supported []string) error {
	return apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %q (the supported fields are %s)", field, strings.Join(supported, ", ")))
}

// labelTerms are a label selector's requirements as the archive matches
// them. Numeric comparisons (gt, lt) are refused.
func labelTerms(ls labels.Selector) ([]sqlstore.LabelTerm, error) {
	if ls == nil || ls.Empty() {
		return nil, nil
	}
	reqs, selectable := ls.Requirements()
	if !selectable {
		return nil, apierrors.NewBadRequest("the label selector selects nothing")
	}
	out := make([]sqlstore.LabelTerm, 0, len(reqs))
	for _, r := range reqs {
		values := r.Values().List()
		sort.Strings(values)
		t := sqlstore.LabelTerm{Key: r.Key(), Values: values}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			t.Op = sqlstore.LabelIn
		case selection.NotEquals, selection.NotIn:
			t.Op = sqlstore.LabelNotIn
		case selection.Exists:
			t.Op, t.Values = sqlstore.LabelExists, nil
		case selection.DoesNotExist:
			t.Op, t.Values = sqlstore.LabelNotExists, nil
		default:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("label selector %s: operator %q is not supported (=, ==, !=, in, notin, exists and !key are)", r.Key(), r.Operator()))
		}
		out = append(out, t)
	}
	return out, nil
}

// parseTime reads a time bound: RFC 3339, a date (UTC midnight), or an
// age before now (a Go duration, or whole days as "7d").
func parseTime(field, v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, apierrors.NewBadRequest(fmt.Sprintf("field selector %s=%q: not a time (RFC 3339 like 2026-11-30T12:00:00Z, a date like 2026-11-30, or an age like 12h or 7d)", field, v))
}
