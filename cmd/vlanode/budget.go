package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"vlanode/msgs"
	"vlanode/node"
)

// runBudget reports or changes a serving node's VRAM budget through its
// control subject (docs/node.md, "Budget changes while serving").
func runBudget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("budget", stderr)
	var nf natsFlags
	nf.register(fs, "NATS server of the node")
	name := fs.String("node", "", "the node (required)")
	set := fs.String("set", "", "the new budget: a size (8GiB, 16G), unlimited, or auto (follow the GPU's free memory); empty: report the budget")
	token := fs.String("control-token", "", "the node's control token (or $VLANODE_CONTROL_TOKEN)")
	timeout := fs.Duration("timeout", 10*time.Minute, "how long to wait: a change waits for the inference in flight, then re-plans and reloads the model")
	asJSON := fs.Bool("json", false, "print the reply as one JSON object")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *name == "" {
		return usagef("--node is required")
	}
	if *token == "" {
		*token = os.Getenv("VLANODE_CONTROL_TOKEN")
	}
	req := &msgs.ControlRequest{ID: fmt.Sprintf("budget-%d", time.Now().UnixNano()), Token: *token, Op: msgs.OpGetBudget}
	if *set != "" {
		if _, err := node.ParseBudgetRequest(*set, node.BudgetFromControl); err != nil {
			return usagef("--set: %v", err)
		}
		req.Op, req.Budget = msgs.OpSetBudget, *set
	}
	nf.clientURL()
	if err := nf.resolve(false); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := connectWaiting(cctx, nf, "vlanode budget")
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := node.RequestControl(cctx, nc, *name, req)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(r)
	}
	mode := ""
	if r.Auto {
		mode = ", following the GPU's free memory"
	}
	switch {
	case r.Changed:
		fmt.Fprintf(stdout, "node %s: budget %s (was %s)%s; waited %.0f ms for the inference in flight, re-planned in %.0f ms\n",
			r.Node, budgetText(int64(r.BudgetBytes)), budgetText(int64(r.PreviousBudgetBytes)), mode, r.WaitedMs, r.ReplanMs)
	default:
		fmt.Fprintf(stdout, "node %s: budget %s%s\n", r.Node, budgetText(int64(r.BudgetBytes)), mode)
	}
	if p := r.Plan; p != nil {
		fmt.Fprintf(stdout, "  plan %s: resident %s, streamed %s, host %s, fixed %s; predicted %.0f ms\n", p.Mode,
			gib(p.ResidentBytes), gib(p.StreamedBytes), gib(p.HostBytes), gib(p.FixedBytes), p.PredictedMs)
	}
	return nil
}

// gib formats bytes in GiB.
func gib(b uint64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
