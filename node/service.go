package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// service is the node's NATS micro service: it answers the control subjects
// of the micro protocol ($SRV.PING, $SRV.INFO and $SRV.STATS, each also
// with the service name and with its id) with nats.go micro's own message
// types, so `nats micro ls|info|stats` and Discover read it as any micro
// service. The node answers them itself rather than through micro's
// framework because micro counts a request, and times it, when its handler
// returns, and the node's handler returns as soon as the request is queued
// (other requests must be admitted, superseded or refused while one waits),
// long before the answer. Here an endpoint counts a request when its answer
// is sent, with the time from receipt to answer, and an Error answer as an
// error (endpoint.answered).
type service struct {
	nc       *nats.Conn
	log      *slog.Logger
	identity micro.ServiceIdentity
	desc     string
	started  time.Time
	data     func() any // the STATS data of each endpoint: the node's counters

	// pendingMsgs and pendingBytes bound what each endpoint's subscription
	// may hold that its handler has not taken yet (Node.pendingLimits); 0:
	// NATS's defaults. The control subjects have limits of their own.
	pendingMsgs, pendingBytes int

	endpoints []*endpoint // fixed once start returns

	mu      sync.Mutex // guards subs and stopped; a leaf
	subs    []*nats.Subscription
	stopped bool
}

// endpoint is a subject the node takes infer requests on, with the counts
// $SRV.STATS reports for it.
type endpoint struct {
	name, subject, queueGroup string

	mu    sync.Mutex // guards stats; a leaf
	stats micro.EndpointStats
}

// answered counts one answered request: elapsed from its receipt to its
// answer, and errText ("code: message") when the answer was an Error.
func (e *endpoint) answered(elapsed time.Duration, errText string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := &e.stats
	s.NumRequests++
	s.ProcessingTime += elapsed
	s.AverageProcessingTime = s.ProcessingTime / time.Duration(s.NumRequests)
	if errText != "" {
		s.NumErrors++
		s.LastError = errText
	}
}

// snapshot returns the endpoint's stats.
func (e *endpoint) snapshot() micro.EndpointStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Name, s.Subject, s.QueueGroup = e.name, e.subject, e.queueGroup
	return s
}

// newService describes a service; start subscribes it.
func newService(nc *nats.Conn, log *slog.Logger, name, version, desc string, metadata map[string]string, data func() any) *service {
	return &service{
		nc: nc, log: log, desc: desc, data: data,
		identity: micro.ServiceIdentity{
			Name: name, Version: version, Metadata: metadata,
			// An inbox token is a NUID, as micro's service ids are.
			ID: strings.TrimPrefix(nc.NewInbox(), nats.InboxPrefix),
		},
	}
}

// addEndpoint subscribes handler to subject (in queueGroup, when not "")
// and lists it under name.
func (s *service) addEndpoint(name, subject, queueGroup string, handler func(*endpoint, *nats.Msg)) error {
	e := &endpoint{name: name, subject: subject, queueGroup: queueGroup}
	cb := func(m *nats.Msg) { handler(e, m) }
	var sub *nats.Subscription
	var err error
	if queueGroup != "" {
		sub, err = s.nc.QueueSubscribe(subject, queueGroup, cb)
	} else {
		sub, err = s.nc.Subscribe(subject, cb)
	}
	if err != nil {
		return fmt.Errorf("node: endpoint %s (%s): %w", name, subject, err)
	}
	s.keep(sub)
	if err := s.limit(sub); err != nil {
		return fmt.Errorf("node: endpoint %s (%s): %w", name, subject, err)
	}
	s.endpoints = append(s.endpoints, e)
	return nil
}

// keep records sub, to be drained by stop.
func (s *service) keep(sub *nats.Subscription) {
	s.mu.Lock()
	s.subs = append(s.subs, sub)
	s.mu.Unlock()
}

// Pending limits of each control subject: a PING, INFO or STATS request
// carries nothing, so a backlog of small ones may wait and a large message
// is dropped by NATS (a slow consumer, logged) rather than held.
const (
	controlPendingMsgs  = 1024
	controlPendingBytes = 1 << 20
)

// limit sets an endpoint subscription's pending limits, when the service
// has them.
func (s *service) limit(sub *nats.Subscription) error {
	if s.pendingMsgs == 0 && s.pendingBytes == 0 {
		return nil
	}
	return sub.SetPendingLimits(s.pendingMsgs, s.pendingBytes)
}

// start subscribes the control subjects. Endpoints are added before.
func (s *service) start() error {
	s.started = time.Now().UTC()
	verbs := []struct {
		verb    micro.Verb
		respond func() any
	}{
		{micro.PingVerb, s.ping},
		{micro.InfoVerb, s.info},
		{micro.StatsVerb, s.statsReply},
	}
	for _, v := range verbs {
		for _, sub := range [][2]string{{"", ""}, {s.identity.Name, ""}, {s.identity.Name, s.identity.ID}} {
			subject, err := micro.ControlSubject(v.verb, sub[0], sub[1])
			if err != nil {
				return fmt.Errorf("node: micro service: %w", err)
			}
			respond := v.respond
			sb, err := s.nc.Subscribe(subject, func(m *nats.Msg) { s.reply(m, respond()) })
			if err != nil {
				return fmt.Errorf("node: micro service: subscribing to %s: %w", subject, err)
			}
			s.keep(sb)
			if err := sb.SetPendingLimits(controlPendingMsgs, controlPendingBytes); err != nil {
				return fmt.Errorf("node: micro service: subscribing to %s: %w", subject, err)
			}
		}
	}
	return nil
}

// reply answers a control request with v as JSON.
func (s *service) reply(m *nats.Msg, v any) {
	data, err := json.Marshal(v)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		s.log.Error("micro service: answering a control request failed", "subject", m.Subject, "err", err)
	}
}

func (s *service) ping() any {
	return micro.Ping{ServiceIdentity: s.identity, Type: micro.PingResponseType}
}

func (s *service) info() any {
	eps := make([]micro.EndpointInfo, len(s.endpoints))
	for i, e := range s.endpoints {
		eps[i] = micro.EndpointInfo{Name: e.name, Subject: e.subject, QueueGroup: e.queueGroup}
	}
	return micro.Info{ServiceIdentity: s.identity, Type: micro.InfoResponseType, Description: s.desc, Endpoints: eps}
}

// stats returns every endpoint's counts.
func (s *service) stats() micro.Stats {
	st := micro.Stats{ServiceIdentity: s.identity, Type: micro.StatsResponseType, Started: s.started}
	var data json.RawMessage
	if s.data != nil {
		if b, err := json.Marshal(s.data()); err == nil {
			data = b
		}
	}
	for _, e := range s.endpoints {
		es := e.snapshot()
		es.Data = data
		st.Endpoints = append(st.Endpoints, &es)
	}
	return st
}

func (s *service) statsReply() any { return s.stats() }

// stop unsubscribes the control subjects and drains the endpoints: the
// requests they were already delivered are still handled.
func (s *service) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	var errs []error
	for _, sub := range s.subs {
		if err := sub.Drain(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
			errs = append(errs, err)
		}
	}
	s.subs = nil
	return errors.Join(errs...)
}
