package ingest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/msgs"
)

const ms = int64(time.Millisecond)

func frame(cam string, stampMs int64) *msgs.Frame {
	return &msgs.Frame{Camera: cam, StampNs: stampMs * ms, Encoding: msgs.EncodingMono8, Width: 1, Height: 1, Data: []byte{byte(stampMs)}}
}

func stamps(fs []msgs.Frame) []int64 {
	out := make([]int64, len(fs))
	for i, f := range fs {
		out[i] = f.StampNs / ms
	}
	return out
}

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(Config{Cameras: []string{"left", "right"}, FramesPerCamera: 3, Period: 100 * time.Millisecond})
	require.NoError(t, err)
	return s
}

func TestDefaults(t *testing.T) {
	s := newStore(t)
	c := s.Config()
	assert.Equal(t, 50*time.Millisecond, c.Tolerance)
	assert.Equal(t, 400*time.Millisecond, c.StaleAfter)
	assert.Equal(t, DefaultCapacity, c.Capacity)

	for _, bad := range []Config{
		{},
		{Cameras: []string{"a"}, FramesPerCamera: 0, Period: time.Second},
		{Cameras: []string{"a"}, FramesPerCamera: 2},
		{Cameras: []string{"a", "a"}, FramesPerCamera: 1, Period: time.Second},
		{Cameras: []string{""}, FramesPerCamera: 1, Period: time.Second},
		{Cameras: []string{"a"}, FramesPerCamera: 4, Period: time.Second, Capacity: 3},
	} {
		_, err := New(bad)
		assert.Error(t, err, "%+v", bad)
	}
}

func TestLatestSynchronized(t *testing.T) {
	now := time.Unix(1000, 0)
	cases := []struct {
		name        string
		left, right []int64 // stamps, ms
		want        []int64 // left then right
		t0          int64
		err         string
	}{
		{name: "aligned", left: []int64{0, 100, 200, 300}, right: []int64{0, 100, 200, 300},
			want: []int64{100, 200, 300, 100, 200, 300}, t0: 300},
		{name: "right lags: t0 is the older newest", left: []int64{100, 200, 300, 400}, right: []int64{100, 200, 300},
			want: []int64{100, 200, 300, 100, 200, 300}, t0: 300},
		{name: "jitter within tolerance", left: []int64{98, 205, 301}, right: []int64{110, 190, 340},
			want: []int64{98, 205, 301, 110, 190, 301 + 39}, t0: 340},
		{name: "30 Hz camera picks nearest", left: []int64{100, 200, 300}, right: []int64{100, 133, 166, 200, 233, 266, 300},
			want: []int64{100, 200, 300, 100, 200, 300}, t0: 300},
		{name: "gap beyond tolerance", left: []int64{100, 200, 300}, right: []int64{100, 300},
			err: "camera right has no frame within ±50ms of t0−100ms (nearest is 100ms away)"},
		{name: "too few frames", left: []int64{300}, right: []int64{300},
			err: "camera left has no frame within ±50ms of t0−200ms"},
		{name: "no frames", left: []int64{300},
			err: "camera right has no frame received in the last 400ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			for _, st := range c.left {
				require.NoError(t, s.Add(frame("left", st), now))
			}
			for _, st := range c.right {
				require.NoError(t, s.Add(frame("right", st), now))
			}
			fs, t0, err := s.Latest(now)
			if c.err != "" {
				var ns *NotSynchronizedError
				require.True(t, errors.As(err, &ns), "%v", err)
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, stamps(fs))
			assert.Equal(t, c.t0*ms, t0)
			for i, f := range fs {
				assert.Equal(t, []string{"left", "right"}[i/3], f.Camera)
			}
		})
	}
}

func TestStaleFramesDropped(t *testing.T) {
	s := newStore(t)
	t1 := time.Unix(1000, 0)
	for _, st := range []int64{100, 200, 300} {
		require.NoError(t, s.Add(frame("left", st), t1))
		require.NoError(t, s.Add(frame("right", st), t1))
	}
	_, _, err := s.Latest(t1.Add(400 * time.Millisecond))
	require.NoError(t, err, "exactly StaleAfter old is still fresh")

	// Later, the right camera keeps publishing but the left one stopped.
	t2 := t1.Add(401 * time.Millisecond)
	for _, st := range []int64{400, 500, 600} {
		require.NoError(t, s.Add(frame("right", st), t2))
	}
	_, _, err = s.Latest(t2)
	assert.ErrorContains(t, err, "camera left has no frame received in the last 400ms")
	assert.Equal(t, 0, s.Len("left"))
	assert.Equal(t, 3, s.Len("right"), "the right camera's stale frames were dropped when it added")
}

func TestRingOrderCapacityAndReplace(t *testing.T) {
	s, err := New(Config{Cameras: []string{"c"}, FramesPerCamera: 2, Period: 100 * time.Millisecond, Capacity: 3})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	for _, st := range []int64{300, 100, 200, 400} { // out of order
		require.NoError(t, s.Add(frame("c", st), now))
	}
	assert.Equal(t, 3, s.Len("c"), "capacity drops the oldest stamp")
	dup := frame("c", 400)
	dup.Data = []byte{42}
	require.NoError(t, s.Add(dup, now))
	fs, t0, err := s.Latest(now)
	require.NoError(t, err)
	assert.Equal(t, []int64{300, 400}, stamps(fs))
	assert.Equal(t, []byte{42}, fs[1].Data, "a frame with a kept stamp replaces it")
	assert.Equal(t, 400*ms, t0)

	err = s.Add(frame("nope", 1), now)
	assert.ErrorIs(t, err, ErrUnknownCamera)
	assert.ErrorContains(t, err, `"nope" (the model takes c)`)
}

func TestSlowCameraRepeatsAFrame(t *testing.T) {
	// A tolerance of more than half a period lets one frame be nearest two
	// slots; it must not fill both.
	s, err := New(Config{Cameras: []string{"a", "b"}, FramesPerCamera: 2, Period: 100 * time.Millisecond, Tolerance: 60 * time.Millisecond})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	require.NoError(t, s.Add(frame("a", 100), now))
	require.NoError(t, s.Add(frame("a", 200), now))
	require.NoError(t, s.Add(frame("b", 145), now))
	require.NoError(t, s.Add(frame("b", 300), now))
	// t0 = 200; b's targets 100 and 200 are both nearest its frame at 145.
	_, _, err = s.Latest(now)
	assert.ErrorContains(t, err, "camera b publishes slower than the model's frame period 100ms")

	require.NoError(t, s.Add(frame("b", 205), now))
	fs, _, err := s.Latest(now)
	require.NoError(t, err)
	assert.Equal(t, []int64{100, 200, 145, 205}, stamps(fs))
}

func TestAheadRefused(t *testing.T) {
	s := newStore(t) // stale after 400 ms: MaxSkew is 1 s
	assert.Equal(t, time.Second, s.Config().MaxSkew)
	now := time.Unix(1000, 0)
	for _, st := range []int64{100, 200, 300} {
		require.NoError(t, s.Add(frame("left", st), now))
	}
	err := s.Add(frame("left", 300+3_600_000), now)
	assert.ErrorIs(t, err, ErrAhead)
	assert.ErrorContains(t, err, "1h0m0s ahead of the newest frame's")
	require.NoError(t, s.Add(frame("left", 1300), now), "exactly MaxSkew ahead is kept")
	assert.ErrorIs(t, s.Add(frame("left", 2301), now), ErrAhead)

	// A camera with no frame yet is held to the other cameras' newest
	// fresh frame; with none anywhere, any stamp goes.
	assert.ErrorIs(t, s.Add(frame("right", 2301), now), ErrAhead)
	require.NoError(t, s.Add(frame("right", 1200), now))
	empty := newStore(t)
	require.NoError(t, empty.Add(frame("left", 3_600_000), now))

	// A robot whose clock jumped is refused until its old frames go stale.
	later := now.Add(401 * time.Millisecond)
	require.NoError(t, s.Add(frame("left", 3_600_000), later))
	assert.ErrorIs(t, s.Add(frame("right", 3_600_000+1001), later), ErrAhead)
}

func TestSequence(t *testing.T) {
	s := newStore(t)
	now := time.Unix(1000, 0)
	seq := func(stampMs int64, n uint64) *msgs.Frame {
		f := frame("left", stampMs)
		f.Seq = n
		return f
	}
	require.NoError(t, s.Add(seq(100, 10), now))
	require.NoError(t, s.Add(seq(300, 12), now))
	require.NoError(t, s.Add(seq(200, 11), now), "late but in sequence")
	for _, bad := range []*msgs.Frame{
		seq(400, 12), // later stamp, same seq
		seq(400, 3),  // later stamp, lower seq (a restarted robot)
		seq(50, 10),  // earlier stamp, same seq
		seq(150, 11), // between 100/10 and 200/11
		seq(200, 12), // a replacement out of order with its successor 300/12
	} {
		assert.ErrorIs(t, s.Add(bad, now), ErrOutOfSequence, "stamp %d seq %d", bad.StampNs/ms, bad.Seq)
	}
	require.NoError(t, s.Add(seq(300, 13), now), "a replacement in order")
	require.NoError(t, s.Add(seq(400, 0), now), "seq 0 is no seq")
	require.NoError(t, s.Add(seq(500, 20), now), "gaps in seq are lost frames, not disorder")
	assert.Equal(t, 5, s.Len("left"))
}

func TestMaxBytes(t *testing.T) {
	s, err := New(Config{Cameras: []string{"c"}, FramesPerCamera: 2, Period: 100 * time.Millisecond, MaxBytes: 10})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	big := func(stampMs int64, n int) *msgs.Frame {
		f := frame("c", stampMs)
		f.Data = make([]byte, n)
		return f
	}
	require.NoError(t, s.Add(big(100, 4), now))
	require.NoError(t, s.Add(big(200, 4), now))
	require.NoError(t, s.Add(big(300, 4), now))
	assert.Equal(t, 2, s.Len("c"), "12 bytes > 10: the oldest went")
	assert.ErrorIs(t, s.Add(big(400, 11), now), ErrTooLarge)
	require.NoError(t, s.Add(big(300, 2), now), "a replacement gives its bytes back")
	require.NoError(t, s.Add(big(400, 4), now))
	assert.Equal(t, 3, s.Len("c"))
	fs, _, err := s.Latest(now)
	require.NoError(t, err)
	assert.Equal(t, []int64{300, 400}, stamps(fs))
}

// Issue 34 item 3: 32 frames stamped an hour ahead, published every 400 ms
// beside a real 10 Hz camera pair, pushed the real frames out of the rings.
// They are refused now, and use_latest keeps synchronizing.
func TestFloodAheadCannotDisplace(t *testing.T) {
	s := newStore(t)
	start := time.Unix(1000, 0)
	for step := range 50 { // 5 s of a 10 Hz robot
		now := start.Add(time.Duration(step) * 100 * time.Millisecond)
		st := int64(step) * 100
		require.NoError(t, s.Add(frame("left", st), now))
		require.NoError(t, s.Add(frame("right", st), now))
		if step%4 == 0 {
			for i := range int64(32) {
				for _, cam := range []string{"left", "right"} {
					assert.ErrorIs(t, s.Add(frame(cam, st+3_600_000+i*100), now), ErrAhead)
				}
			}
		}
		if step >= 2 {
			_, t0, err := s.Latest(now)
			require.NoError(t, err, "step %d", step)
			assert.Equal(t, st*ms, t0)
		}
	}
}

// Issue 34 item 6: after one camera stalls, use_latest blamed the healthy
// camera (whose old frames went stale first) for about half a second.
func TestStalledCameraIsNamed(t *testing.T) {
	s := newStore(t)
	start := time.Unix(1000, 0)
	for step := range 40 {
		now := start.Add(time.Duration(step) * 100 * time.Millisecond)
		st := int64(step) * 100
		require.NoError(t, s.Add(frame("left", st), now))
		if step < 20 { // right stalls after 2 s
			require.NoError(t, s.Add(frame("right", st), now))
		}
		for dt := time.Duration(0); dt < 100*time.Millisecond; dt += 10 * time.Millisecond {
			_, _, err := s.Latest(now.Add(dt))
			if step < 20 && step >= 2 {
				require.NoError(t, err, "step %d", step)
				continue
			}
			if err == nil {
				continue
			}
			var ns *NotSynchronizedError
			require.ErrorAs(t, err, &ns)
			if step >= 2 {
				assert.Equal(t, "right", ns.Camera, "step %d +%v: %v", step, dt, err)
			}
			if step == 22 && dt == 0 {
				assert.EqualError(t, err, "no synchronized frames: camera right is behind: its newest frame is 300ms older than camera left's")
			}
		}
	}
}
