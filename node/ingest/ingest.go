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
// When a slot fails because the camera that sets t0 has fallen behind the
// others (it stalled, and its last frames are not stale yet), the error
// names that camera, not the healthy one whose old frames ran out.
//
// # Keeping frames
//
// Each camera keeps at most Capacity frames (default 32) and MaxBytes bytes
// of frame data (default 32 MiB), sorted by stamp; past either, the oldest
// stamps go first. A frame with the stamp of a frame already kept replaces
// it (latest wins). A frame is refused, so that it cannot push the kept
// frames out:
//
//   - ahead (ErrAhead): its stamp is more than MaxSkew ahead of the
//     newest fresh frame of its camera (of any camera when its own has
//     none). A frame stamped an hour ahead is refused, and so, until the
//     kept frames go stale, are the next ones of a robot whose clock jumped.
//   - out of sequence (ErrOutOfSequence): it carries a seq, and so does a
//     kept neighbour, and the two orders disagree: a later stamp with a
//     seq not above the earlier frame's, or the reverse. Seq 0 means none.
//     A robot that restarts its sequence is refused until its old frames go
//     stale.
//   - too large (ErrTooLarge): its data alone is more than MaxBytes.
package ingest

import (
	"cmp"
	"errors"
	"fmt"
	"math"
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

// DefaultMaxBytes is the frame data a camera keeps by default: 160 JPEG
// frames of 200 kB, or five raw 1920×1080 rgb8 frames.
const DefaultMaxBytes = 32 << 20

// MinDefaultSkew is the least default MaxSkew (see Config.MaxSkew).
const MinDefaultSkew = time.Second

// Config describes what an observation is.
type Config struct {
	Cameras         []string      // camera names, in the model's order
	FramesPerCamera int           // F
	Period          time.Duration // P, between a camera's frames
	Tolerance       time.Duration // how far a frame may be from its slot; 0 means P/2
	StaleAfter      time.Duration // a frame received longer ago is dropped; 0 means (F+1)·P
	Capacity        int           // frames kept per camera; 0 means DefaultCapacity
	MaxBytes        int64         // frame data kept per camera; 0 means DefaultMaxBytes
	// MaxSkew is how far a frame's stamp may be ahead of the newest fresh
	// frame's; 0 means the longer of MinDefaultSkew and 2·StaleAfter.
	MaxSkew time.Duration
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
	case c.Tolerance < 0 || c.StaleAfter < 0 || c.Capacity < 0 || c.MaxBytes < 0 || c.MaxSkew < 0:
		return c, errors.New("ingest: negative tolerance, staleness, capacity, bytes or skew")
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
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxSkew == 0 {
		c.MaxSkew = max(MinDefaultSkew, 2*c.StaleAfter)
		if c.StaleAfter > math.MaxInt64/2 {
			c.MaxSkew = math.MaxInt64
		}
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
	bytes []int64   // per camera, the data its ring holds
}

// Errors of Add: why a frame was not kept.
var (
	ErrUnknownCamera = errors.New("unknown camera")                      // the model does not take the camera
	ErrAhead         = errors.New("stamped too far ahead")               // beyond MaxSkew of the newest frame
	ErrOutOfSequence = errors.New("out of sequence")                     // seq and stamp orders disagree
	ErrTooLarge      = errors.New("larger than a camera's frame memory") // more data than MaxBytes
)

// NotSynchronizedError says why no synchronized observation could be made,
// and which camera is missing.
type NotSynchronizedError struct {
	Camera string // the camera at fault
	Reason string
}

func (e *NotSynchronizedError) Error() string { return "no synchronized frames: " + e.Reason }

// New returns an empty store.
func New(cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, index: map[string]int{}, rings: make([][]entry, len(cfg.Cameras)), bytes: make([]int64, len(cfg.Cameras))}
	for i, c := range cfg.Cameras {
		s.index[c] = i
	}
	return s, nil
}

// Config returns the store's configuration, defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Add keeps f, received at now, or says why not (see the package comment).
// The store keeps f's Data without copying: the caller must not modify it
// afterwards.
func (s *Store) Add(f *msgs.Frame, now time.Time) error {
	ci, ok := s.index[f.Camera]
	if !ok {
		return fmt.Errorf("%w %q (the model takes %s)", ErrUnknownCamera, f.Camera, strings.Join(s.cfg.Cameras, ", "))
	}
	if size := int64(len(f.Data)); size > s.cfg.MaxBytes {
		return fmt.Errorf("frame of %d bytes: %w (%d bytes)", size, ErrTooLarge, s.cfg.MaxBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := now.Add(-s.cfg.StaleAfter)
	s.dropStale(ci, cutoff)
	if newest, ok := s.newest(ci, cutoff); ok && f.StampNs > newest && uint64(f.StampNs-newest) > uint64(s.cfg.MaxSkew) {
		return fmt.Errorf("stamp_ns %d is %v ahead of the newest frame's (%d): %w (more than %v)",
			f.StampNs, time.Duration(f.StampNs-newest), newest, ErrAhead, s.cfg.MaxSkew)
	}
	r := s.rings[ci]
	i, found := slices.BinarySearchFunc(r, f.StampNs, func(e entry, st int64) int { return cmp.Compare(e.frame.StampNs, st) })
	if err := checkSequence(r, i, found, f); err != nil {
		return err
	}
	if found {
		s.bytes[ci] -= int64(len(r[i].frame.Data))
		r[i] = entry{*f, now}
	} else {
		r = slices.Insert(r, i, entry{*f, now})
	}
	s.bytes[ci] += int64(len(f.Data))
	over := 0 // the oldest stamps go first
	for len(r)-over > s.cfg.Capacity || s.bytes[ci] > s.cfg.MaxBytes {
		s.bytes[ci] -= int64(len(r[over].frame.Data))
		over++
	}
	s.rings[ci] = slices.Delete(r, 0, over)
	return nil
}

// newest returns the newest stamp among camera ci's frames, or, when it
// has none, among the other cameras' frames received at or after cutoff.
func (s *Store) newest(ci int, cutoff time.Time) (int64, bool) {
	if r := s.rings[ci]; len(r) > 0 {
		return r[len(r)-1].frame.StampNs, true
	}
	stamp, ok := int64(0), false
	for _, r := range s.rings {
		for _, e := range r {
			if !e.received.Before(cutoff) && (!ok || e.frame.StampNs > stamp) {
				stamp, ok = e.frame.StampNs, true
			}
		}
	}
	return stamp, ok
}

// checkSequence checks f, about to go at index i of r (replacing r[i] when
// found), against the seq of its kept neighbours.
func checkSequence(r []entry, i int, found bool, f *msgs.Frame) error {
	if f.Seq == 0 {
		return nil
	}
	if i > 0 {
		if p := r[i-1].frame; p.Seq != 0 && p.Seq >= f.Seq {
			return fmt.Errorf("seq %d at stamp_ns %d follows seq %d at stamp_ns %d: %w", f.Seq, f.StampNs, p.Seq, p.StampNs, ErrOutOfSequence)
		}
	}
	next := i
	if found {
		next++
	}
	if next < len(r) {
		if n := r[next].frame; n.Seq != 0 && n.Seq <= f.Seq {
			return fmt.Errorf("seq %d at stamp_ns %d precedes seq %d at stamp_ns %d: %w", f.Seq, f.StampNs, n.Seq, n.StampNs, ErrOutOfSequence)
		}
	}
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
	t0, lagging, lead, leader := int64(0), 0, int64(0), 0
	for ci, cam := range cfg.Cameras {
		s.dropStale(ci, now.Add(-cfg.StaleAfter))
		r := s.rings[ci]
		if len(r) == 0 {
			return nil, 0, &NotSynchronizedError{cam, fmt.Sprintf("camera %s has no frame received in the last %v", cam, cfg.StaleAfter)}
		}
		newest := r[len(r)-1].frame.StampNs
		if ci == 0 || newest < t0 {
			t0, lagging = newest, ci
		}
		if ci == 0 || newest > lead {
			lead, leader = newest, ci
		}
	}
	// A camera whose newest frame is more than a period and the tolerance
	// behind another's has stalled: a slot of another camera that fails
	// because t0 is that old is its fault.
	stalled := time.Duration(lead-t0) > cfg.Period+cfg.Tolerance
	fail := func(ci int, reason string) error {
		if stalled && ci != lagging {
			lag := cfg.Cameras[lagging]
			return &NotSynchronizedError{lag, fmt.Sprintf("camera %s is behind: its newest frame is %v older than camera %s's",
				lag, time.Duration(lead-t0), cfg.Cameras[leader])}
		}
		return &NotSynchronizedError{cfg.Cameras[ci], reason}
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
				return nil, 0, fail(ci, fmt.Sprintf("camera %s has no frame within ±%v of t0−%v (nearest is %v away)",
					cam, cfg.Tolerance, time.Duration(cfg.FramesPerCamera-1-k)*cfg.Period, d))
			}
			if j == prev {
				return nil, 0, fail(ci, fmt.Sprintf("camera %s publishes slower than the model's frame period %v", cam, cfg.Period))
			}
			prev = j
			out = append(out, r[j].frame)
			newest = max(newest, r[j].frame.StampNs)
		}
	}
	return out, newest, nil
}

// dropStale removes camera ci's entries received before cutoff.
func (s *Store) dropStale(ci int, cutoff time.Time) {
	s.rings[ci] = slices.DeleteFunc(s.rings[ci], func(e entry) bool {
		if e.received.Before(cutoff) {
			s.bytes[ci] -= int64(len(e.frame.Data))
			return true
		}
		return false
	})
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
