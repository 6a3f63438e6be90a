// Package tour holds the test of the README's tour: its shell blocks run as
// written, in a copy of the repository, against the local control plane
// that `make run` starts there.
package tour
