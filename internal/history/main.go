package history

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Main runs the history server with the command line's flags (`manager
// history ...`: the manager's image, another Deployment) until SIGTERM.
func Main(args []string, stderr io.Writer) int {
	o := NewOptions()
	fs := pflag.NewFlagSet("history", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Log = zap.New(zap.WriteTo(stderr)).WithName("history")
	ctx := genericapiserver.SetupSignalContext()
	s, err := o.New(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "history:", err)
		return 1
	}
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "history:", err)
		return 1
	}
	return 0
}
