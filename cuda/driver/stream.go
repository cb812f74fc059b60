package driver

// #include "shim.h"
import "C"

// StreamCreate makes a stream (flags: StreamDefault or StreamNonBlocking).
// It MUST be released with StreamDestroy.
func (d *Driver) StreamCreate(flags uint) (Stream, error) {
	var s C.uintptr_t
	if err := d.check("cuStreamCreate", C.vla_cuStreamCreate(d.f.streamCreate, &s, C.unsigned(flags))); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// StreamDestroy releases a stream; queued work still completes.
func (d *Driver) StreamDestroy(s Stream) error {
	return d.check("cuStreamDestroy_v2", C.vla_cuStreamDestroy(d.f.streamDestroy, C.uintptr_t(s)))
}

// StreamSynchronize waits until everything queued on s has run. Errors of
// earlier asynchronous work surface here.
func (d *Driver) StreamSynchronize(s Stream) error {
	return d.check("cuStreamSynchronize", C.vla_cuStreamSynchronize(d.f.streamSynchronize, C.uintptr_t(s)))
}

// StreamWaitEvent makes work queued on s after this call wait for e.
func (d *Driver) StreamWaitEvent(s Stream, e Event) error {
	return d.check("cuStreamWaitEvent", C.vla_cuStreamWaitEvent(d.f.streamWaitEvent, C.uintptr_t(s), C.uintptr_t(e), 0))
}

// EventCreate makes an event (flags: EventDefault, EventDisableTiming). It
// MUST be released with EventDestroy.
func (d *Driver) EventCreate(flags uint) (Event, error) {
	var e C.uintptr_t
	if err := d.check("cuEventCreate", C.vla_cuEventCreate(d.f.eventCreate, &e, C.unsigned(flags))); err != nil {
		return 0, err
	}
	return Event(e), nil
}

// EventDestroy releases an event.
func (d *Driver) EventDestroy(e Event) error {
	return d.check("cuEventDestroy_v2", C.vla_cuEventDestroy(d.f.eventDestroy, C.uintptr_t(e)))
}

// EventRecord marks the point of s's queue that e stands for.
func (d *Driver) EventRecord(e Event, s Stream) error {
	return d.check("cuEventRecord", C.vla_cuEventRecord(d.f.eventRecord, C.uintptr_t(e), C.uintptr_t(s)))
}

// EventSynchronize waits until the work before e's record has run.
func (d *Driver) EventSynchronize(e Event) error {
	return d.check("cuEventSynchronize", C.vla_cuEventSynchronize(d.f.eventSynchronize, C.uintptr_t(e)))
}

// EventDone reports whether the work before e's record has run, without
// waiting.
func (d *Driver) EventDone(e Event) (bool, error) {
	s := C.vla_cuEventQuery(d.f.eventQuery, C.uintptr_t(e))
	if s == ErrNotReady {
		return false, nil
	}
	if err := d.check("cuEventQuery", s); err != nil {
		return false, err
	}
	return true, nil
}

// EventElapsed is the time in milliseconds between two recorded, completed
// events made without EventDisableTiming.
func (d *Driver) EventElapsed(start, end Event) (float32, error) {
	var ms C.float
	err := d.check("cuEventElapsedTime_v2", C.vla_cuEventElapsedTime(d.f.eventElapsedTime, &ms, C.uintptr_t(start), C.uintptr_t(end)))
	return float32(ms), err
}
