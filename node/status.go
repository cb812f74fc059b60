package node

import (
	"time"

	"vlanode/msgs"
)

// statusLoop publishes Status now and then every StatusInterval until
// statusStop closes.
func (n *Node) statusLoop() {
	defer close(n.statusDone)
	t := time.NewTicker(n.opts.StatusInterval)
	defer t.Stop()
	for {
		n.publishStatus()
		select {
		case <-t.C:
		case <-n.statusStop:
			return
		}
	}
}

// publishStatus publishes one Status on vla.<node>.status.
func (n *Node) publishStatus() {
	data, err := msgs.Marshal(n.Status())
	if err == nil {
		err = n.nc.Publish(StatusSubject(n.opts.Name), data)
	}
	if err != nil {
		n.log.Error("publishing status failed", "err", err)
	}
}

// Status returns the node's current Status.
func (n *Node) Status() *msgs.Status {
	info := n.engine.Info()
	n.m.budget.Set(float64(info.BudgetBytes))
	return &msgs.Status{
		V:           msgs.Version,
		Node:        n.opts.Name,
		Model:       n.info.Model,
		BudgetBytes: info.BudgetBytes,
		Plan:        info.Plan,
		GPU:         n.readGPU(),
		QueueDepth:  n.sched.depth(),
		Counters:    n.m.counters(n.info.Cameras),
	}
}

// readGPU reads the GPU telemetry, or returns nil when there is none. A
// failure is logged when it starts and when it ends, not at every read.
func (n *Node) readGPU() *msgs.GPU {
	if n.opts.GPU == nil {
		return nil
	}
	g, err := n.opts.GPU.Read()
	if err != nil {
		if !n.gpuFailing.Swap(true) {
			n.log.Warn("GPU telemetry unavailable; status reports no GPU until it is back", "err", err)
		}
		return nil
	}
	if n.gpuFailing.Swap(false) {
		n.log.Info("GPU telemetry is back")
	}
	n.m.gpuMemUsed.Set(float64(g.MemoryUsedBytes))
	n.m.gpuMemFree.Set(float64(g.MemoryFreeBytes))
	n.m.gpuTemp.Set(float64(g.TemperatureC))
	return g
}
