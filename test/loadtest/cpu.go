package loadtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat (100 on every Linux this runs on).
const clockTick = 10 * time.Millisecond

// ProcCPU is the CPU time (user + system) a process has used so far.
func ProcCPU(pid int) (time.Duration, error) {
	own, _, err := procTimes(pid)
	return own, err
}

// procTimes reads a process's own CPU time (utime + stime) and that of
// its children it has waited for (cutime + cstime: the whole lives of
// children that ended and were reaped).
func procTimes(pid int) (own, reaped time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name is in parentheses and may hold spaces: the fields
	// that follow are counted from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state), so utime (14), stime (15), cutime (16)
	// and cstime (17) are f[11] to f[14].
	var t [4]time.Duration
	for k, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, err
		}
		t[k] = time.Duration(n) * clockTick
	}
	return t[0] + t[1], t[2] + t[3], nil
}

// TreeCPU is the CPU time a process tree has used so far: the process
// itself, the children it has reaped (their whole lives), and, recursively,
// its children alive now. A server that forks a process per connection or
// task (PostgreSQL's postmaster: backends, autovacuum workers, the
// checkpointer) is measured whole this way by two readings, whatever
// children came and went between them: a child alive at the first reading
// and reaped by the second is counted in the live sum, then in the
// parent's reaped time, so the difference is what it used in between.
func TreeCPU(pid int) (time.Duration, error) {
	own, reaped, err := procTimes(pid)
	if err != nil {
		return 0, err
	}
	total := own + reaped
	for _, child := range childPids(pid) {
		// A child that ended since the listing is in reaped (or will be):
		// skipping it loses nothing the next reading will not count.
		if d, err := TreeCPU(child); err == nil {
			total += d
		}
	}
	return total, nil
}

// CPUSample is the CPU time used so far by each process of a measurement:
// this process (the harness: creates, watches, the bare client), the
// control plane's kube-apiserver and etcd (children of this process), and
// the manager when there is one.
type CPUSample map[string]time.Duration

// ControlPlane is the sample's kube-apiserver and etcd CPU together: what
// the operator's API writes cost the cluster.
func (s CPUSample) ControlPlane() time.Duration {
	return s["kube-apiserver"] + s["etcd"]
}

// DatabaseCPU is the CPUSample key of a database server's process tree
// (Batch.DatabasePID).
const DatabaseCPU = "database"

// CPUNow samples the harness, its kube-apiserver and etcd children, and
// the managers given.
func CPUNow(managers ...*Manager) CPUSample {
	s := CPUSample{}
	if d, err := ProcCPU(os.Getpid()); err == nil {
		s["harness"] = d
	}
	for pid, name := range controlPlaneChildren() {
		if d, err := ProcCPU(pid); err == nil {
			s[name] += d
		}
	}
	for _, m := range managers {
		if m == nil {
			continue
		}
		if d, err := ProcCPU(m.Pid()); err == nil {
			s["manager"] += d
		}
	}
	return s
}

// Sub is the CPU used between prev and s.
func (s CPUSample) Sub(prev CPUSample) CPUSample {
	out := CPUSample{}
	for k, v := range s {
		out[k] = v - prev[k]
	}
	return out
}

// PerRun formats each process's CPU milliseconds per run of n.
func (s CPUSample) PerRun(n int) string {
	var parts []string
	for _, k := range []string{"kube-apiserver", "etcd", "manager", DatabaseCPU, "harness"} {
		if d, ok := s[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, float64(d.Microseconds())/1000/float64(n)))
		}
	}
	return strings.Join(parts, ", ") + " ms/run"
}

// Total is the CPU all sampled processes used.
func (s CPUSample) Total() time.Duration {
	var t time.Duration
	for _, v := range s {
		t += v
	}
	return t
}

// controlPlaneChildren names this process's kube-apiserver and etcd
// children by pid.
func controlPlaneChildren() map[int]string {
	out := map[int]string{}
	for _, pid := range childPids(os.Getpid()) {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		if name := strings.TrimSpace(string(comm)); name == "kube-apiserver" || name == "etcd" {
			out[pid] = name
		}
	}
	return out
}

// APIServerMemory reads the VmRSS and VmHWM of this process's
// kube-apiserver child.
func APIServerMemory() (Memory, error) {
	for pid, name := range controlPlaneChildren() {
		if name == "kube-apiserver" {
			return ProcMemory(pid)
		}
	}
	return Memory{}, fmt.Errorf("no kube-apiserver child of process %d", os.Getpid())
}

// childPids lists the processes whose parent is pid.
func childPids(pid int) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if n, err := strconv.Atoi(filepath.Base(filepath.Dir(d))); err == nil {
			out = append(out, n)
		}
	}
	return out
}
