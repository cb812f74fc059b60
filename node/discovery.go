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
	"vlanode/version"
)

// ServiceName is the NATS micro service name every node registers under:
// `nats micro ls` lists the nodes, `$SRV.INFO.vlanode` reaches them all.
const ServiceName = "vlanode"

// ServiceVersion is the version the micro service reports: the binary's
// release.
const ServiceVersion = version.Release

// register adds the micro service with the two infer endpoints. Its
// metadata describes the model, so that clients (replay) can build
// observations; its stats carry the node's counters.
func (n *Node) register() error {
	svc := newService(n.nc, n.log, ServiceName, ServiceVersion,
		"vlanode: plans from a vision-language-action model over NATS (protocol v1, msgpack)",
		n.metadata(), func() any { return n.m.counters(n.info.Cameras) })
	svc.pendingMsgs, svc.pendingBytes = n.pendingLimits()
	if err := svc.addEndpoint("infer", AnyInferSubject, QueueGroup, n.onInfer); err != nil {
		return err
	}
	if err := svc.addEndpoint("infer_node", InferSubject(n.opts.Name), QueueGroup, n.onInfer); err != nil {
		return err
	}
	if err := svc.start(); err != nil {
		return err
	}
	n.svc = svc
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
