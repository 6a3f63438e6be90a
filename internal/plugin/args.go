package plugin

import (
	"fmt"
	"strings"
)

// options are the parsed flags and positional arguments of one command.
type options struct {
	kubeconfig    string
	context       string
	namespace     string
	allNamespaces bool
	output        string
	help          bool
	args          []string
}

// flagSet says which optional flags a command accepts beyond the common
// ones (--kubeconfig, --context, -n/--namespace, -h/--help).
type flagSet struct {
	allNamespaces bool // -A/--all-namespaces
	output        bool // -o/--output
}

// usageError is a mistake in how the plugin was called: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// parseArgs reads flags anywhere among the arguments, the way kubectl does:
// "-n ns", "-n=ns", "-nns", "--namespace ns", "--namespace=ns". "--" ends the
// flags.
func parseArgs(args []string, fs flagSet) (options, error) {
	var o options
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			o.args = append(o.args, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			o.args = append(o.args, a)
			continue
		}
		name, value, hasValue := a, "", false
		if strings.HasPrefix(a, "--") {
			name, value, hasValue = strings.Cut(a, "=")
		} else if len(a) > 2 {
			// Short flag with its value attached: -nfoo, -n=foo, -ojson.
			name, value, hasValue = a[:2], strings.TrimPrefix(a[2:], "="), true
		}
		var target *string
		switch name {
		case "-h", "--help":
			if hasValue {
				return o, usagef("flag %s takes no value", name)
			}
			o.help = true
			continue
		case "-A", "--all-namespaces":
			if !fs.allNamespaces {
				return o, usagef("unknown flag %s for this command", name)
			}
			if hasValue {
				switch value {
				case "true":
					o.allNamespaces = true
				case "false":
					o.allNamespaces = false
				default:
					return o, usagef("flag %s takes true or false, not %q", name, value)
				}
				continue
			}
			o.allNamespaces = true
			continue
		case "--kubeconfig":
			target = &o.kubeconfig
		case "--context":
			target = &o.context
		case "-n", "--namespace":
			target = &o.namespace
		case "-o", "--output":
			if !fs.output {
				return o, usagef("unknown flag %s for this command", name)
			}
			target = &o.output
		default:
			return o, usagef("unknown flag %s", name)
		}
		if !hasValue {
			if i+1 >= len(args) {
				return o, usagef("flag %s needs a value", name)
			}
			i++
			value = args[i]
		}
		if value == "" {
			return o, usagef("flag %s needs a non-empty value", name)
		}
		*target = value
	}
	return o, nil
}
