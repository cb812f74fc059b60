// Command vlanode is the vlanode binary: it serves VLA models over NATS and
// runs them from the command line. Run `vlanode help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand of the binary.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"eval":     {"compute logits for input_ids (and images), or an Alpamayo-R1 action side's velocity over a VLM cache, from a safetensors file", runEval},
		"generate": {"greedy-decode a continuation of input_ids", runGenerate},
		"infer":    {"run a VLA model on camera images: trajectory and reasoning", runInfer},
		"clip":     {"write a synthetic driving clip (camera folders + ego.csv) for replay", runClip},
		"serve":    {"serve plans over NATS (an embedded NATS server unless --nats-url)", serveCommand(alpamayoSpec())},
		"replay":   {"play a recorded clip into a node and summarize its answers; many clips at once for offline evaluation (plans/s, JSON lines)", runReplay},
		"record":   {"store a node's frames, requests and plans in a JetStream stream", runRecord},
		"budget":   {"report or change a serving node's VRAM budget (vla.<node>.control)", runBudget},
		"synth":    {"write a checkpoint of random weights in a real model's layout", runSynth},
		"bench":    {"run the standard workload at several VRAM budgets: latency per stage vs prediction and bound, peak memory, Accelerate", runBench},
		"profile":  {"measure the GPU for the planner (copy bandwidth, GEMV/GEMM rates, fixed memory, every unit's compute): a profile JSON", runProfile},
		"plan":     {"plan VRAM residency under a budget from config.json alone: placement, bytes, predicted latency", runPlan},
		"version":  {"print the release, the commit it was built from and the Go version", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout, cmds)
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "vlanode: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "vlanode %s: %v\n", args[0], err)
			return 2
		}
		fmt.Fprintf(stderr, "vlanode %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: vlanode <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun `vlanode <command> -h` for a command's flags.")
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("vlanode "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses args and turns flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %v", fs.Args())
	}
	return nil
}
