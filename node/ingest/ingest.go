// Package ingest keeps the latest frames of each camera and assembles
// synchronized observations from them: the node's answer to a use_latest
// request.
//
// # Sync window
//
// A model takes C cameras × F frames, a frame period P apart. From the frames
// each camera has published, Latest picks:
//
//  1. Freshness: a frame is stale once the node received it more than
//     StaleAfter ago (node clock; default (F+1)·P). Stale frames are
//     dropped. A camera left with no frame makes the observation fail.
//  2. t0: the oldest of the cameras' newest capture stamps (robot clock),
//     so that every camera has a frame at or after t0's slot.
//  3. Slots: for camera c and k = 0…F−1 the target time is
//     t0 − (F−1−k)·P; the frame whose stamp is nearest the target is taken
//     (the later one on a tie) if it lies within ±Tolerance (default P/2).
//     A slot with no frame that close, or one that would repeat the frame of
//     the previous slot, makes the observation fail.
//
// The observation's T0 is the newest stamp among the frames taken.
//
// Each camera keeps at most Capacity frames (default 32), sorted by stamp;
// a frame with the stamp of a frame already kept replaces it (latest wins).
package ingest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"vlanode/msgs"
)

// DefaultCapacity is the number of frames a camera keeps by default: a
// 30 Hz camera fills it in about a second, longer than the default
// staleness of a 10 Hz model with 4 frames (0.5 s).
const DefaultCapacity = 32

// Config describes what an observation is.
type Config struct {
	Cameras         []string      // camera names, in the model's order
	FramesPerCamera int           // F
	Period          time.Duration // P, between a camera's frames
	Tolerance       time.Duration // how far a frame may be from its slot; 0 means P/2
	StaleAfter      time.Duration // a frame received longer ago is dropped; 0 means (F+1)·P
	Capacity        int           // frames kept per camera; 0 means DefaultCapacity
}

// withDefaults fills the zero fields and checks the rest.
func (c Config) withDefaults() (Config, error) {
	switch {
	case len(c.Cameras) == 0:
		return c, errors.New("ingest: no cameras")
	case c.FramesPerCamera < 1:
		return c, fmt.Errorf("ingest: frames per camera %d, want ≥ 1", c.FramesPerCamera)
	case c.Period <= 0:
		return c, fmt.Errorf("ingest: frame period %v, want > 0", c.Period)
	case c.Tolerance < 0 || c.StaleAfter < 0 || c.Capacity < 0:
		return c, errors.New("ingest: negative tolerance, staleness or capacity")
	}
	seen := map[string]bool{}
	for _, cam := range c.Cameras {
		if cam == "" || seen[cam] {
			return c, fmt.Errorf("ingest: camera names must be distinct and non-empty, got %q", c.Cameras)
		}
		seen[cam] = true
	}
	if c.Tolerance == 0 {
		c.Tolerance = c.Period / 2
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = time.Duration(c.FramesPerCamera+1) * c.Period
	}
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.Capacity < c.FramesPerCamera {
		return c, fmt.Errorf("ingest: capacity %d is less than the %d frames a camera needs", c.Capacity, c.FramesPerCamera)
	}
	c.Cameras = slices.Clone(c.Cameras)
	return c, nil
}

// entry is one kept frame and when it arrived.
type entry struct {
	frame    msgs.Frame
	received time.Time
}

// Store holds each camera's latest frames. It is safe for concurrent use.
type Store struct {
	cfg   Config
	index map[string]int // camera name → position in cfg.Cameras

	mu    sync.Mutex
	rings [][]entry // per camera, sorted by stamp, oldest first
}

// ErrUnknownCamera is returned by Add for a camera the model does not take.
var ErrUnknownCamera = errors.New("unknown camera")

// NotSynchronizedError says why no synchronized observation could be made.
type NotSynchronizedError struct{ Reason string }

func (e *NotSynchronizedError) Error() string { return "no synchronized frames: " + e.Reason }

// New returns an empty store.
func New(cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, index: map[string]int{}, rings: make([][]entry, len(cfg.Cameras))}
	for i, c := range cfg.Cameras {
		s.index[c] = i
	}
	return s, nil
}

// Config returns the store's configuration, defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Add keeps f, received at now. The store keeps f's Data without copying:
// the caller must not modify it afterwards.
func (s *Store) Add(f *msgs.Frame, now time.Time) error {
	ci, ok := s.index[f.Camera]
	if !ok {
		return fmt.Errorf("%w %q (the model takes %s)", ErrUnknownCamera, f.Camera, strings.Join(s.cfg.Cameras, ", "))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := dropStale(s.rings[ci], now.Add(-s.cfg.StaleAfter))
	i, found := slices.BinarySearchFunc(r, f.StampNs, func(e entry, st int64) int { return cmp.Compare(e.frame.StampNs, st) })
	if found {
		r[i] = entry{*f, now}
	} else {
		r = slices.Insert(r, i, entry{*f, now})
	}
	if over := len(r) - s.cfg.Capacity; over > 0 {
		r = slices.Delete(r, 0, over) // the oldest stamps go first
	}
	s.rings[ci] = r
	return nil
}

// Len returns how many frames camera keeps now.
func (s *Store) Len(camera string) int {
	ci, ok := s.index[camera]
	if !ok {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.rings[ci])
}

// Latest assembles the newest synchronized observation at time now (see the
// package comment): C×F frames, camera-major, oldest first, and t0, the
// newest stamp among them. It fails with a *NotSynchronizedError.
func (s *Store) Latest(now time.Time) ([]msgs.Frame, int64, error) {
	cfg := s.cfg
	s.mu.Lock()
	defer s.mu.Unlock()
	t0 := int64(0)
	for ci, cam := range cfg.Cameras {
		s.rings[ci] = dropStale(s.rings[ci], now.Add(-cfg.StaleAfter))
		r := s.rings[ci]
		if len(r) == 0 {
			return nil, 0, &NotSynchronizedError{fmt.Sprintf("camera %s has no frame received in the last %v", cam, cfg.StaleAfter)}
		}
		if newest := r[len(r)-1].frame.StampNs; ci == 0 || newest < t0 {
			t0 = newest
		}
	}
	out := make([]msgs.Frame, 0, len(cfg.Cameras)*cfg.FramesPerCamera)
	newest := int64(0)
	for ci, cam := range cfg.Cameras {
		r := s.rings[ci]
		prev := -1
		for k := range cfg.FramesPerCamera {
			target := t0 - int64(cfg.FramesPerCamera-1-k)*int64(cfg.Period)
			j := nearest(r, target)
			d := time.Duration(absInt64(r[j].frame.StampNs - target))
			if d > cfg.Tolerance {
				return nil, 0, &NotSynchronizedError{fmt.Sprintf(
					"camera %s has no frame within ±%v of t0−%v (nearest is %v away)",
					cam, cfg.Tolerance, time.Duration(cfg.FramesPerCamera-1-k)*cfg.Period, d)}
			}
			if j == prev {
				return nil, 0, &NotSynchronizedError{fmt.Sprintf(
					"camera %s publishes slower than the model's frame period %v", cam, cfg.Period)}
			}
			prev = j
			out = append(out, r[j].frame)
			newest = max(newest, r[j].frame.StampNs)
		}
	}
	return out, newest, nil
}

// dropStale removes the entries received before cutoff.
func dropStale(r []entry, cutoff time.Time) []entry {
	return slices.DeleteFunc(r, func(e entry) bool { return e.received.Before(cutoff) })
}

// nearest returns the index of the entry of r (non-empty, sorted by stamp)
// whose stamp is nearest target, the later one on a tie.
func nearest(r []entry, target int64) int {
	i, _ := slices.BinarySearchFunc(r, target, func(e entry, t int64) int { return cmp.Compare(e.frame.StampNs, t) })
	switch {
	case i == len(r):
		return i - 1
	case i == 0:
		return 0
	case target-r[i-1].frame.StampNs < r[i].frame.StampNs-target:
		return i - 1
	}
	return i
}

func absInt64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
