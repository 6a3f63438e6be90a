package helmchart_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// pgDSN is a database DSN as the chart's values give it: no password.
const pgDSN = "postgres://agentrun@db.example:5432/agentrun?sslmode=verify-full&application_name=agentrun"

// TestStoreValuesRender: without a store the manager gets no store flag,
// variable or volume (ConfigMaps, as before). With store.dsn the DSN is
// its --store with the pool bound and the archive retention; the password
// is PGPASSWORD taken from store.existingSecret's key, never a literal;
// store.caSecret's key is mounted read-only and named by PGSSLROOTCERT with
// PGSSLMODE=verify-full; store.dsnSecret gives the whole DSN as
// AGENTRUN_STORE from the Secret instead of a flag.
func TestStoreValuesRender(t *testing.T) {
	c := managerContainer(t, nil)
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--store") || strings.HasPrefix(a, "--archive-retention") {
			t.Errorf("the default install passes %s; want the manager's default store (ConfigMaps)", a)
		}
	}
	if e := envVar(c, "PGPASSWORD"); e != nil || envVar(c, "AGENTRUN_STORE") != nil || len(c.VolumeMounts) != 0 {
		t.Errorf("the default install sets store variables or mounts: env %v mounts %v", c.Env, c.VolumeMounts)
	}

	d := renderDeployment(t, mustYAML(t, `store: {dsn: "`+pgDSN+`", existingSecret: agentrun-db, passwordKey: pw, caSecret: agentrun-db-ca, caKey: root.pem, maxConns: 8, archiveRetention: 720h}`))
	c = d.Spec.Template.Spec.Containers[0]
	for _, a := range []string{"--store=" + pgDSN, "--store-max-conns=8", "--archive-retention=720h"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	checkSecretEnv(t, c, "PGPASSWORD", "agentrun-db", "pw")
	if e := envVar(c, "AGENTRUN_STORE"); e != nil {
		t.Errorf("AGENTRUN_STORE is set (%+v) though store.dsn gives the DSN", e)
	}
	ca := envVar(c, "PGSSLROOTCERT")
	mode := envVar(c, "PGSSLMODE")
	if ca == nil || mode == nil || mode.Value != "verify-full" {
		t.Fatalf("env %v: want PGSSLROOTCERT and PGSSLMODE=verify-full with a CA Secret", c.Env)
	}
	checkCAMount(t, d, ca.Value, "agentrun-db-ca", "root.pem")

	c = managerContainer(t, mustYAML(t, `store: {dsnSecret: agentrun-dsn, existingSecret: agentrun-db}`))
	checkSecretEnv(t, c, "AGENTRUN_STORE", "agentrun-dsn", "dsn")
	checkSecretEnv(t, c, "PGPASSWORD", "agentrun-db", "password")
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--store=") {
			t.Errorf("args pass %s though the DSN comes from a Secret", a)
		}
	}
	if !slices.Contains(c.Args, "--store-max-conns=16") || !slices.Contains(c.Args, "--archive-retention=2160h") {
		t.Errorf("args %v lack the default pool bound and retention", c.Args)
	}
	if envVar(c, "PGSSLROOTCERT") != nil || len(c.VolumeMounts) != 0 {
		t.Errorf("no CA Secret, yet env %v mounts %v", c.Env, c.VolumeMounts)
	}

	// The user's env comes after the store's, so it may override them.
	c = managerContainer(t, mustYAML(t, `{store: {dsn: "`+pgDSN+`", existingSecret: agentrun-db}, env: [{name: PGCONNECT_TIMEOUT, value: "5"}]}`))
	if n := len(c.Env); n < 2 || c.Env[n-1].Name != "PGCONNECT_TIMEOUT" || c.Env[n-2].Name != "PGPASSWORD" {
		t.Errorf("env %v: want the store's variables, then env's", c.Env)
	}
}

// TestStoreRendersNoPassword: with every store value set, no rendered
// object carries a credential: every variable of every container that may
// hold one comes from a Secret, no argument holds a password, and the
// chart renders no Secret and no ConfigMap holding the DSN.
func TestStoreRendersNoPassword(t *testing.T) {
	vals := mustYAML(t, `{store: {dsn: "`+pgDSN+`", existingSecret: agentrun-db, caSecret: agentrun-db-ca}, console: {enabled: true}, a2a: {enabled: true}}`)
	objs := renderChart(t, vals).objs
	for _, u := range objs {
		switch u.GetKind() {
		case "Secret":
			if !strings.HasSuffix(u.GetName(), "-metrics-scraper-token") {
				t.Errorf("the chart renders Secret %s", u.GetName())
			}
		case "ConfigMap":
			data, _ := yaml.Marshal(u.Object)
			if strings.Contains(string(data), "db.example") || strings.Contains(strings.ToLower(string(data)), "password") {
				t.Errorf("ConfigMap %s holds the store's DSN or a password:\n%s", u.GetName(), data)
			}
		case "Deployment":
			d := convert[appsv1.Deployment](t, u)
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, e := range c.Env {
					if (strings.HasPrefix(e.Name, "PG") || e.Name == "AGENTRUN_STORE") && e.Name != "PGSSLROOTCERT" && e.Name != "PGSSLMODE" &&
						(e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
						t.Errorf("Deployment %s container %s: %s is not taken from a Secret: %+v", d.Name, c.Name, e.Name, e)
					}
				}
				for _, a := range c.Args {
					if strings.Contains(strings.ToLower(a), "password") || strings.Contains(a, ":@") {
						t.Errorf("Deployment %s container %s passes %q", d.Name, c.Name, a)
					}
				}
			}
		}
	}
}

// TestStoreValuesRefused: a DSN holding a password (URL userinfo, a
// password parameter, libpq's password=), SQLite (one machine's file, not
// the replicas' shared database), a DSN the manager cannot read, a DSN
// given twice, Secrets without a database, and values of the wrong shape
// are refused at render time, naming the value; no message repeats the
// password.
func TestStoreValuesRefused(t *testing.T) {
	const pw = "Sentinel-Passw0rd"
	c := loadChart(t)
	for _, tc := range []struct {
		vals map[string]any
		want string
	}{
		{store(map[string]any{"dsn": "postgres://agentrun:" + pw + "@db.example:5432/agentrun"}), "store.dsn holds a password"},
		{store(map[string]any{"dsn": "postgresql://agentrun:" + pw + "@db.example/agentrun?sslmode=verify-full"}), "store.dsn holds a password"},
		{store(map[string]any{"dsn": "postgres://agentrun@db.example/agentrun?sslmode=require&password=" + pw}), "store.dsn holds a password"},
		{store(map[string]any{"dsn": "host=db.example dbname=agentrun user=agentrun password=" + pw}), "store.dsn holds a password"},
		{store(map[string]any{"dsn": "sqlite:/var/lib/agentrun/agentrun.db"}), "SQLite is make run's store"},
		{store(map[string]any{"dsn": "mysql://agentrun:" + pw + "@db.example/agentrun"}), "store.dsn is neither postgres://"},
		{store(map[string]any{"dsn": pgDSN, "dsnSecret": "agentrun-dsn"}), "store.dsn and store.dsnSecret both give the DSN"},
		{store(map[string]any{"existingSecret": "agentrun-db"}), "store.existingSecret and store.caSecret are for a database"},
		{store(map[string]any{"caSecret": "agentrun-db-ca"}), "store.existingSecret and store.caSecret are for a database"},
		{store(map[string]any{"dsn": pgDSN, "maxConns": 0}), "at '/store/maxConns'"},
		{store(map[string]any{"dsn": pgDSN, "archiveRetention": "90d"}), "at '/store/archiveRetention'"},
		{store(map[string]any{"dsn": pgDSN, "existingSecret": "Agentrun_DB"}), "at '/store/existingSecret'"},
		{store(map[string]any{"dsn": pgDSN, "password": pw}), "'password'"},
	} {
		_, err := tryRender(c, tc.vals)
		switch {
		case err == nil || !strings.Contains(err.Error(), tc.want):
			t.Errorf("store %v: %v, want an error saying %q", tc.vals["store"], err, tc.want)
		case strings.Contains(err.Error(), pw):
			t.Errorf("store %v: the error repeats the password: %v", tc.vals["store"], err)
		}
	}
	for _, dsn := range []string{pgDSN, "postgres://db.example:5432/agentrun", "host=db.example port=5432 dbname=agentrun user=agentrun sslmode=verify-full"} {
		if _, err := tryRender(c, store(map[string]any{"dsn": dsn, "existingSecret": "agentrun-db"})); err != nil {
			t.Errorf("store.dsn %q: %v", dsn, err)
		}
	}
}

func store(v map[string]any) map[string]any { return map[string]any{"store": v} }

func renderDeployment(t *testing.T, vals map[string]any) *appsv1.Deployment {
	t.Helper()
	return one[appsv1.Deployment](t, renderChart(t, vals).objs, "Deployment", "")
}

func managerContainer(t *testing.T, vals map[string]any) corev1.Container {
	t.Helper()
	return renderDeployment(t, vals).Spec.Template.Spec.Containers[0]
}

func envVar(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// checkSecretEnv: the container's name variable is key of Secret secret,
// with no literal value.
func checkSecretEnv(t *testing.T, c corev1.Container, name, secret, key string) {
	t.Helper()
	e := envVar(c, name)
	if e == nil || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != secret || e.ValueFrom.SecretKeyRef.Key != key {
		t.Errorf("env %s is %+v, want key %q of Secret %s", name, e, key, secret)
	}
}

// checkCAMount: file is key of Secret secret, mounted read-only.
func checkCAMount(t *testing.T, d *appsv1.Deployment, file, secret, key string) {
	t.Helper()
	pod := d.Spec.Template.Spec
	for _, vm := range pod.Containers[0].VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.Secret == nil || v.Secret.SecretName != secret {
				continue
			}
			for _, it := range v.Secret.Items {
				if it.Key == key && strings.TrimSuffix(vm.MountPath, "/")+"/"+it.Path == file {
					if !vm.ReadOnly {
						t.Errorf("the CA Secret is mounted writable at %s", vm.MountPath)
					}
					return
				}
			}
		}
	}
	t.Errorf("%s is not key %q of Secret %s mounted in the container: mounts %+v volumes %+v", file, key, secret, pod.Containers[0].VolumeMounts, pod.Volumes)
}
