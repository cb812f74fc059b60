package layering

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"vlanode/placement"
)

// Shard is what one turn's compute needs to know: where the weights it
// reads on the GPU are, and what the CPU computes of the unit.
type Shard struct {
	// Slot holds the unit's weights, or the GPU's share of them: a DFB
	// slot, or the unit's home in this stage; NoSlot for a resident unit
	// and for one the CPU computes whole.
	Slot Slot
	// Offset is where the weights start in Slot: a home is carved from
	// its stage's arena (0 in a DFB slot).
	Offset int64
	// CPU is the CPU's share of the unit's split dimension (0: none).
	CPU int
	// Whole says the CPU computes the whole unit: the GPU reads none of
	// its weights.
	Whole bool

	unit placement.ID
	r    *Runner
	t    *turn
}

// Ready makes the compute stream's later work wait for the GPU's share of
// the weights (a split unit's compute calls it after handing its input to
// the CPU, so that the CPU does not wait for the copy). Units the CPU does
// not share are ready when their compute starts.
func (s Shard) Ready() error {
	if s.r == nil || s.t == nil {
		return errors.New("layering: ready outside a run")
	}
	if s.t.ready {
		return nil
	}
	s.t.ready = true
	return s.r.e.waitWeights(s.t)
}

// Offload hands task to the CPU engine: it runs there, in order with the
// tasks offloaded before it, while the goroutine that queues the device's
// work goes on. The task reads its input from and writes its result to the
// host (a backend.Exchange: Wait, compute, Post), and that is what orders
// it against the device's stream on a GPU; it MUST hand a result back even
// when it fails (Post anyway), or the device waits for it forever. Its
// error fails the run. The task calls computing once its input has
// arrived (after the Exchange's Wait): the engine's busy time counts from
// there, and the time before it as waiting for the device.
func (s Shard) Offload(task func(computing func()) error) error {
	if s.r == nil {
		return errors.New("layering: offload outside a run")
	}
	return s.r.offload(s.unit, task)
}

// Join takes the CPU's result back: fn queues what reads it (a Receive of
// the exchange the task posts to, adding it to the GPU's share). The
// executor calls fn once the compute's reads of its slot are queued and
// the slot released to its next copy, so that the copy does not wait for
// the CPU; on a device that times the engines (Fake), the stream's later
// work waits for the task there.
func (s Shard) Join(fn func() error) error {
	if s.r == nil || s.t == nil {
		return errors.New("layering: join outside a run")
	}
	if s.t.join != nil {
		return errors.New("layering: a compute joins the CPU once")
	}
	s.t.join = fn
	return nil
}

// HostTimer is implemented by a Device that models the CPU engine's time
// (Fake): HostStart says a task of unit starts once stream s has reached
// this point (the hand-off of its input), HostJoin that s's later work
// waits for it (the hand-back of its result).
type HostTimer interface {
	HostStart(s Stream, unit placement.ID) error
	HostJoin(s Stream, unit placement.ID) error
}

// engine is the CPU engine: one goroutine that runs offloaded tasks in
// order and keeps the first error and each task's timing.
type engine struct {
	tasks chan hostTask
	done  sync.WaitGroup

	mu    sync.Mutex
	err   error
	epoch time.Time // the Run's start: CPUTask times count from it
	spans []CPUTask // since the last drain, in order
}

type hostTask struct {
	unit placement.ID
	run  func(computing func()) error
}

func newEngine() *engine {
	en := &engine{tasks: make(chan hostTask, 1024), epoch: time.Now()}
	go en.loop()
	return en
}

func (en *engine) loop() {
	for t := range en.tasks {
		start := time.Now()
		var computing time.Time
		err := protectTask(t.run, func() {
			if computing.IsZero() {
				computing = time.Now()
			}
		})
		end := time.Now()
		if computing.IsZero() {
			computing = start
		}
		en.mu.Lock()
		ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
		en.spans = append(en.spans, CPUTask{Unit: t.unit,
			AtMs: ms(start.Sub(en.epoch)), WaitMs: ms(computing.Sub(start)), Ms: ms(end.Sub(computing))})
		if err != nil && en.err == nil {
			en.err = fmt.Errorf("layering: CPU share of %s: %w", t.unit, err)
		}
		en.mu.Unlock()
		en.done.Done()
	}
}

// protectTask runs a task, turning a panic into an error.
func protectTask(run func(func()) error, computing func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return run(computing)
}

// submit queues a task.
func (en *engine) submit(unit placement.ID, run func(func()) error) {
	en.done.Add(1)
	en.tasks <- hostTask{unit: unit, run: run}
}

// start sets the epoch of the next run's task times; the engine is idle.
func (en *engine) start(at time.Time) {
	en.mu.Lock()
	en.epoch = at
	en.mu.Unlock()
}

// drain waits for the queued tasks and returns their first error and
// timings since the last drain, resetting both.
func (en *engine) drain() ([]CPUTask, error) {
	en.done.Wait()
	en.mu.Lock()
	defer en.mu.Unlock()
	spans, err := en.spans, en.err
	en.spans, en.err = nil, nil
	return spans, err
}

// close stops the goroutine once the queued tasks have run.
func (en *engine) close() {
	en.done.Wait()
	close(en.tasks)
}
