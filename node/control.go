package node

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"vlanode/msgs"
	"vlanode/node/gpu"
	"vlanode/residency"
)

// Budget changes while serving. A change comes from a control request on
// vla.<node>.control, from SetBudget (serve's SIGHUP), or from the auto
// loop following the GPU's free memory. Each goes through applyBudget,
// one at a time (ctlMu), which takes the engine gate for writing: the
// worker holds it for reading around each inference, so the change waits
// for the inference in flight to finish and the next one waits for the
// change; requests queued meanwhile stay queued and are answered after.
//
// Lock order: ctlMu, then gate. The worker takes only gate.

// Rebudgeter is an Engine whose VRAM budget can change while it serves.
type Rebudgeter interface {
	Engine
	// Rebudget re-plans the model for budget bytes (0: unlimited). The
	// node calls it between inferences, never concurrently with Infer.
	// The engine must never hold more device memory than the larger of
	// the old and the new budget: shrinking, it frees before it loads
	// the new placement. A budget it cannot run within is refused with
	// an error wrapping ErrUnsupported, before anything changes; after
	// any error Info's BudgetBytes says the budget it serves within.
	Rebudget(ctx context.Context, budget uint64) error
}

// ControlConfig configures the control subject (WithControl).
type ControlConfig struct {
	// Token authenticates control requests: each must carry it. Empty:
	// every control request is refused (forbidden).
	Token string
	// Auto, when set, lets the budget follow the GPU's free memory.
	Auto *AutoConfig
}

// AutoConfig is how the budget follows the GPU's free memory (serve
// --budget auto): every Interval while auto mode is on, Sample is read and
// gpu.NextAutoBudget decides.
type AutoConfig struct {
	// Sample returns the GPU's free memory and the memory this process
	// holds on it, bytes.
	Sample func() (free, held uint64, err error)
	// Reserve is the memory left free (--budget-reserve).
	Reserve uint64
	// Hysteresis: grow only when this much more is available; 0 means
	// gpu.DefaultAutoHysteresis.
	Hysteresis uint64
	// Interval between samples; 0 means DefaultAutoInterval.
	Interval time.Duration
	// On starts the node in auto mode (its engine's budget came from a
	// sample already).
	On bool
}

// DefaultAutoInterval is how often auto mode samples the GPU.
const DefaultAutoInterval = 2 * time.Second

// The sources of budget changes, the label of vlanode_budget_changes_total.
const (
	BudgetFromControl = "control" // a control request
	BudgetFromSIGHUP  = "sighup"  // serve re-read --budget-file
	BudgetFromAuto    = "auto"    // the auto loop
)

var budgetSources = []string{BudgetFromControl, BudgetFromSIGHUP, BudgetFromAuto}

// BudgetRequest is a budget change (Node.SetBudget).
type BudgetRequest struct {
	Bytes  uint64 // the budget; 0 means unlimited; ignored with Auto
	Auto   bool   // follow the GPU's free memory from now on
	Source string // who asks: BudgetFromControl, BudgetFromSIGHUP or BudgetFromAuto
}

// ParseBudgetRequest reads a budget as control requests and --budget-file
// give it: a size ("8GiB", "16G", bytes), "unlimited" (or "none", "0"), or
// "auto".
func ParseBudgetRequest(s, source string) (BudgetRequest, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, msgs.BudgetAuto) {
		return BudgetRequest{Auto: true, Source: source}, nil
	}
	b, err := residency.ParseBudget(t)
	if err != nil {
		return BudgetRequest{}, fmt.Errorf("budget: want auto, unlimited or a size: %w", err)
	}
	return BudgetRequest{Bytes: uint64(b), Source: source}, nil
}

// BudgetError is a budget change that did not happen, with the code of its
// Error reply.
type BudgetError struct {
	Code msgs.Code
	Err  error
}

func (e *BudgetError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *BudgetError) Unwrap() error { return e.Err }

// SetBudget changes the node's VRAM budget: it waits for the inference in
// flight, has the engine re-plan, and returns the outcome. Requests keep
// queueing meanwhile and are answered after. A budget equal to the
// current one changes nothing. Errors are *BudgetError.
func (n *Node) SetBudget(ctx context.Context, r BudgetRequest) (*msgs.ControlReply, error) {
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	target := r.Bytes
	if r.Auto {
		a := n.opts.Control.auto()
		if a == nil {
			return nil, &BudgetError{msgs.CodeUnsupported, errors.New("budget auto needs the GPU's free memory from NVML, and this node has no GPU telemetry (no NVIDIA driver, or serve --gpu -1)")}
		}
		free, held, err := a.Sample()
		if err != nil {
			return nil, &BudgetError{msgs.CodeInternal, fmt.Errorf("budget auto: reading the GPU's free memory: %w", err)}
		}
		if target, err = gpu.AutoBudget(free+held, a.Reserve); err != nil {
			return nil, &BudgetError{msgs.CodeUnsupported, fmt.Errorf("budget auto: %w", err)}
		}
	}
	return n.applyBudget(ctx, target, r.Auto, r.Source)
}

// applyBudget re-plans the engine for target; ctlMu is held.
func (n *Node) applyBudget(ctx context.Context, target uint64, auto bool, source string) (*msgs.ControlReply, error) {
	prev := n.budget.Load()
	reply := &msgs.ControlReply{V: msgs.Version, Node: n.opts.Name, BudgetBytes: prev, PreviousBudgetBytes: prev, Auto: n.auto.Load()}
	if target == prev {
		n.auto.Store(auto)
		reply.Auto = auto
		reply.Plan = n.engine.Info().Plan
		return reply, nil
	}
	rb, ok := n.engine.(Rebudgeter)
	if !ok {
		return nil, &BudgetError{msgs.CodeUnsupported, fmt.Errorf("the engine of node %s cannot change its budget while serving", n.opts.Name)}
	}
	if n.closing.Load() {
		return nil, &BudgetError{msgs.CodeOverloaded, fmt.Errorf("node %s is shutting down", n.opts.Name)}
	}
	n.log.Info("budget change: waiting for the inference in flight", "from", prev, "to", target, "auto", auto, "source", source)
	start := n.now()
	n.gate.Lock()
	waited := n.now().Sub(start)
	err := rb.Rebudget(ctx, target)
	now := n.engine.Info().BudgetBytes
	n.budget.Store(now)
	n.gate.Unlock()
	replan := n.now().Sub(start) - waited
	n.m.budget.Set(float64(now))
	if err != nil {
		code := msgs.CodeInternal
		switch {
		case errors.Is(err, ErrUnsupported):
			code = msgs.CodeUnsupported
		case errors.Is(err, ErrBadInput):
			code = msgs.CodeBadRequest
		}
		n.log.Error("budget change failed", "from", prev, "to", target, "serving_within", now, "source", source, "err", err)
		return nil, &BudgetError{code, fmt.Errorf("re-planning for a budget of %s: %w (serving within %s)", budgetText(target), err, budgetText(now))}
	}
	n.auto.Store(auto)
	n.m.budgetChanges.Inc(source)
	n.log.Info("budget changed", "from", prev, "to", now, "auto", auto, "source", source,
		"waited_ms", ms(waited), "replan_ms", ms(replan))
	reply.BudgetBytes, reply.Auto, reply.Changed = now, auto, true
	reply.WaitedMs, reply.ReplanMs = ms(waited), ms(replan)
	reply.Plan = n.engine.Info().Plan
	return reply, nil
}

// budgetText is a budget for messages.
func budgetText(b uint64) string {
	if b == 0 {
		return "no budget"
	}
	return fmt.Sprintf("%.4g GiB", float64(b)/(1<<30))
}

// Budget returns the node's VRAM budget (0: unlimited) and whether it
// follows the GPU's free memory.
func (n *Node) Budget() (uint64, bool) { return n.budget.Load(), n.auto.Load() }

// auto returns the auto configuration, or nil.
func (c *ControlConfig) auto() *AutoConfig {
	if c == nil {
		return nil
	}
	return c.Auto
}

// startControl subscribes to the control subject and starts the auto loop.
func (n *Node) startControl() error {
	sub, err := n.nc.Subscribe(ControlSubject(n.opts.Name), n.onControl)
	if err != nil {
		return fmt.Errorf("node: subscribing to control: %w", err)
	}
	// Control requests are small and rare: bounded as the micro
	// protocol's subjects are (docs/node.md, "Memory").
	if err := sub.SetPendingLimits(controlPendingMsgs, controlPendingBytes); err != nil {
		return fmt.Errorf("node: subscribing to control: %w", err)
	}
	n.controlSub = sub
	if a := n.opts.Control.auto(); a != nil {
		n.auto.Store(a.On)
		n.autoDone = make(chan struct{}) // closed when the loop stops
		go n.autoLoop(a)
	}
	return nil
}

// stopControl stops taking control requests and the auto loop; a change
// in progress finishes.
func (n *Node) stopControl() {
	if n.controlSub != nil {
		n.controlSub.Unsubscribe()
	}
	n.autoStopOnce.Do(func() { close(n.autoStop) })
	<-n.autoDone
}

// onControl answers one control request.
func (n *Node) onControl(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	reply, e := n.control(m.Data)
	var data []byte
	var err error
	if e != nil {
		data, err = msgs.Marshal(e)
	} else {
		data, err = msgs.Marshal(reply)
	}
	if err != nil {
		n.log.Error("control reply", "err", err)
		return
	}
	if err := m.Respond(data); err != nil {
		n.log.Warn("control reply not sent", "err", err)
	}
}

// control handles a control request: authenticated, decoded, applied.
func (n *Node) control(data []byte) (*msgs.ControlReply, *msgs.Error) {
	id := msgs.RequestID(data)
	req, err := msgs.DecodeControlRequest(data)
	if err != nil {
		return nil, msgs.ErrorReply(id, err)
	}
	token := ""
	if n.opts.Control != nil {
		token = n.opts.Control.Token
	}
	switch {
	case token == "":
		n.log.Warn("control request refused: control is off", "op", req.Op)
		return nil, msgs.NewError(id, msgs.CodeForbidden, fmt.Sprintf("control is off on node %s: serve it with --control-token (or $VLANODE_CONTROL_TOKEN)", n.opts.Name))
	case subtle.ConstantTimeCompare([]byte(req.Token), []byte(token)) != 1:
		n.log.Warn("control request refused: wrong token", "op", req.Op)
		return nil, msgs.NewError(id, msgs.CodeForbidden, "wrong or missing control token")
	}
	var reply *msgs.ControlReply
	switch req.Op {
	case msgs.OpGetBudget:
		b, auto := n.Budget()
		reply = &msgs.ControlReply{V: msgs.Version, Node: n.opts.Name, BudgetBytes: b, PreviousBudgetBytes: b, Auto: auto, Plan: n.engine.Info().Plan}
	case msgs.OpSetBudget:
		r, err := ParseBudgetRequest(req.Budget, BudgetFromControl)
		if err != nil {
			return nil, msgs.NewError(id, msgs.CodeBadRequest, err.Error())
		}
		reply, err = n.SetBudget(n.hardCtx, r)
		if err != nil {
			code := msgs.CodeInternal
			if be, ok := errors.AsType[*BudgetError](err); ok {
				code = be.Code
			}
			return nil, msgs.NewError(id, code, err.Error())
		}
	}
	reply.ID = id
	return reply, nil
}

// autoLoop samples the GPU every interval while auto mode is on and
// re-plans when gpu.NextAutoBudget says so. Errors are logged when they
// start and when they stop.
func (n *Node) autoLoop(a *AutoConfig) {
	defer close(n.autoDone)
	every := a.Interval
	if every <= 0 {
		every = DefaultAutoInterval
	}
	hyst := a.Hysteresis
	if hyst == 0 {
		hyst = gpu.DefaultAutoHysteresis
	}
	t := time.NewTicker(every)
	defer t.Stop()
	failing := ""
	for {
		select {
		case <-n.autoStop:
			return
		case <-t.C:
		}
		if !n.auto.Load() {
			continue
		}
		msg := n.autoStep(a, hyst)
		if msg != failing {
			if msg != "" {
				n.log.Warn("budget auto: "+msg, "reserve", a.Reserve)
			} else {
				n.log.Info("budget auto: working again")
			}
			failing = msg
		}
	}
}

// autoStep takes one sample and applies its decision; it returns what went
// wrong, or "".
func (n *Node) autoStep(a *AutoConfig, hyst uint64) string {
	free, held, err := a.Sample()
	if err != nil {
		return "reading the GPU's free memory: " + err.Error()
	}
	n.ctlMu.Lock()
	defer n.ctlMu.Unlock()
	if !n.auto.Load() { // a control request turned it off meanwhile
		return ""
	}
	next, change, err := gpu.NextAutoBudget(n.budget.Load(), free, held, a.Reserve, hyst)
	if err != nil {
		return err.Error()
	}
	if !change {
		return ""
	}
	if _, err := n.applyBudget(n.hardCtx, next, true, BudgetFromAuto); err != nil {
		return err.Error()
	}
	return ""
}

// RequestControl sends a control request to node name and returns its
// reply; an Error reply comes back as a *BudgetError with its code.
func RequestControl(ctx context.Context, nc *nats.Conn, name string, req *msgs.ControlRequest) (*msgs.ControlReply, error) {
	data, err := msgs.Marshal(req)
	if err != nil {
		return nil, err
	}
	m, err := nc.RequestWithContext(ctx, ControlSubject(name), data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("no node %s answers on %s", name, ControlSubject(name))
		}
		return nil, fmt.Errorf("control request to node %s: %w", name, err)
	}
	reply, e, err := msgs.DecodeControlReply(m.Data)
	switch {
	case err != nil:
		return nil, fmt.Errorf("control reply from node %s: %w", name, err)
	case e != nil:
		return nil, &BudgetError{Code: e.Err.Code, Err: fmt.Errorf("node %s: %s: %s", name, e.Err.Code, e.Err.Message)}
	}
	return reply, nil
}
