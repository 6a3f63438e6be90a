package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/agentrun-dev/agentrun-operator/internal/store"
	"github.com/agentrun-dev/agentrun-operator/internal/store/configmaps"
	"github.com/agentrun-dev/agentrun-operator/internal/store/router"
	"github.com/agentrun-dev/agentrun-operator/internal/store/sqlstore"
)

// DefaultArchiveRetention is how long finished runs stay in a database
// store's archive.
const DefaultArchiveRetention = 90 * 24 * time.Hour

// StoreOptions say where runs' journals and finished runs are kept.
type StoreOptions struct {
	// DSN names the database (postgres://... or sqlite:PATH); empty keeps
	// journals in ConfigMaps, as before, with no archive.
	DSN string
	// MaxConns bounds the PostgreSQL connection pool
	// (sqlstore.DefaultMaxConns when 0).
	MaxConns int
	// ArchiveRetention is how long archived runs are kept
	// (DefaultArchiveRetention when 0).
	ArchiveRetention time.Duration
}

// newStore builds the runs' store: the ConfigMap store alone, or a
// database with the ConfigMap store beside it for runs begun there. A DSN
// that does not parse does not stop the manager: the store is unusable,
// every run waits on it with the remedy, and readiness says why. Nothing
// ever falls back to ConfigMaps for a new run when a database is
// configured.
func newStore(mgr ctrl.Manager, o Options) (*router.Router, error) {
	cm := configmaps.New(mgr.GetClient(), mgr.GetAPIReader())
	cm.ChunkBytes = o.JournalChunkBytes
	if o.Store.DSN == "" {
		return router.New(cm, nil), nil
	}
	log := ctrl.Log.WithName("store")
	var primary store.Backend
	db, err := sqlstore.Open(sqlstore.Config{DSN: o.Store.DSN, MaxConns: o.Store.MaxConns, Log: log, Clock: o.Clock})
	switch {
	case errors.Is(err, sqlstore.ErrBadDSN):
		log.Error(err, "The --store DSN does not parse; every run waits until it is fixed")
		primary = store.Unusable("database", &store.UnavailableError{Backend: "database", Cause: err.Error(), Remedy: "fix the --store flag (or the chart's store.dsn): postgres://USER@HOST:PORT/DB?sslmode=verify-full or sqlite:PATH"})
	case err != nil:
		return nil, err
	default:
		t := db.Target()
		log.Info("Runs' journals and finished runs are kept in a database", "kind", t.Kind, "database", t.Where)
		primary = db
		if err := mgr.Add(closer{db}); err != nil {
			return nil, err
		}
	}
	return router.New(primary, cm), nil
}

// closer closes the database once the manager stops.
type closer struct{ db *sqlstore.Store }

func (c closer) Start(ctx context.Context) error {
	<-ctx.Done()
	return c.db.Close()
}

// addStoreProbe adds the store's readiness check, when a database is
// configured and the probes are served.
func addStoreProbe(mgr ctrl.Manager, o Options, s *router.Router) error {
	if o.Store.DSN == "" || o.ProbeAddr == "" || o.ProbeAddr == "0" {
		return nil
	}
	return mgr.AddReadyzCheck("store", storeReady(s))
}

// storeReady is the readiness check of the store: ready when the
// configured store can be written now; otherwise the error says why
// (unreachable, login refused, a permission missing, a newer schema),
// without credentials.
func storeReady(s *router.Router) func(*http.Request) error {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
		defer cancel()
		if err := s.Check(ctx); err != nil {
			return fmt.Errorf("the runs' store cannot be used: %w", err)
		}
		return nil
	}
}
