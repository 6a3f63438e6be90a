package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// AdminKubeconfig writes a kubeconfig for the real kubectl (a client
// certificate in group system:masters, as a person's kubectl has) into the
// cluster's directory, once, and returns its path.
func (c *Cluster) AdminKubeconfig() (string, error) {
	c.adminOnce.Do(func() { c.admin, c.adminErr = c.Env.Kubeconfig(c.dir) })
	return c.admin, c.adminErr
}

// KubectlCreate is a Batch.Create that creates the runs with the real
// kubectl, the way people and GitOps tools create them: streams `kubectl
// create -f -` processes at once, each given its share of the runs (run i
// goes to stream i mod streams) as one multi-document YAML on stdin, which
// kubectl creates one object after the other with its default client
// settings. A run's create time is when its stream printed
// "agentrun.agentrun.dev/<name> created". KubectlCreate itself runs one
// `kubectl get agentruns` to fill the discovery cache the streams share,
// as a person's kubectl has it warm, before anything is timed.
func (c *Cluster) KubectlCreate(ctx context.Context, streams int) (func(ctx context.Context, b Batch) (map[string]time.Time, error), error) {
	kubeconfig, err := c.AdminKubeconfig()
	if err != nil {
		return nil, err
	}
	cache := filepath.Join(c.dir, "kubectl-cache")
	if out, err := exec.CommandContext(ctx, testenv.KubectlPath(), "--kubeconfig", kubeconfig, "--cache-dir", cache,
		"get", "agentruns", "-n", "default", "-o", "name").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("kubectl get agentruns: %w: %s", err, out)
	}
	return func(ctx context.Context, b Batch) (map[string]time.Time, error) {
		var mu sync.Mutex
		at := make(map[string]time.Time, b.N)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errs := make([]error, streams)
		var wg sync.WaitGroup
		for s := range streams {
			var manifest bytes.Buffer
			for i := s; i < b.N; i += streams {
				writeRunYAML(&manifest, b.Namespace, b.Agent, RunName(b.Prefix, i))
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[s] = kubectlCreateStream(ctx, kubeconfig, cache, manifest.Bytes(), func(name string, t time.Time) {
					mu.Lock()
					at[name] = t
					mu.Unlock()
				})
				if errs[s] != nil {
					cancel() // one stream failed: the batch has
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if len(at) != b.N {
			return nil, fmt.Errorf("kubectl reported %d of %d runs created", len(at), b.N)
		}
		return at, nil
	}, nil
}

// writeRunYAML appends one AgentRun manifest to buf.
func writeRunYAML(buf *bytes.Buffer, ns, agent, name string) {
	fmt.Fprintf(buf, "---\napiVersion: %s\nkind: AgentRun\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  agent: %s\n  task: %q\n",
		arv1.GroupVersion.String(), name, ns, agent, RunTask(name))
}

// kubectlCreateStream runs one `kubectl create -f -` with manifest on
// stdin and calls created for each object as kubectl reports it.
func kubectlCreateStream(ctx context.Context, kubeconfig, cache string, manifest []byte, created func(string, time.Time)) error {
	cmd := exec.CommandContext(ctx, testenv.KubectlPath(), "--kubeconfig", kubeconfig, "--cache-dir", cache, "create", "-f", "-")
	cmd.Stdin = bytes.NewReader(manifest)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting kubectl: %w", err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		// "agentrun.agentrun.dev/r-00000 created"
		line := strings.TrimSpace(sc.Text())
		obj, ok := strings.CutSuffix(line, " created")
		if i := strings.LastIndexByte(obj, '/'); ok && i >= 0 {
			created(obj[i+1:], time.Now())
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("kubectl create -f -: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
