//go:build unix

package main

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// takeTerminal moves run-local into a process group of its own and makes
// that group the terminal's foreground group, so a Ctrl-C reaches run-local
// and the control plane it starts, but not the `make` that started it. GNU
// make, on a SIGINT of its own, waits for its child and then kills itself
// with the same signal, whatever the child's exit status, so `make run`
// could not end with status 0 on Ctrl-C however cleanly run-local stopped.
// This is what a shell's job control does for a foreground job. It does
// nothing when stdin is not a terminal, or when run-local is not in the
// terminal's foreground group (a background job must not take it). The
// returned function gives the terminal back to the group that had it.
func takeTerminal() (giveBack func()) {
	noop := func() {}
	fd := int(os.Stdin.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || fg != unix.Getpgrp() {
		return noop
	}
	if err := unix.Setpgid(0, 0); err != nil {
		return noop
	}
	// A background group asking for the terminal is sent SIGTTOU, which
	// would stop run-local: ignored while it asks.
	setForeground := func(pgid int) error {
		signal.Ignore(syscall.SIGTTOU)
		defer signal.Reset(syscall.SIGTTOU)
		return unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgid)
	}
	if err := setForeground(unix.Getpid()); err != nil {
		_ = unix.Setpgid(0, fg)
		return noop
	}
	return func() { _ = setForeground(fg) }
}
