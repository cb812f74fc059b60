package node

// The subjects of protocol v1 (docs/protocol.md).
const (
	// AnyInferSubject is served by every node in QueueGroup.
	AnyInferSubject = "vla.infer"
	// QueueGroup is the queue group of AnyInferSubject.
	QueueGroup = "vla-nodes"
)

// FramesSubject returns vla.<node>.frames.<camera>.
func FramesSubject(node, camera string) string { return "vla." + node + ".frames." + camera }

// InferSubject returns vla.<node>.infer.
func InferSubject(node string) string { return "vla." + node + ".infer" }

// PlansSubject returns vla.<node>.plans.
func PlansSubject(node string) string { return "vla." + node + ".plans" }

// StatusSubject returns vla.<node>.status.
func StatusSubject(node string) string { return "vla." + node + ".status" }

// ControlSubject returns vla.<node>.control: budget changes
// (docs/protocol.md, "Control").
func ControlSubject(node string) string { return "vla." + node + ".control" }
