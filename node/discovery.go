package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"vlanode/msgs"
)

// ServiceName is the NATS micro service name every node registers under:
// `nats micro ls` lists the nodes, `$SRV.INFO.vlanode` reaches them all.
const ServiceName = "vlanode"

// ServiceVersion is the version the micro service reports.
const ServiceVersion = "0.1.0"

// register adds the micro service with the two infer endpoints. Its
// metadata describes the model, so that clients (replay) can build
// observations; its stats carry the node's counters.
func (n *Node) register() error {
	svc, err := micro.AddService(n.nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "vlanode: plans from a vision-language-action model over NATS (protocol v1, msgpack)",
		Metadata:    n.metadata(),
		QueueGroup:  QueueGroup,
		StatsHandler: func(*micro.Endpoint) any {
			return n.m.counters(n.info.Cameras)
		},
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			n.log.Error("micro service error", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return fmt.Errorf("node: registering the micro service: %w", err)
	}
	n.svc = svc
	handler := micro.HandlerFunc(n.onInfer)
	limits := micro.WithEndpointPendingLimits(n.pendingLimits())
	if err := svc.AddEndpoint("infer", handler, micro.WithEndpointSubject(AnyInferSubject), micro.WithEndpointQueueGroup(QueueGroup), limits); err != nil {
		return fmt.Errorf("node: endpoint %s: %w", AnyInferSubject, err)
	}
	if err := svc.AddEndpoint("infer_node", handler, micro.WithEndpointSubject(InferSubject(n.opts.Name)), micro.WithEndpointQueueGroup(QueueGroup), limits); err != nil {
		return fmt.Errorf("node: endpoint %s: %w", InferSubject(n.opts.Name), err)
	}
	return nil
}

// Metadata keys of the micro service.
const (
	mdNode       = "node"
	mdModel      = "model"
	mdCameras    = "cameras"
	mdFrames     = "frames_per_camera"
	mdPeriod     = "frame_period_ns"
	mdEgoPoses   = "ego_poses"
	mdEgoPeriod  = "ego_period_ns"
	mdProtocol   = "protocol"
	mdMaxPayload = "max_payload"
)

func (n *Node) metadata() map[string]string {
	i := n.info
	egoPeriod := i.EgoPeriod
	if egoPeriod == 0 {
		egoPeriod = i.FramePeriod
	}
	return map[string]string{
		mdNode:       n.opts.Name,
		mdModel:      i.Model,
		mdCameras:    strings.Join(i.Cameras, ","),
		mdFrames:     strconv.Itoa(i.FramesPerCamera),
		mdPeriod:     strconv.FormatInt(int64(i.FramePeriod), 10),
		mdEgoPoses:   strconv.Itoa(i.EgoPoses),
		mdEgoPeriod:  strconv.FormatInt(int64(egoPeriod), 10),
		mdProtocol:   strconv.Itoa(msgs.Version),
		mdMaxPayload: strconv.FormatInt(n.maxPayload, 10),
	}
}

// Peer is a node found by Discover.
type Peer struct {
	Node       string
	ID         string // the micro service instance id
	Info       EngineInfo
	MaxPayload int64
}

// Discover asks the nodes on nc for their micro service info and returns
// the one named name. It waits until that node answers or ctx ends.
func Discover(ctx context.Context, nc *nats.Conn, name string) (*Peer, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("discover: %w", err)
	}
	defer sub.Unsubscribe()
	subject, err := micro.ControlSubject(micro.InfoVerb, ServiceName, "")
	if err != nil {
		return nil, fmt.Errorf("discover: %w", err)
	}
	// Ask again now and then: a node may come up after the first question.
	const askEvery = 500 * time.Millisecond
	var seen []string
	for {
		if err := nc.PublishRequest(subject, inbox, nil); err != nil {
			return nil, fmt.Errorf("discover: %w", err)
		}
		wait, cancel := context.WithTimeout(ctx, askEvery)
		for {
			m, err := sub.NextMsgWithContext(wait)
			if err != nil {
				break
			}
			var info micro.Info
			if err := json.Unmarshal(m.Data, &info); err != nil {
				continue
			}
			if node := info.Metadata[mdNode]; node != name {
				seen = append(seen, node)
				continue
			}
			cancel()
			return peerFromInfo(info)
		}
		cancel()
		if ctx.Err() != nil {
			if len(seen) > 0 {
				return nil, fmt.Errorf("discover: no node %q answered on %s (heard from %s)", name, subject, strings.Join(dedupe(seen), ", "))
			}
			return nil, fmt.Errorf("discover: no node %q answered on %s: %w", name, subject, ctx.Err())
		}
	}
}

// peerFromInfo reads a node's micro service info.
func peerFromInfo(info micro.Info) (*Peer, error) {
	md := info.Metadata
	p := &Peer{Node: md[mdNode], ID: info.ID}
	p.Info.Model = md[mdModel]
	if md[mdCameras] != "" {
		p.Info.Cameras = strings.Split(md[mdCameras], ",")
	}
	var errs []error
	num := func(key string) int64 {
		v, err := strconv.ParseInt(md[key], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("metadata %s: %w", key, err))
		}
		return v
	}
	p.Info.FramesPerCamera = int(num(mdFrames))
	p.Info.FramePeriod = time.Duration(num(mdPeriod))
	p.Info.EgoPoses = int(num(mdEgoPoses))
	p.Info.EgoPeriod = time.Duration(num(mdEgoPeriod))
	p.MaxPayload = num(mdMaxPayload)
	if v := md[mdProtocol]; v != strconv.Itoa(msgs.Version) {
		errs = append(errs, fmt.Errorf("node %s speaks protocol %q, this client %d", p.Node, v, msgs.Version))
	}
	if err := p.Info.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("discover: node %s: %w", p.Node, err)
	}
	return p, nil
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
