package driver

// #include "shim.h"
import "C"

import "fmt"

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

// Conditions of StreamWaitValue32 (CUstreamWaitValue_flags).
const (
	// WaitValueGEQ waits until (int32)(*addr - value) >= 0: a cyclic
	// comparison, so a counter may wrap as long as the two stay within
	// 2^31 of each other.
	WaitValueGEQ = 0
	WaitValueEQ  = 1 // until *addr == value
)

// WriteValueDefault is the flag of StreamWriteValue32 whose write follows
// a system-wide memory fence: the work queued before it is visible first.
const WriteValueDefault = 0

// CanWaitValue says whether the driver has the V2 stream memory
// operations (cuStreamWaitValue32_v2, cuStreamWriteValue32_v2).
func (d *Driver) CanWaitValue() bool {
	return d.f.streamWaitValue32 != nil && d.f.streamWriteValue32 != nil
}

// StreamWaitValue32 makes the work queued on s after this call wait until
// the 32-bit word at addr (device memory, or host memory mapped with
// HostAllocDeviceMap, through HostDevicePtr) meets the condition flags
// (WaitValueGEQ, WaitValueEQ) against value. Nothing on the host waits.
// Improper use deadlocks the stream: something must make the condition
// true.
func (d *Driver) StreamWaitValue32(s Stream, addr DevicePtr, value uint32, flags uint) error {
	if d.f.streamWaitValue32 == nil {
		return fmt.Errorf("cuda: %s has no cuStreamWaitValue32_v2", d.lib.Name)
	}
	return d.check("cuStreamWaitValue32_v2", C.vla_cuStreamWaitValue32(d.f.streamWaitValue32, C.uintptr_t(s), C.vla_dptr(addr), C.uint32_t(value), C.unsigned(flags)))
}

// StreamWriteValue32 queues on s a write of value to the 32-bit word at
// addr (as for StreamWaitValue32); flags: WriteValueDefault.
func (d *Driver) StreamWriteValue32(s Stream, addr DevicePtr, value uint32, flags uint) error {
	if d.f.streamWriteValue32 == nil {
		return fmt.Errorf("cuda: %s has no cuStreamWriteValue32_v2", d.lib.Name)
	}
	return d.check("cuStreamWriteValue32_v2", C.vla_cuStreamWriteValue32(d.f.streamWriteValue32, C.uintptr_t(s), C.vla_dptr(addr), C.uint32_t(value), C.unsigned(flags)))
}
