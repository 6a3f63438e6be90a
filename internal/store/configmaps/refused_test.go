package configmaps

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
)

// TestRefusedWritesAreMarked: a journal write the API server refuses for
// what it is (invalid, forbidden, too large, malformed) is store.ErrRefused, on
// the first chunk's create, a later append and the final output alike; a
// refusal for when it came (a timeout, the server busy or failing) is not,
// so the caller retries it.
func TestRefusedWritesAreMarked(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	cases := []struct {
		name    string
		err     error
		refused bool
	}{
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "r-journal", field.ErrorList{field.TooLong(field.NewPath("data"), "", 1<<20)}), true},
		{"forbidden by a policy", apierrors.NewForbidden(gr, "r-journal", errors.New("denied request")), true},
		{"too large", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), true},
		{"bad request", apierrors.NewBadRequest("malformed"), true},
		{"timeout", apierrors.NewTimeoutError("slow", 1), false},
		{"too many requests", apierrors.NewTooManyRequests("busy", 1), false},
		{"internal error", apierrors.NewInternalError(errors.New("etcd down")), false},
		{"connection", errors.New("connection refused"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fail := true
			c := refusingClient(t, func() error {
				if fail {
					return tc.err
				}
				return nil
			})
			s, run, ctx := New(c, c), testRun(), context.Background()
			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: no error, want %v", what, tc.err)
				}
				if errors.Is(err, store.ErrRefused) != tc.refused {
					t.Fatalf("%s: %v: refused=%v, want %v", what, err, errors.Is(err, store.ErrRefused), tc.refused)
				}
			}
			check("first append (a create)", s.Append(ctx, run, testEntry(0, "s")))
			_, err := s.PutOutput(ctx, run, "out")
			check("final output on a run without a journal (a create)", err)
			fail = false
			if err := s.Append(ctx, run, testEntry(0, "s")); err != nil {
				t.Fatal(err)
			}
			fail = true
			check("later append (an update)", s.Append(ctx, run, testEntry(1, "s")))
			_, err = s.PutOutput(ctx, run, "out")
			check("final output (an update)", err)
		})
	}
}

// refusingClient is a fake client whose ConfigMap creates and updates fail
// with fail's error.
func refusingClient(t *testing.T, fail func() error) client.Client {
	t.Helper()
	return fakeBuilder(t).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := fail(); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := fail(); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
}
