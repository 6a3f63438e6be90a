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
	// leaseNamespace is where the operator's Leases are (ps, describe).
	leaseNamespace string
	help           bool
	args           []string

	// Answer commands. The value flags are pointers because an empty value
	// is still an answer (an empty output, an empty string).
	wait        bool    // --wait
	reason      *string // --reason (deny)
	json        *string // --json (answer)
	null        bool    // --null (answer)
	done        bool    // --done (resolve)
	retry       bool    // --retry (resolve)
	abandon     bool    // --abandon (resolve)
	writeOutput *string // --output (resolve; not -o)
	writeJSON   *string // --output-json (resolve)
	edit        *string // --edit (answer: a checkpoint's edited draft)
	editFile    *string // --edit-file (answer: the same, read from a file)
	revise      *string // --revise (answer: instructions sending the stage back)
	choice      *string // --choice (answer: a checkpoint's option or free text)
}

// flagSet says which optional flags a command accepts beyond the common
// ones (--kubeconfig, --context, -n/--namespace, -h/--help).
type flagSet struct {
	allNamespaces bool // -A/--all-namespaces
	output        bool // -o/--output
	wait          bool // --wait
	reason        bool // --reason
	input         bool // --json, --null
	resolve       bool // --done, --retry, --abandon, --output, --output-json
	leases        bool // --lease-namespace
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
		var target *string // a flag whose value must not be empty
		var text **string  // a flag whose value is answer text, possibly empty
		var set *bool      // a flag that takes no value
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
		case "--lease-namespace":
			target = accepted(fs.leases, &o.leaseNamespace)
		case "-o", "--output":
			switch {
			case fs.resolve && name == "--output":
				text = &o.writeOutput // the write's output, not a format
			case fs.output:
				target = &o.output
			default:
				return o, usagef("unknown flag %s for this command", name)
			}
		case "--wait":
			set = accepted(fs.wait, &o.wait)
		case "--null":
			set = accepted(fs.input, &o.null)
		case "--done":
			set = accepted(fs.resolve, &o.done)
		case "--retry":
			set = accepted(fs.resolve, &o.retry)
		case "--abandon":
			set = accepted(fs.resolve, &o.abandon)
		case "--reason":
			text = accepted(fs.reason, &o.reason)
		case "--json":
			text = accepted(fs.input, &o.json)
		case "--output-json":
			text = accepted(fs.resolve, &o.writeJSON)
		case "--edit":
			text = accepted(fs.input, &o.edit)
		case "--edit-file":
			text = accepted(fs.input, &o.editFile)
		case "--revise":
			text = accepted(fs.input, &o.revise)
		case "--choice":
			text = accepted(fs.input, &o.choice)
		default:
			return o, usagef("unknown flag %s", name)
		}
		if set == nil && text == nil && target == nil {
			return o, usagef("unknown flag %s for this command", name)
		}
		if set != nil {
			if hasValue {
				return o, usagef("flag %s takes no value", name)
			}
			*set = true
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return o, usagef("flag %s needs a value", name)
			}
			i++
			value = args[i]
		}
		if text != nil {
			*text = &value
			continue
		}
		if value == "" {
			return o, usagef("flag %s needs a non-empty value", name)
		}
		*target = value
	}
	return o, nil
}

// accepted returns p when the command takes the flag, and nil (an unknown
// flag) when it does not.
func accepted[T any](ok bool, p *T) *T {
	if !ok {
		return nil
	}
	return p
}
