package plugin

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// The people the install's roles are for, each bound to one role only.
const (
	viewerUser   = "viewer-user"
	answererUser = "answerer-user"
	editorUser   = "editor-user"
)

// peopleRoles are the install's ClusterRoles for people, read from
// config/rbac (the chart's are the same rules: test/helmchart compares
// them), keyed by name.
func peopleRoles(t *testing.T) map[string]*rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "answerer_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]*rbacv1.ClusterRole{}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var r rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
			t.Fatalf("config/rbac/answerer_role.yaml: %v", err)
		}
		roles[r.Name] = &r
	}
	for _, want := range []string{"agentrun-viewer", "agentrun-answerer", "agentrun-editor"} {
		if roles[want] == nil {
			t.Fatalf("config/rbac/answerer_role.yaml has no ClusterRole %s", want)
		}
	}
	return roles
}

// installPeopleRoles creates the install's people roles in the API server
// (once per test binary; they are cluster-scoped) and binds each user to
// one of them in ns, the way an admin would: a RoleBinding to the
// ClusterRole.
func installPeopleRoles(t *testing.T, ns string) {
	t.Helper()
	ctx := ctxFor(t)
	for name, r := range peopleRoles(t) {
		var have rbacv1.ClusterRole
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, &have); err == nil {
			have.Rules = r.Rules
			if err := k8sClient.Update(ctx, &have); err != nil {
				t.Fatal(err)
			}
		} else if err := k8sClient.Create(ctx, r.DeepCopy()); err != nil {
			t.Fatalf("creating ClusterRole %s: %v", name, err)
		}
	}
	for user, role := range map[string]string{viewerUser: "agentrun-viewer", answererUser: "agentrun-answerer", editorUser: "agentrun-editor"} {
		if err := k8sClient.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// journalChunk writes a run's journal as the manager does: one chunk
// ConfigMap with the run's labels, entries keyed by seq.
func journalChunk(t *testing.T, run *arv1.AgentRun, entries ...string) {
	t.Helper()
	data := map[string]string{}
	for i, e := range entries {
		data[fmt.Sprintf("%06d", i)] = e
	}
	if err := k8sClient.Create(ctxFor(t), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: run.Namespace, Name: configmaps.ChunkName(run, 0), Labels: map[string]string{
			configmaps.LabelRunUID: string(run.UID), arv1.LabelComponent: configmaps.Component, configmaps.LabelChunk: "0"}},
		Data: data,
	}); err != nil {
		t.Fatal(err)
	}
}

// TestPeopleRolesDriveThePlugin: a user bound only to the install's viewer
// role can run every read command of the plugin through the real kubectl
// (ps, -o wide, --watch, describe, status, output, regions, transcript and
// transcript -f, completion, check); one bound only to the answerer role can
// do the same and answer every kind of wait; one bound only to the editor
// role can read and steer. Each is refused what its role does not grant:
// the viewer and the answerer cannot edit a run, the viewer and the editor
// cannot answer, and none can read a Secret. Every command the plugin has
// is driven for every role, so a new command fails this test until it is.
func TestPeopleRolesDriveThePlugin(t *testing.T) {
	controlPlane(t)
	ns := newNamespace(t)
	ctx := ctxFor(t)
	installPeopleRoles(t, ns)

	asks := createRun(t, ns, "asks", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitCheckpoint.DeepCopy()})
	journalChunk(t, asks, `{"seq":0,"kind":"RegionWritten","at":"2026-03-01T11:00:00Z","region":"draft","content":"# Draft\n","by":"model"}`)
	createRun(t, ns, "tool", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitTool.DeepCopy()})
	createRun(t, ns, "question", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitQuestion.DeepCopy()})
	createRun(t, ns, "write", nil, arv1.AgentRunStatus{Phase: arv1.PhaseWaitingInput, WaitingOn: waitWrite.DeepCopy()})
	createRun(t, ns, "steer", nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
	done := createRun(t, ns, "done", nil, arv1.AgentRunStatus{Phase: arv1.PhaseComplete,
		FinalOutput: &arv1.FinalOutputDescriptor{Format: arv1.OutputFormatMarkdown, Bytes: 8, ObjectName: "done-output"}})
	journalChunk(t, done, `{"seq":0,"kind":"ModelCallRequested","at":"2026-03-01T11:00:00Z","stage":"write","provider":"p","model":"m","requestHash":"h0"}`)
	for _, obj := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "done-output"}, Data: map[string]string{"output": "# Report"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "provider-key"}, StringData: map[string]string{"api-key": "sk-never-shown"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agentrun-providers"}, Data: map[string]string{"providers.toml": `
[providers.keyed]
type = "scripted"
models = ["scripted-1"]
api_key_secret = { name = "provider-key", key = "api-key" }
`}},
	} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	// covered is every command the test drove; compared with the plugin's
	// own list at the end.
	covered := map[string]bool{}
	as := func(user string, args ...string) []string { return append(args, "-n", ns, "--as", user) }
	allowed := func(user, want string, args ...string) {
		t.Helper()
		covered[args[0]] = true
		stdout, stderr, code := kubectlPlugin(t, as(user, args...)...)
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("%s: kubectl agentrun %s: exit %d, stdout %q lacks %q; stderr %q", user, strings.Join(args, " "), code, stdout, want, stderr)
		}
		if strings.Contains(stdout+stderr, "sk-never-shown") {
			t.Errorf("%s: kubectl agentrun %s printed a Secret's value", user, strings.Join(args, " "))
		}
	}
	refused := func(user, forbidden string, args ...string) {
		t.Helper()
		covered[args[0]] = true
		stdout, stderr, code := kubectlPlugin(t, as(user, args...)...)
		want := `User "` + user + `" cannot ` + forbidden
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("%s: kubectl agentrun %s: exit %d, stdout %q, stderr %q; want exit 1 and %q", user, strings.Join(args, " "), code, stdout, stderr, want)
		}
	}

	for _, user := range []string{viewerUser, answererUser, editorUser} {
		// Every read command.
		allowed(user, "asks", "ps")
		allowed(user, "WaitingInput", "ps", "-o", "wide")
		allowed(user, `"approve-deploy"`, "ps", "-o", "json")
		allowed(user, "Deploy?", "describe", "asks")
		allowed(user, `"state"`, "status", "asks", "-o", "json")
		allowed(user, "# Report", "output", "done")
		allowed(user, "draft", "regions", "asks")
		allowed(user, "# Draft\n", "regions", "asks", "draft")
		allowed(user, "#0 ", "transcript", "done")
		allowed(user, "__start_kubectl-agentrun", "completion", "bash")
		// history and cost read history.agentrun.dev, which these roles do
		// not grant (view, edit and admin do: internal/history tests them).
		refused(user, `list resource "agentrunrecords" in API group "history.agentrun.dev"`, "history")
		refused(user, `list resource "agentruncostreports" in API group "history.agentrun.dev"`, "cost")
		covered["__complete"] = true
		if out := mustPlugin(t, "__complete", "describe", "-n", ns, "--as", user, ""); !strings.HasPrefix(out, "asks\t") {
			t.Errorf("%s: completion of run names printed %q", user, out)
		}

		// check says what it may not read instead of failing: the
		// cluster-wide objects and the Secret are beyond these roles.
		covered["check"] = true
		if stdout, stderr, code := kubectlPlugin(t, as(user, "check")...); code != 0 ||
			!strings.Contains(stdout, "OK    CRD agentruns.agentrun.dev: v1alpha1 served (seen through discovery") ||
			!strings.Contains(stdout, "OK    provider ConfigMap "+ns+"/agentrun-providers: providers keyed") ||
			!strings.Contains(stdout, "SKIP  Secret "+ns+`/provider-key (provider "keyed"'s API key): cannot check, secrets "provider-key" is forbidden: User "`+user+`" cannot get resource "secrets"`) ||
			!strings.Contains(stdout, "SKIP  manager Deployment in agentrun-system: cannot check") ||
			strings.Contains(stdout, "FIX") || strings.Contains(stdout, "sk-never-shown") {
			t.Errorf("%s: check -n %s: exit %d, stderr %q, stdout:\n%s", user, ns, code, stderr, stdout)
		}

		covered["ps"] = true
		lines, stop := streamPlugin(t, as(user, "ps", "--watch")...)
		awaitLine(t, lines, 30*time.Second, user+"'s ps --watch footer", func(l string) bool { return strings.HasSuffix(l, "need an answer") })
		if code, stderr := stop(); code != 0 {
			t.Errorf("%s: ps --watch: exit %d, %q", user, code, stderr)
		}

		// The console serves with the role's own credentials (what it
		// shows each role is test/consolebrowser's to test).
		covered["console"] = true
		lines, stop = streamPlugin(t, as(user, "console")...)
		awaitLine(t, lines, 30*time.Second, user+"'s console URL", func(l string) bool {
			return strings.HasPrefix(l, "The web console is at http://127.0.0.1:") && strings.Contains(l, "/?key=")
		})
		if code, stderr := stop(); code != 0 {
			t.Errorf("%s: console: exit %d, %q", user, code, stderr)
		}

		// transcript -f watches the journal and the run until the run
		// ends, and ends by itself with exit 0.
		live := createRun(t, ns, "live-"+user, nil, arv1.AgentRunStatus{Phase: arv1.PhaseRunning})
		journalChunk(t, live, `{"seq":0,"kind":"ModelCallRequested","at":"2026-03-01T11:00:00Z","stage":"write","provider":"p","model":"m","requestHash":"h0"}`)
		lines, stop = streamPlugin(t, as(user, "transcript", "-f", live.Name)...)
		awaitLine(t, lines, 30*time.Second, user+"'s transcript -f line", func(l string) bool { return strings.HasPrefix(l, "#0 ") })
		live.Status.Phase = arv1.PhaseComplete
		if err := k8sClient.Status().Update(ctx, live); err != nil {
			t.Fatal(err)
		}
		awaitEnd(t, lines, 30*time.Second, user+"'s transcript -f")
		if code, stderr := stop(); code != 0 || !strings.Contains(stderr, "ended: Complete") {
			t.Errorf("%s: transcript -f: exit %d, stderr %q", user, code, stderr)
		}

		// Steering edits the run: the editor only.
		for _, cmd := range []string{"pause", "resume", "cancel"} {
			if user == editorUser {
				allowed(user, "agentrun.agentrun.dev/steer", cmd, "steer")
			} else {
				refused(user, `patch resource "agentruns"`, cmd, "steer")
			}
		}

		// Rerunning and forking create runs: the editor only (a fork
		// with --blueprint also creates a ConfigMap, which no role here
		// grants).
		for _, args := range [][]string{{"rerun", "steer"}, {"fork", "done", "--from-entry", "1"}} {
			if user == editorUser {
				allowed(user, "created (", args...)
			} else {
				refused(user, `create resource "agentruns"`, args...)
			}
		}

		// Answering every kind of wait: the answerer only.
		for _, args := range [][]string{
			{"approve", "asks"}, {"deny", "tool", "--reason", "not now"},
			{"answer", "question", "staging"}, {"resolve", "write", "--retry"},
		} {
			if user == answererUser {
				allowed(user, "created: ", args...)
			} else {
				refused(user, `create resource "agentrunanswers"`, args...)
			}
		}

		// Nobody reads a Secret, nor edits a run beyond the editor.
		if out, err := testenv.Kubectl(kubeconfig, "get", "secret", "provider-key", "-n", ns, "--as", user); err == nil ||
			!strings.Contains(out, `cannot get resource "secrets"`) {
			t.Errorf("%s read a Secret: %v %s", user, err, out)
		}
		for _, c := range []struct {
			verb, resource string
			yes            bool
			sub            string
		}{
			{"get", "secrets", false, ""}, {"list", "secrets", false, ""}, {"watch", "secrets", false, ""},
			{"create", "configmaps", false, ""}, {"delete", "configmaps", false, ""},
			{"update", "agentruns", user == editorUser, ""}, {"delete", "agentruns", user == editorUser, ""},
			{"patch", "agentruns", false, "status"}, {"update", "agentrunanswers", false, ""}, {"delete", "agentrunanswers", false, ""},
			{"create", "agentrunanswers", user == answererUser, ""},
			// Schedules: the viewer reads them, the editor writes them.
			{"get", "agentrunschedules", user != answererUser, ""}, {"list", "agentrunschedules", user != answererUser, ""},
			{"create", "agentrunschedules", user == editorUser, ""}, {"delete", "agentrunschedules", user == editorUser, ""},
			{"patch", "agentrunschedules", false, "status"},
		} {
			out, _ := testenv.Kubectl(kubeconfig, "auth", "can-i", c.verb, c.resource, "--subresource="+c.sub, "-n", ns, "--as", user)
			if got := strings.TrimSpace(out) == "yes"; got != c.yes {
				t.Errorf("%s: can-i %s %s (subresource %q) = %q, want yes=%v", user, c.verb, c.resource, c.sub, strings.TrimSpace(out), c.yes)
			}
		}
	}

	// The answerer's answers are in their own name.
	var answers arv1.AgentRunAnswerList
	if err := k8sClient.List(ctx, &answers, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(answers.Items) != 4 {
		t.Errorf("%d answers in %s, want the answerer's 4", len(answers.Items), ns)
	}
	for _, a := range answers.Items {
		if a.Spec.By != answererUser {
			t.Errorf("answer %s by %q", a.Name, a.Spec.By)
		}
	}

	for _, c := range newApp(io.Discard, io.Discard).rootCommand().Commands() {
		if name := c.Name(); name != "help" && !c.Hidden && !covered[name] {
			t.Errorf("command %q is not driven for each role", name)
		}
	}
}

// awaitEnd waits for the plugin to end by itself (its output to close).
func awaitEnd(t *testing.T, lines <-chan string, within time.Duration, what string) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case _, open := <-lines:
			if !open {
				return
			}
		case <-deadline:
			t.Fatalf("%s did not end within %s", what, within)
		}
	}
}

// TestPeopleRolesReadNoMoreThanView: every grant of the people's roles on
// core resources is one the built-in view role already holds (its
// system:aggregate-to-view part, as this API server bootstraps it): the
// ConfigMaps the plugin reads journals and outputs from, read-only, and
// never Secrets or anything the roles could write.
func TestPeopleRolesReadNoMoreThanView(t *testing.T) {
	controlPlane(t)
	var view rbacv1.ClusterRole
	if err := k8sClient.Get(ctxFor(t), client.ObjectKey{Name: "system:aggregate-to-view"}, &view); err != nil {
		t.Fatal(err)
	}
	viewGrants := func(resource, verb string) bool {
		for _, r := range view.Rules {
			if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for name, role := range peopleRoles(t) {
		for _, r := range role.Rules {
			for _, g := range r.APIGroups {
				if g != "" && g != arv1.GroupVersion.Group {
					t.Errorf("%s grants on API group %q", name, g)
				}
				if g != "" {
					continue
				}
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if !viewGrants(res, v) {
							t.Errorf("%s grants %s %s, which the built-in view role does not", name, v, res)
						}
					}
				}
			}
			if slices.Contains(r.Resources, "secrets") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") {
				t.Errorf("%s grants %v on %v", name, r.Verbs, r.Resources)
			}
		}
	}
}
