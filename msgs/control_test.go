package msgs

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestControlRoundTrip(t *testing.T) {
	req := &ControlRequest{ID: "c1", Token: "t", Op: OpSetBudget, Budget: "8GiB"}
	b, err := Marshal(req)
	require.NoError(t, err)
	got, err := DecodeControlRequest(b)
	require.NoError(t, err)
	want := *req
	want.V = Version
	assert.Equal(t, &want, got)

	reply := &ControlReply{ID: "c1", Node: "gpu-a", BudgetBytes: 8 << 30, PreviousBudgetBytes: 16 << 30, Changed: true,
		WaitedMs: 1.5, ReplanMs: 900, Plan: &PlanSummary{Mode: "pipelined", ResidentBytes: 5 << 30, FixedBytes: 2 << 30}}
	b, err = Marshal(reply)
	require.NoError(t, err)
	r, e, err := DecodeControlReply(b)
	require.NoError(t, err)
	require.Nil(t, e)
	wantReply := *reply
	wantReply.V = Version
	assert.Equal(t, &wantReply, r)

	b, err = Marshal(NewError("c1", CodeForbidden, "wrong or missing control token"))
	require.NoError(t, err)
	r, e, err = DecodeControlReply(b)
	require.NoError(t, err)
	assert.Nil(t, r)
	assert.Equal(t, CodeForbidden, e.Err.Code)
}

func TestControlRequestErrors(t *testing.T) {
	enc := func(m map[string]any) []byte {
		b, err := msgpack.Marshal(m)
		require.NoError(t, err)
		return b
	}
	for _, c := range []struct {
		msg  map[string]any
		want string
	}{
		{map[string]any{"v": 1, "token": "t"}, "op: required"},
		{map[string]any{"v": 1, "op": "set_budget"}, "budget: set_budget needs a budget"},
		{map[string]any{"v": 1, "op": "set_budget", "budget": 8}, "budget: want string"},
		{map[string]any{"v": 1, "op": "resize"}, `op: unknown operation "resize"`},
		{map[string]any{"v": 2, "op": "get_budget"}, "unsupported protocol version 2"},
	} {
		_, err := DecodeControlRequest(enc(c.msg))
		assert.ErrorContains(t, err, c.want)
	}
	// Unknown keys are skipped; a missing token decodes (the node refuses it).
	r, err := DecodeControlRequest(enc(map[string]any{"v": 1, "op": "get_budget", "extra": []any{1, 2}}))
	require.NoError(t, err)
	assert.Equal(t, "", r.Token)
}
