package cpu

import (
	"fmt"

	"vlanode/backend"
)

// Embedding gathers rows ids of table [V, H] (F32, F16 or BF16) into
// dst [len(ids), H] as float32. Every id is checked before anything is
// written; one out of range is an error that names it and V.
func (b *Backend) Embedding(dst, table backend.Tensor, ids []int32) error {
	const op = "embedding"
	if b.closed.Load() {
		return ErrClosed
	}
	d, err := dstOf(op, "dst", dst)
	if err != nil {
		return err
	}
	tt, err := floatOf(op, "table", table)
	if err != nil {
		return err
	}
	vocab, h := tt.matrix()
	dr, dc := d.matrix()
	if dr != len(ids) || dc != h {
		return fmt.Errorf("cpu: embedding: dst %v does not hold %d rows of table %v", d, len(ids), tt)
	}
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("cpu: embedding: id %d (position %d) is outside the vocabulary of %d", id, i, vocab)
		}
	}
	if shares(d.f32, tt.f32) {
		return fmt.Errorf("cpu: embedding: dst %v overlaps the table", d)
	}
	return b.pool.ranges(len(ids), elemGrain/max(1, h), func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			tt.widen(d.f32[i*h:(i+1)*h], int(ids[i])*h)
		}
	})
}
