package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"vlanode/msgs"
	"vlanode/node/record"
)

// Stream is a clip recorded by vlanode record into a JetStream stream.
type Stream struct {
	name    string
	cons    jetstream.Consumer
	iter    jetstream.MessagesContext
	lastSeq uint64
	done    bool
	total   int
	// Plans and Invalid count the recorded messages the player does not
	// use: plans, and messages that do not decode.
	Plans, Invalid int
}

// OpenStream opens the stream name for reading from its first message.
func OpenStream(ctx context.Context, js jetstream.JetStream, name string) (*Stream, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("replay: stream %s: %w", name, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("replay: stream %s: %w", name, err)
	}
	s := &Stream{name: name, lastSeq: info.State.LastSeq, total: int(info.State.Msgs)}
	if info.State.Msgs == 0 {
		s.done = true
		return s, nil
	}
	s.cons, err = st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("replay: reading stream %s: %w", name, err)
	}
	s.iter, err = s.cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("replay: reading stream %s: %w", name, err)
	}
	return s, nil
}

// Len returns the number of messages in the stream.
func (s *Stream) Len() int { return s.total }

// Close stops reading.
func (s *Stream) Close() error {
	if s.iter != nil {
		s.iter.Stop()
	}
	return nil
}

// Next returns the next recorded frame or request.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	for !s.done {
		m, err := s.next(ctx)
		if err != nil {
			return Event{}, err
		}
		md, err := m.Metadata()
		if err != nil {
			return Event{}, fmt.Errorf("replay: stream %s: %w", s.name, err)
		}
		if md.Sequence.Stream >= s.lastSeq {
			s.done = true
		}
		orig, ok := record.Original(s.name, m.Subject())
		if !ok {
			s.Invalid++
			continue
		}
		at := md.Timestamp.UnixNano()
		switch {
		case strings.HasSuffix(orig, ".plans"):
			s.Plans++
		case strings.Contains(orig, ".frames."):
			f, err := msgs.DecodeFrame(m.Data())
			if err != nil {
				s.Invalid++
				continue
			}
			return Event{Kind: KindFrame, At: at, Frame: f}, nil
		case strings.HasSuffix(orig, ".infer"):
			r, err := msgs.DecodeInferRequest(m.Data())
			if err != nil {
				s.Invalid++
				continue
			}
			return Event{Kind: KindRequest, At: at, Request: r}, nil
		default:
			s.Invalid++
		}
	}
	return Event{}, io.EOF
}

// next waits for the next message, or for ctx.
func (s *Stream) next(ctx context.Context) (jetstream.Msg, error) {
	m, err := s.iter.Next(jetstream.NextContext(ctx))
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, jetstream.ErrMsgIteratorClosed):
		return nil, io.EOF
	case err != nil:
		return nil, fmt.Errorf("replay: stream %s: %w", s.name, err)
	}
	return m, nil
}
