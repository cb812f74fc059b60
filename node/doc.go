// Package node is vlanode's NATS service: it takes camera frames and infer
// requests (protocol v1, package msgs), runs them through an Engine one at
// a time, and answers with plans.
//
// # Subjects
//
//	vla.<node>.frames.<camera>  frames in; kept per camera for use_latest (package ingest)
//	vla.infer                   requests from anyone, queue group vla-nodes
//	vla.<node>.infer            requests for this node
//	vla.<node>.plans            every plan out
//	vla.<node>.status           Status every second
//	vla.jobs, vla.results.<id>  with WithJobs: jobs in, their answers stored (jobs.go)
//	vla.<node>.control          budget changes from holders of the control token (control.go)
//
// The node registers as the NATS micro service "vlanode" (PING, INFO,
// STATS); its metadata describes the model (Discover reads it).
//
// # Requests
//
// A request is decoded and checked against the model on the endpoint's
// subscription goroutine, then queued; one worker runs the engine. Every
// request that has a reply subject is answered exactly once, with a Plan or
// an Error:
//
//   - bad_request: anything msgs refuses, a payload over MaxPayload, frames
//     that do not match the model (count, cameras, order), the wrong number
//     of ego poses, and frames the engine cannot decode (FrameError,
//     ErrBadInput);
//   - unsupported: another protocol version; use_latest with no
//     synchronized frames; ErrUnsupported from the engine;
//   - overloaded: the queue holds QueueBound requests; a waiting
//     use_latest request superseded by a newer one (latest wins: the newer
//     takes its place in line); the node shutting down;
//   - deadline_exceeded: deadline_ms, counted from receipt, passed before
//     queueing, while waiting (answered when it passes), or before the plan
//     was ready;
//   - internal: the engine failed, panicked or returned an invalid plan.
//
// Shed requests (overloaded, and deadline_exceeded before inference) are
// counted by reason in vlanode_shed_total and the Status counters.
//
// A use_latest request is queued only after every frame that reached the
// node before it has been stored (a connection barrier), and its frames are
// taken when the engine is about to run. Published frames stamped too far
// ahead, out of sequence or too large are dropped and counted by reason
// (package ingest), so that they cannot push the kept frames out; so are
// those an engine's FrameChecker refuses (a header that lies about the
// size), so that no use_latest request gets them.
//
// # Budget changes
//
// The engine's VRAM budget can change while the node serves: a control
// request, SetBudget (serve's SIGHUP) or the auto loop following the GPU's
// free memory. A change waits for the inference in flight behind the
// engine gate, has a Rebudgeter engine re-plan, and runs before the
// requests queued behind it, which are answered within the new budget.
//
// # Memory
//
// What a request can make the node hold is bounded: msgs skips unknown keys
// unread and bounds the fields a message fills by its size; every
// subscription has pending limits; the queue holds QueueBound requests; each
// camera's ring holds RingBytes. docs/node.md states the sum.
//
// # Reconnection and shutdown
//
// The connection reconnects forever. Replies sent while the server is away
// are buffered by nats.go and sent on reconnection; they reach the client if
// it has resubscribed by then; replies that must not be lost go through the
// jobs path (jobs.go), which JetStream keeps on disk. Shutdown stops taking
// requests, answers the waiting ones overloaded, lets the running one
// finish, then drains the connection; past the grace period it cancels the
// inference, and if the engine does not return within abandonAfter it
// answers the request and returns without it (ErrInferenceAbandoned).
//
// # Lock order
//
// The node's locks are all leaves: scheduler.mu (the queue), the ingest
// store's mutex (the rings), service.mu and each endpoint's mu (the micro
// service), JobClient.mu and each metric's mutex. None is held while
// another is taken, while publishing to NATS, or while the engine runs. Cross-goroutine state otherwise is atomic (Node.closing,
// Node.running, job.answered) or a channel closed once (storedJob.done).
package node
