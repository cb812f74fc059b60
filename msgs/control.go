package msgs

import (
	"strings"
)

// Control: requests on vla.<node>.control that change how a node serves
// (docs/protocol.md, "Control"). Only the budget can change so far.

// The operations of a ControlRequest.
const (
	OpGetBudget = "get_budget" // the node's budget and plan, unchanged
	OpSetBudget = "set_budget" // re-plan the model for Budget
)

// CodeForbidden is the Error code of a control request without the node's
// control token (control replies only; not a code of InferRequest's).
const CodeForbidden Code = "forbidden"

// BudgetAuto is the Budget of a set_budget request that makes the node
// follow the GPU's free memory (serve --budget auto).
const BudgetAuto = "auto"

// ControlRequest asks a node to report or change its VRAM budget. The
// reply is a ControlReply or an Error.
type ControlRequest struct {
	V  int    `msgpack:"v"`
	ID string `msgpack:"id,omitempty"` // chosen by the caller; echoed in the reply
	// Token is the node's control token (serve --control-token): without
	// it the request is refused with CodeForbidden.
	Token string `msgpack:"token"`
	Op    string `msgpack:"op"` // OpGetBudget or OpSetBudget
	// Budget (set_budget): a size ("8GiB" = 8·2³⁰ bytes, "16G" = 16·10⁹,
	// "8000000000"), "unlimited" (or "none", "0"), or "auto".
	Budget string `msgpack:"budget,omitempty"`
}

// ControlReply is a node's answer to a ControlRequest.
type ControlReply struct {
	V    int    `msgpack:"v"`
	ID   string `msgpack:"id"`
	Node string `msgpack:"node"`
	// BudgetBytes is the budget the node plans for now; 0 means
	// unlimited. PreviousBudgetBytes is the one before this request.
	BudgetBytes         uint64 `msgpack:"budget_bytes"`
	PreviousBudgetBytes uint64 `msgpack:"previous_budget_bytes"`
	// Auto says the node follows the GPU's free memory.
	Auto bool `msgpack:"auto"`
	// Changed says the model was re-planned (false when the budget was
	// already the one asked for, or for get_budget).
	Changed bool `msgpack:"changed"`
	// WaitedMs is how long the change waited for the inference in flight;
	// ReplanMs how long re-planning and reloading took.
	WaitedMs float64      `msgpack:"waited_ms"`
	ReplanMs float64      `msgpack:"replan_ms"`
	Plan     *PlanSummary `msgpack:"plan,omitempty"`
}

// Validate checks a ControlRequest: a known operation, and a budget for
// set_budget (its syntax is the node's to check).
func (r *ControlRequest) Validate() error {
	switch r.Op {
	case OpGetBudget:
	case OpSetBudget:
		if strings.TrimSpace(r.Budget) == "" {
			return badRequest("budget", "set_budget needs a budget: a size such as 8GiB or 16G, unlimited, or auto")
		}
	default:
		return badRequest("op", "unknown operation %q (want %s or %s)", r.Op, OpGetBudget, OpSetBudget)
	}
	return nil
}

// Validate checks a ControlReply: a node name.
func (r *ControlReply) Validate() error {
	if r.Node == "" {
		return badRequest("node", "must not be empty")
	}
	return nil
}

// DecodeControlRequest decodes and validates a ControlRequest. Every
// error is a *FieldError.
func DecodeControlRequest(b []byte) (*ControlRequest, error) {
	return decode(b, controlRequestShape, controlRequestFrom)
}

// DecodeControlReply decodes the reply to a ControlRequest: an Error when
// the message has the key "error", a ControlReply otherwise. Exactly one
// of the three results is non-nil.
func DecodeControlReply(b []byte) (*ControlReply, *Error, error) {
	return decodeReply(b, controlReplyUnion, controlReplyFrom)
}

var (
	controlRequestShape = objectOf([]string{"v", "id", "token", "op", "budget"}, nil)
	controlReplyShape   = objectOf([]string{"v", "id", "node", "budget_bytes", "previous_budget_bytes", "auto", "changed",
		"waited_ms", "replan_ms"}, map[string]*shape{"plan": statusShape.fields["plan"].shape})
	controlReplyUnion = union(controlReplyShape, errorShape)
)

func controlRequestFrom(o object) ControlRequest {
	return ControlRequest{
		V:      Version,
		ID:     field(o, "id", optional, asString),
		Token:  field(o, "token", optional, asString),
		Op:     field(o, "op", required, asString),
		Budget: field(o, "budget", optional, asString),
	}
}

func controlReplyFrom(o object) ControlReply {
	r := ControlReply{
		V:                   Version,
		ID:                  field(o, "id", required, asString),
		Node:                field(o, "node", required, asString),
		BudgetBytes:         field(o, "budget_bytes", required, asUint64),
		PreviousBudgetBytes: field(o, "previous_budget_bytes", required, asUint64),
		Auto:                field(o, "auto", required, asBool),
		Changed:             field(o, "changed", required, asBool),
		WaitedMs:            field(o, "waited_ms", required, asFloat),
		ReplanMs:            field(o, "replan_ms", required, asFloat),
	}
	if po, ok := child(o, "plan", optional); ok {
		r.Plan = planSummaryFrom(po)
	}
	return r
}

func (r ControlRequest) wire() *ControlRequest {
	r.V = Version
	return &r
}

func (r ControlReply) wire() *ControlReply {
	r.V = Version
	return &r
}
