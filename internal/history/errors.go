package history

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// isUnavailable: the database cannot answer now (down, refusing, slower
// than an operation's bound).
func isUnavailable(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// labelString and fieldString are selectors' canonical text ("" for none).
func labelString(s labels.Selector) string {
	if s == nil {
		return ""
	}
	return s.String()
}

func fieldString(s fields.Selector) string {
	if s == nil {
		return ""
	}
	return s.String()
}
