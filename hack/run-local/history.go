package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentrun-dev/agentrun-operator/internal/history/historytest"
	"github.com/agentrun-dev/agentrun-operator/internal/testenv"
)

// serveHistory runs the history server (docs/history.md) on loopback
// behind the local control plane's aggregation layer, reading the store
// the manager writes, so kubectl agentrun transcript and output, history,
// cost and the console read the journals and records the database holds
// as they would in a cluster. kubeconfig is the control plane's admin's
// (the server's delegated authentication and authorization ask with it).
func serveHistory(ctx context.Context, env *testenv.Env, dsn, kubeconfig string) error {
	if !strings.HasPrefix(dsn, "sqlite:") && !strings.HasPrefix(dsn, "postgres") {
		return nil // ConfigMaps: no archive to serve
	}
	if err := historytest.Install(ctx, env); err != nil {
		return fmt.Errorf("installing config/history: %w", err)
	}
	s, err := historytest.ServeAs(ctx, env, historytest.Options{DSN: dsn}, kubeconfig)
	if err != nil {
		return err
	}
	fmt.Printf(">> The history API (history.agentrun.dev) is served on 127.0.0.1:%d behind the control plane: kubectl agentrun history, cost, and the transcripts and outputs of database journals.\n", s.Port)
	return nil
}
