package cuda

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vlanode/backend"
	"vlanode/backend/handoff/handofftest"
	"vlanode/cuda/driver"
	"vlanode/tensor"
)

// hostWaiting is the Backend with its exchanges on the host-side path
// (Receive waits for the Post on the host), as on a device without
// stream memory operations.
type hostWaiting struct{ *Backend }

func (h hostWaiting) NewExchange(out, in int) (backend.Exchange, error) {
	return h.newExchange(out, in, true, false)
}

// TestGPUExchange runs chains of hand-offs with a goroutine as the CPU
// engine, each hand-off between two Add kernels, every value checked bit
// for bit against the host's sums (handofftest.Run): on the path the
// device supports, with 20 hand-offs queued before the engine starts
// when the device waits (the queueing goroutine must not wait for the
// engine), and on the host-side path. (Not more ahead: the device's queue
// is bounded, about a thousand entries; on the H200 run of 2026-12-01, 100
// hand-offs with their kernels filled it, and queueing more waits for the
// device, which waited for the engine that the test had not started yet.)
func TestGPUExchange(t *testing.T) {
	b := gpuBackend(t)
	t.Logf("HOST EXCHANGE PATH: %s", b.Device().HostExchange)
	ahead := b.g.xpath == backend.DeviceWaits
	// Up to xMappedAdd bytes an adding Receive reads In through the
	// device mapping; the 300-row chain's results are copied.
	for _, c := range []handofftest.Chain{{N: 4096, Tickets: 20}, {N: 64 * 4096, Tickets: 20}, {N: 1, Tickets: 20}, {N: 300 * 4096, Tickets: 8}} {
		c.Ahead = ahead
		t.Run("device path", func(t *testing.T) { handofftest.Run(t, b, c) })
		c.Ahead = false
		t.Run("host waits", func(t *testing.T) { handofftest.Run(t, hostWaiting{b}, c) })
	}
}

// TestGPUExchangeErrors checks the refusals on both paths, a Receive
// refused inside a capture, a Wait cancelled while its copy waits behind
// a kernel, and a Close that releases Receives never posted.
func TestGPUExchangeErrors(t *testing.T) {
	b := gpuBackend(t)
	t.Run("device path", func(t *testing.T) { handofftest.Errors(t, b) })
	t.Run("host waits", func(t *testing.T) { handofftest.Errors(t, hostWaiting{b}) })

	x := upload(t, b, []float32{1, 2, 3, 4}, 4)
	ex, err := b.NewExchange(4, 4)
	require.NoError(t, err)
	defer ex.Close()

	_, err = b.CaptureGraph(func() error {
		_, err := ex.Send(x)
		return err
	})
	assert.ErrorContains(t, err, "not allowed while capturing", "a Send inside a capture")

	// A Wait whose copy is queued behind a 300 ms kernel ends with its
	// context, and a later Wait gets the ticket.
	require.NoError(t, b.run(func(g *gpu) error {
		g.args.Reset()
		g.args.U64(300_000_000)
		return g.launch("spin", g.k.spin, driver.Dim3{1, 1, 1}, block1D(1), 0)
	}))
	t1, err := ex.Send(x)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	err = ex.Wait(ctx, t1)
	cancel()
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the copy is behind the kernel")
	require.NoError(t, ex.Wait(context.Background(), t1))
	assert.Equal(t, []float32{1, 2, 3, 4}, ex.Out())

	if ex.Path() == backend.DeviceWaits {
		// Receives queued and never posted: Close releases the device and
		// says so; the stream is not left waiting.
		require.NoError(t, ex.Receive(x, t1, true))
		assert.ErrorContains(t, ex.Close(), "tickets 1 to 1 received but never posted")
		require.NoError(t, b.Sync())
	}
}

// TestGPUExchangeBackendClose: closing the Backend with an exchange open
// whose Receive waits for a Post never coming releases the stream, frees
// the exchange and reports it; the exchange's own Close is then harmless.
func TestGPUExchangeBackendClose(t *testing.T) {
	needGPU(t)
	b, err := New(WithKernelCache(testCacheDir))
	require.NoError(t, err)
	x, err := b.Alloc("activations", tensor.F32, 8)
	require.NoError(t, err)
	ex, err := b.NewExchange(8, 8)
	require.NoError(t, err)
	tk, err := ex.Send(x)
	require.NoError(t, err)
	if ex.Path() == backend.DeviceWaits {
		require.NoError(t, ex.Receive(x, tk, false))
		assert.ErrorContains(t, b.Close(), "received but never posted")
	} else {
		require.NoError(t, b.Close())
	}
	assert.NoError(t, ex.Close())
	_, err = ex.Send(x)
	assert.Error(t, err, "a Send after the Backend's Close")
}

// BenchmarkGPUExchange measures one hand-off's round trip: Send of n
// float32s, the engine goroutine's Wait, its copy of Out into In, Post,
// and Receive adding In back into the source, with nothing else queued.
// gpu-us/handoff (the median) is the device's time from before the Send
// to after the Receive's add: the GPU's bubble per hand-off.
// host-us/handoff is the host's time from the Send call to the return of
// the Sync after it. Paths: blocking (the product: blocking-sync events
// waited on the exchange's thread, the device waiting for the Post),
// spin (the device writes a landed word that the engine's Wait spins on:
// the floor the blocking path is compared with), host-waits (Receive
// waits for the Post on the host, then queues the copy back).
func BenchmarkGPUExchange(b *testing.B) {
	be := gpuBackend(b)
	b.Logf("host exchange: %s", be.Device().HostExchange)
	for _, n := range []int{4096, 64 * 4096} {
		for _, path := range []string{"blocking", "spin", "host-waits"} {
			b.Run(fmt.Sprintf("%s/n=%d", path, n), func(b *testing.B) {
				if path != "host-waits" && be.g.xpath != backend.DeviceWaits {
					b.Skipf("SKIPPED: the device does not wait for Posts (%s)", be.Device().HostExchange)
				}
				ex, err := be.newExchange(n, n, path == "host-waits", path == "spin")
				if err != nil {
					b.Fatal(err)
				}
				defer ex.Close()
				benchExchange(b, be, ex, n)
			})
		}
	}
}

// benchExchange runs b.N round trips of ex (after a warm-up) and reports
// the medians.
func benchExchange(b *testing.B, be *Backend, ex *exchange, n int) {
	x := devRandom(b, be, tensor.F32, 1, n)
	defer be.Free(x)
	var e0, e1 driver.Event
	err := be.run(func(g *gpu) (err error) {
		if e0, err = g.drv.EventCreate(driver.EventDefault); err != nil {
			return err
		}
		e1, err = g.drv.EventCreate(driver.EventDefault)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	defer be.run(func(g *gpu) error { return errors.Join(g.drv.EventDestroy(e0), g.drv.EventDestroy(e1)) })

	ctx, cancel := context.WithCancel(context.Background())
	engineDone := make(chan error, 1)
	go func() {
		err := handofftest.Engine(ctx, ex, 1, 1<<62, n, n, func(_ backend.Ticket, out, in []float32) { copy(in, out) }, nil)
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		engineDone <- err
	}()
	defer func() {
		cancel()
		if err := <-engineDone; err != nil {
			b.Error(err)
		}
	}()

	record := func(e driver.Event) error {
		return be.run(func(g *gpu) error { return g.drv.EventRecord(e, g.stream) })
	}
	once := func() (onGPU, host time.Duration, err error) {
		start := time.Now()
		if err := record(e0); err != nil {
			return 0, 0, err
		}
		t, err := ex.Send(x)
		if err != nil {
			return 0, 0, err
		}
		if err := ex.Receive(x, t, true); err != nil {
			return 0, 0, err
		}
		if err := record(e1); err != nil {
			return 0, 0, err
		}
		if err := be.Sync(); err != nil {
			return 0, 0, err
		}
		host = time.Since(start)
		var ms float32
		err = be.run(func(g *gpu) (err error) {
			ms, err = g.drv.EventElapsed(e0, e1)
			return err
		})
		return time.Duration(float64(ms) * float64(time.Millisecond)), host, err
	}
	for range benchWarmup * 10 {
		if _, _, err := once(); err != nil {
			b.Fatal(err)
		}
	}
	gpus := make([]time.Duration, 0, b.N)
	hosts := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		g, h, err := once()
		if err != nil {
			b.Fatal(err)
		}
		gpus, hosts = append(gpus, g), append(hosts, h)
	}
	b.StopTimer()
	g, h := quantile(gpus, 0.5), quantile(hosts, 0.5)
	b.ReportMetric(float64(g.Nanoseconds())/1e3, "gpu-us/handoff")
	b.ReportMetric(float64(h.Nanoseconds())/1e3, "host-us/handoff")
	b.Logf("%s: %d values, %s: %.1f µs on the GPU, %.1f µs on the host (medians of %d; GPU p10 %.1f, p90 %.1f µs)",
		b.Name(), n, ex.Path(), float64(g.Nanoseconds())/1e3, float64(h.Nanoseconds())/1e3, b.N,
		float64(quantile(gpus, 0.1).Nanoseconds())/1e3, float64(quantile(gpus, 0.9).Nanoseconds())/1e3)
}

// quantile is the q-quantile of samples (sorted in place).
func quantile(samples []time.Duration, q float64) time.Duration {
	slices.Sort(samples)
	return samples[int(q*float64(len(samples)-1))]
}
