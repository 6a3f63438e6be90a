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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: the fields
	// that follow are counted from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state), so utime (14) and stime (15) are f[11], f[12].
	var total time.Duration
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		total += time.Duration(n) * clockTick
	}
	return total, nil
}

// CPUSample is the CPU time used so far by each process of a measurement:
// this process (the harness: creates, watches, the bare client), the
// control plane's kube-apiserver and etcd (children of this process), and
// the manager when there is one.
type CPUSample map[string]time.Duration

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
	for _, k := range []string{"kube-apiserver", "etcd", "manager", "harness"} {
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
