package controllers

import "strings"

// Text helpers for the messages the reconciler writes into status,
// conditions and Events.

// clipTo bounds text to n bytes, the status field's limit, marking the cut.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// capitalize makes an error message a sentence.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
