//go:build !unix

package main

// takeTerminal has nothing to do where there are no process groups.
func takeTerminal() (giveBack func()) { return func() {} }
